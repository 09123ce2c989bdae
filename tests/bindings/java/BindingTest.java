// Tests of the Java binding, run by ctest against photon.jar. Same modes as the other languages'
// binding tests (see tests/bindings/python/binding_test.py):
//   BindingTest test MODEL WORKDIR SHIPPED | memory MODEL | save MODEL STATE OUT
//               | restore MODEL STATE OUT (SHIPPED: the shipped model, for inputs longer than the
//               context)
import com.photon.Mode;
import com.photon.Model;
import com.photon.PhotonException;
import com.photon.Session;
import com.photon.SessionOptions;
import com.photon.StopReason;
import com.photon.Token;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;

public final class BindingTest {
  static final String PROMPT = "In the beginning God created the heaven and the earth.";
  // Prompts of different lengths for the batched prefill.
  static final List<String> BATCH_PROMPTS =
      List.of(PROMPT, "And the earth was without form.", "Let there be light.");
  static final int WARMUP = 20;
  static final int LOOPS = 200;
  static final int LATE_LOOPS = 100;
  // RSS growth allowed over the loops, far below a leak's: a model kept alive holds ~30 MB.
  static final double CLOSED_BOUND_MB = 64;
  static final double LATE_BOUND_MB = 128;

  static final class CallbackFailure extends RuntimeException {
    private static final long serialVersionUID = 1L;

    CallbackFailure(String message) {
      super(message);
    }
  }

  interface Call {
    void run() throws Exception;
  }

  static void check(boolean condition, String what) {
    if (!condition) throw new AssertionError(what);
  }

  static SessionOptions sampling() {
    return new SessionOptions().setTemperature(0.8f).setSeed(42);
  }

  static Session prompted(Model model) {
    try (SessionOptions options = sampling()) {
      Session session = new Session(model, options);
      session.prefill(PROMPT);
      return session;
    }
  }

  static PhotonException expectError(Call call, String what, String... statusNames) {
    try {
      call.run();
    } catch (PhotonException e) {
      check(Arrays.asList(statusNames).contains(e.getStatusName()),
          what + ": expected " + Arrays.toString(statusNames) + ", got " + e.getStatusName()
              + ": " + e.getMessage());
      check(e.getStatus() > 0, what + ": status " + e.getStatus());
      return e;
    } catch (Exception e) {
      throw new AssertionError(what + ": unexpected " + e, e);
    }
    throw new AssertionError(what + ": no PhotonException thrown");
  }

  static List<Integer> ids(List<Token> tokens) {
    return tokens.stream().map(Token::id).collect(Collectors.toList());
  }

  static void testModel(Model model) {
    check(model.vocabSize() > 0 && model.levels() >= 0, "model properties");
    check(model.arch().equals("photon") || model.arch().equals("vanilla"), model.arch());
    check(model.device().equals("cpu"), model.device());
    check(model.configJson().contains("\"vocab_size\""), "config");
    int[] ids = model.tokenize(PROMPT);
    check(ids[0] == model.bos() && model.detokenize(ids).equals(PROMPT), "tokenize round trip");
    check(Model.version().split("\\.").length == 3, "version");
  }

  static void testStreaming(Model model) {
    try (Session pushed = prompted(model); Session pulled = prompted(model)) {
      List<Token> received = new ArrayList<>();
      check(pushed.generate(12, token -> received.add(token)) == 12, "generate's count");
      check(pushed.stopReason() == StopReason.LENGTH, "stop: " + pushed.stopReason());
      List<Token> streamed = new ArrayList<>();
      for (Token token : pulled.tokens(12)) streamed.add(token);
      check(ids(received).equals(ids(streamed)), "callback and iterator produce the same tokens");
      check(Arrays.equals(pushed.history(), pulled.history()), "same history");
      String text = received.stream().map(Token::piece).collect(Collectors.joining());
      check(model.detokenize(pushed.history()).equals(PROMPT + text), "pieces: " + text);
      check(received.stream().allMatch(t -> t.logprob() <= 0), "log probabilities");
      check(pulled.stream(3).count() == 3 && pulled.stream(0).count() == 0, "stream budgets");
    }
  }

  static void testCancel(Model model) {
    try (Session session = prompted(model)) {
      int start = session.position();
      List<Token> seen = new ArrayList<>();
      int count = session.generate(10, token -> seen.add(token) && seen.size() < 3);
      check(count == 3 && session.stopReason() == StopReason.CALLBACK,
          "returning false stops: " + count + ", " + session.stopReason());
      check(session.position() == start + 3, "the stopping token is kept");
      count = session.generate(10, token -> {
        session.cancel();
        return true;
      });
      check(session.stopReason() == StopReason.CANCELLED && count >= 1 && count < 10,
          "cancel() from the callback: " + count + ", " + session.stopReason());
    }
  }

  static void testCallbackException(Model model) {
    try (Session session = prompted(model)) {
      int start = session.position();
      List<Token> seen = new ArrayList<>();
      try {
        session.generate(10, token -> {
          seen.add(token);
          if (seen.size() == 2) throw new CallbackFailure("stop here");
          return true;
        });
        throw new AssertionError("the callback's exception was swallowed");
      } catch (CallbackFailure e) {
        check(e.getMessage().equals("stop here"), "the very exception reaches the caller");
      }
      check(session.position() == start + 2 && session.stopReason() == StopReason.CALLBACK,
          "generation stopped at the exception");
      check(session.generate(2) == 2, "the session stays usable");
    }
  }

  static void testBatch(Model model) {
    List<Integer> expected;
    try (Session solo = prompted(model)) {
      expected = solo.stream(6).map(Token::id).collect(Collectors.toList());
    }
    try (Session first = prompted(model); Session second = prompted(model)) {
      List<List<Integer>> received = List.of(new ArrayList<>(), new ArrayList<>());
      int[] counts = Session.generateBatch(List.of(first, second), 6,
          (index, token) -> received.get(index).add(token.id()));
      check(Arrays.equals(counts, new int[] {6, 6}) && received.get(0).equals(expected)
          && received.get(1).equals(expected), "a batch gives each session its own tokens");
      counts = Session.generateBatch(List.of(first, second), 4, (index, token) -> index == 1);
      check(Arrays.equals(counts, new int[] {1, 4}) && first.stopReason() == StopReason.CALLBACK,
          "false stops one session of the batch: " + Arrays.toString(counts));
      counts = Session.generateBatch(List.of(first, second), 2, null);
      check(Arrays.equals(counts, new int[] {2, 2}), "without a callback");
    }
    testPrefillBatch(model);
  }

  // prefillBatch leaves each session as prefill alone would (same position, same greedy tokens),
  // and a bad token fails the batch before any session changes.
  static void testPrefillBatch(Model model) {
    List<int[]> prompts = new ArrayList<>();
    List<Integer> positions = new ArrayList<>();
    List<List<Integer>> expected = new ArrayList<>();
    for (String text : BATCH_PROMPTS) {
      int[] tokens = model.tokenize(text);
      try (Session solo = new Session(model)) {
        solo.prefill(tokens);
        prompts.add(tokens);
        positions.add(solo.position());
        expected.add(ids(solo.stream(6).collect(Collectors.toList())));
      }
    }
    try (Session first = new Session(model); Session second = new Session(model);
        Session third = new Session(model)) {
      List<Session> sessions = List.of(first, second, third);
      Session.prefillBatch(sessions, prompts);
      List<Integer> batchedPositions =
          sessions.stream().map(Session::position).collect(Collectors.toList());
      check(batchedPositions.equals(positions),
          "prefillBatch positions: " + batchedPositions + " vs " + positions);
      List<List<Integer>> batched = new ArrayList<>();
      for (Session session : sessions) {
        batched.add(ids(session.stream(6).collect(Collectors.toList())));
      }
      check(batched.equals(expected),
          "prefillBatch gives each session its own tokens: " + batched + " vs " + expected);
      List<Integer> before = sessions.stream().map(Session::position).collect(Collectors.toList());
      List<int[]> bad = List.of(new int[] {1}, new int[] {model.bos(), model.vocabSize()},
          new int[] {2});
      PhotonException e = expectError(() -> Session.prefillBatch(sessions, bad),
          "a token outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
      check(e.getMessage().contains("session 1"), "the message names the session: " + e);
      check(sessions.stream().map(Session::position).collect(Collectors.toList()).equals(before),
          "a bad token leaves every session unchanged");
      expectError(() -> Session.prefillBatch(sessions, prompts.subList(0, 2)),
          "fewer token lists than sessions", "PHOTON_ERR_INVALID_ARGUMENT");
    }
  }

  // Teacher forcing gives each token the log-probability that HierGen generation (whose logits
  // equal teacher forcing) reported for it.
  static void testScore(Model model) {
    try (SessionOptions hiergen = new SessionOptions().setMode(Mode.HIERGEN);
        Session session = new Session(model, hiergen)) {
      session.prefill(PROMPT);
      int start = session.position();
      List<Token> generated = new ArrayList<>();
      session.generate(6, token -> generated.add(token));
      float[] logprobs = model.score(session.history());
      check(logprobs.length == start + 6 && Float.isNaN(logprobs[0]), "score's shape");
      for (int i = 0; i < generated.size(); ++i) {
        check(Math.abs(generated.get(i).logprob() - logprobs[start + i]) < 1e-3,
            "score " + logprobs[start + i] + " vs generation " + generated.get(i).logprob());
      }
      expectError(() -> model.score(new int[0]), "nothing to score", "PHOTON_ERR_INVALID_ARGUMENT");
    }
  }

  // Past the context, on the shipped model (a context of 256 tokens, its tokenizer beside it):
  // scoring in sliding windows (a later window scores as its own tokens do), the context shift;
  // and the embedded tokenizer, loaded with verification.
  static void testLongInputs(String shippedPath) throws IOException {
    try (Model model = new Model(shippedPath, "cpu", 0, true)) {
      int context = model.contextLength();
      int[] ids = model.tokenize(String.join(" ", Collections.nCopies(2 * context / 10, PROMPT)));
      check(ids.length > context, ids.length + " tokens exceed the context " + context);
      int stride = context / 3;
      float[] scored = model.scoreWithStride(ids, stride);
      // Window 1 covers [stride, stride + context) and scores the tokens after window 0's end.
      int end = Math.min(ids.length, stride + context);
      float[] window = model.score(Arrays.copyOfRange(ids, stride, end));
      for (int i = context; i < end; ++i) {
        check(scored[i] == window[i - stride],
            "token " + i + ": " + scored[i] + " vs its window's " + window[i - stride]);
      }
      check(Arrays.equals(model.score(Arrays.copyOf(ids, context)),
                Arrays.copyOf(model.score(ids), context)),
          "window 0 is the first context");
      expectError(() -> model.scoreWithStride(ids, context), "a stride of the whole context",
          "PHOTON_ERR_INVALID_ARGUMENT");

      try (SessionOptions options =
               sampling().setIgnoreEos(true).setContextLength(16).setContextShift(true);
          Session session = new Session(model, options)) {
        session.prefill(PROMPT);
        check(session.generate(40) == 40 && session.stopReason() == StopReason.LENGTH
                && session.position() <= 16,
            "the context shift goes on: " + session.stopReason() + " at " + session.position());
      }

      byte[] shipped = Files.readAllBytes(Path.of(shippedPath).resolveSibling("tokenizer.model"));
      check(Arrays.equals(model.tokenizerModel(), shipped),
          "the embedded tokenizer is models/tokenizer.model");
    }
  }

  // 16-bit KV caches: chosen by name, reported by the session, kept by a restored one.
  static void testKvType(Model model) {
    try (Session session = new Session(model)) {
      check(session.kvType().equals("f32"), "the default kv type: " + session.kvType());
    }
    try (SessionOptions options = sampling().setIgnoreEos(true).setKvType("bf16");
        Session session = new Session(model, options)) {
      check(session.kvType().equals("bf16"), "a bf16 session's kv type: " + session.kvType());
      session.prefill(PROMPT);
      List<Token> tokens = session.stream(4).collect(Collectors.toList());
      check(tokens.size() == 4 && tokens.stream().allMatch(t -> t.logprob() <= 0),
          "a bf16 session generates: " + tokens);
      try (Session restored = Session.restore(model, session.save())) {
        check(restored.kvType().equals("bf16"), "a restored session's type: " + restored.kvType());
      }
    }
    try (SessionOptions options = new SessionOptions().setKvType("f16");
        Session session = new Session(model, options)) {
      check(session.kvType().equals("f16"), "an f16 session's kv type: " + session.kvType());
    }
    try (SessionOptions options = new SessionOptions()) {
      PhotonException e = expectError(() -> options.setKvType("f8"), "kv type 'f8'",
          "PHOTON_ERR_INVALID_ARGUMENT");
      check(e.getMessage().contains("f8") && e.getMessage().contains("bf16"),
          "the message names the kv type: " + e.getMessage());
    }
  }

  // cancel() from another thread stops a generate() without callback, and a second call on the
  // busy session fails instead of racing.
  static void testThreads(Model model) throws InterruptedException {
    try (SessionOptions endless = new SessionOptions().setIgnoreEos(true);
        Session session = new Session(model, endless)) {
      session.prefill(PROMPT);
      int budget = model.contextLength() - session.position();
      int[] count = {-1};
      CountDownLatch started = new CountDownLatch(1);
      Thread worker = new Thread(() -> count[0] = session.generate(budget, token -> {
        started.countDown();
        return true;
      }));
      worker.start();
      started.await();
      expectError(() -> session.prefill(new int[] {1}), "a call while another thread's runs",
          "PHOTON_ERR_INVALID_ARGUMENT");
      while (worker.isAlive()) { // each call clears an earlier cancel on entry: repeat it
        session.cancel();
        worker.join(10);
      }
      check(session.stopReason() == StopReason.CANCELLED && count[0] >= 1 && count[0] < budget,
          "cancel() from another thread: " + session.stopReason() + " after " + count[0]);
    }
  }

  static void testErrors(Model model, Path modelPath, Path workdir) throws IOException {
    String missing = workdir.resolve("missing.photon").toString();
    PhotonException e = expectError(() -> new Model(missing), "missing file", "PHOTON_ERR_IO");
    check(e.getMessage().contains(missing), "the message names the file: " + e.getMessage());
    e = expectError(() -> new Model(modelPath.toString(), "gpu"), "bad device",
        "PHOTON_ERR_INVALID_ARGUMENT");
    check(e.getMessage().contains("'gpu'"), "the message names the device: " + e.getMessage());

    byte[] data = Files.readAllBytes(modelPath);
    Path truncated = workdir.resolve("truncated.photon");
    Files.write(truncated, Arrays.copyOf(data, data.length / 2));
    e = expectError(() -> new Model(truncated.toString()), "truncated", "PHOTON_ERR_TRUNCATED");
    check(e.getMessage().contains(truncated.toString()), "the message names the file");
    Path garbled = workdir.resolve("garbled.photon");
    data[100] ^= (byte) 0xFF;
    Files.write(garbled, data);
    expectError(() -> new Model(garbled.toString()), "damaged header", "PHOTON_ERR_CORRUPT");

    byte[] garbage = "not a session state ".repeat(8).getBytes(StandardCharsets.UTF_8);
    expectError(() -> Session.restore(model, garbage), "restore of garbage",
        "PHOTON_ERR_BAD_IDENTIFIER", "PHOTON_ERR_TRUNCATED", "PHOTON_ERR_CORRUPT");
    Session closed;
    try (Session session = new Session(model)) {
      expectError(() -> session.prefill(new int[] {model.vocabSize()}), "bad token",
          "PHOTON_ERR_BAD_TOKEN");
      closed = session;
    }
    try {
      closed.generate(1);
      throw new AssertionError("use after close");
    } catch (IllegalStateException expected) {
      check(expected.getMessage().contains("closed"), expected.getMessage());
    }
    closed.close(); // idempotent
  }

  static void testSaveRestore(Model model, Path workdir) {
    byte[] state;
    int[] history;
    List<Integer> expected;
    Path path = workdir.resolve("java.state");
    try (Session session = prompted(model)) {
      session.generate(6);
      state = session.save();
      session.saveFile(path.toString());
      history = session.history();
      expected = session.stream(8).map(Token::id).collect(Collectors.toList());
    }
    check(state.length > 0, "save() gives bytes");
    for (Session restored :
        List.of(Session.restore(model, state), Session.restoreFile(model, path.toString()))) {
      try (restored) {
        check(Arrays.equals(restored.history(), history), "the restored history");
        check(restored.stream(8).map(Token::id).collect(Collectors.toList()).equals(expected),
            "the restored continuation");
      }
    }
    try (Session restored = Session.restore(model, state);
        SessionOptions greedy = new SessionOptions()) {
      restored.setSampler(greedy);
      check(restored.generate(2) == 2 && restored.mode() != Mode.AUTO, "a restored session");
    }
  }

  static double rssMb() throws IOException {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("VmRSS:")) return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
    }
    throw new AssertionError("no VmRSS");
  }

  static void churn(String modelPath, int iteration, boolean close) {
    Model model = new Model(modelPath);
    SessionOptions small = new SessionOptions().setContextLength(256).setSeed(iteration);
    Session session = new Session(model, small);
    session.prefill(new int[] {model.bos()});
    session.generate(1);
    Session restored = Session.restore(model, session.save());
    check(restored.tokens(1).iterator().hasNext(), "a restored token");
    if (close) { // in a different order each time: a session keeps its model alive
      List<AutoCloseable> all = List.of(model, session, restored, small);
      try {
        all.get(iteration % 3).close();
        for (AutoCloseable item : all) item.close();
      } catch (Exception e) {
        throw new AssertionError(e);
      }
    }
  }

  static void testMemory(String modelPath) throws IOException {
    for (int i = 0; i < WARMUP; ++i) churn(modelPath, i, true);
    System.gc();
    double baseline = rssMb();
    for (int i = 0; i < LOOPS; ++i) churn(modelPath, i, true);
    double closed = rssMb();
    for (int i = 0; i < LATE_LOOPS; ++i) { // nothing closed: finalizers release the objects
      churn(modelPath, i, false);
      if (i % 10 == 0) System.gc();
    }
    // Finalizers run on their own thread after a collection has found their objects, so one
    // round may leave a few models alive (RSS then reads 150-200 MB high, about one run in four
    // on a loaded machine): a leak stays whatever the number of rounds, garbage does not.
    double late = Double.MAX_VALUE;
    int rounds = 0;
    for (; rounds < 10 && late - baseline >= LATE_BOUND_MB; ++rounds) {
      System.gc();
      System.runFinalization();
      late = Math.min(late, rssMb());
      try {
        Thread.sleep(50);
      } catch (InterruptedException e) {
        throw new AssertionError(e);
      }
    }
    System.out.printf("rss: %.1f MB after warm-up, %.1f MB after %d closed loops, %.1f MB after"
        + " %d collected ones (%d collection rounds)%n", baseline, closed, LOOPS, late, LATE_LOOPS,
        rounds);
    check(closed - baseline < CLOSED_BOUND_MB && late - baseline < LATE_BOUND_MB, "memory grows");
  }

  static void testThreads(Model model, String modelPath) {
    List<Integer> expected;
    try (Session session = prompted(model)) {
      expected = session.stream(8).map(Token::id).collect(Collectors.toList());
    }
    try (Model single = new Model(modelPath, 1); Session session = prompted(single)) {
      List<Integer> got = session.stream(8).map(Token::id).collect(Collectors.toList());
      check(got.equals(expected), "one thread gives the same tokens: " + got + " " + expected);
    }
    expectError(() -> new Model(modelPath, -1), "negative threads", "PHOTON_ERR_INVALID_ARGUMENT");
  }

  static void writeContinuation(Session session, String out) throws IOException {
    String ids = session.stream(8).map(t -> Integer.toString(t.id()))
        .collect(Collectors.joining(" "));
    Files.writeString(Path.of(out), ids + "\n");
  }

  public static void main(String[] args) throws IOException, InterruptedException {
    String mode = args[0];
    String modelPath = args[1];
    switch (mode) {
      case "test" -> {
        Path workdir = Files.createDirectories(Path.of(args[2]));
        try (Model model = new Model(modelPath)) {
          testModel(model);
          System.out.println("ok testModel");
          testStreaming(model);
          System.out.println("ok testStreaming");
          testCancel(model);
          System.out.println("ok testCancel");
          testCallbackException(model);
          System.out.println("ok testCallbackException");
          testBatch(model);
          System.out.println("ok testBatch");
          testScore(model);
          System.out.println("ok testScore");
          testKvType(model);
          System.out.println("ok testKvType");
          testLongInputs(args[3]);
          System.out.println("ok testLongInputs");
          testThreads(model);
          System.out.println("ok testThreads");
          testErrors(model, Path.of(modelPath), workdir);
          System.out.println("ok testErrors");
          testSaveRestore(model, workdir);
          System.out.println("ok testSaveRestore");
          testThreads(model, modelPath);
          System.out.println("ok testThreads");
        }
      }
      case "memory" -> testMemory(modelPath);
      case "save" -> {
        try (Model model = new Model(modelPath); Session session = prompted(model)) {
          session.generate(5);
          session.saveFile(args[2]);
          writeContinuation(session, args[3]);
        }
      }
      case "restore" -> {
        try (Model model = new Model(modelPath);
            Session session = Session.restoreFile(model, args[2])) {
          writeContinuation(session, args[3]);
        }
      }
      default -> throw new IllegalArgumentException("unknown mode " + mode);
    }
  }
}
