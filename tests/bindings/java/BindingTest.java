// Tests of the Java binding, run by ctest against photon.jar. Same modes as the other languages'
// binding tests (see tests/bindings/python/binding_test.py):
//   BindingTest test MODEL WORKDIR SHIPPED | memory MODEL | save MODEL STATE OUT
//               | restore MODEL STATE OUT | engine MODEL | engine-memory MODEL
//               | engine-exit MODEL open|closed return|exit (SHIPPED: the shipped model, for
//               inputs longer than the context)
import com.photon.BusyException;
import com.photon.Engine;
import com.photon.EngineOptions;
import com.photon.EngineStats;
import com.photon.Mode;
import com.photon.Model;
import com.photon.PhotonException;
import com.photon.Request;
import com.photon.RequestOptions;
import com.photon.RequestState;
import com.photon.RequestStats;
import com.photon.ScoredToken;
import com.photon.Session;
import com.photon.SessionOptions;
import com.photon.StopReason;
import com.photon.Token;
import com.photon.TopLogprob;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
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

  // cancel() from another thread ends a pull loop (tokens()) at its next pull, with CANCELLED. The
  // loop waits at its third token until the other thread has cancelled, so that the request lands
  // inside the loop however the threads are scheduled; every wait is bounded. A cancel() made
  // before a loop ends it at its first pull, and pulling again resumes.
  static void testCancelIterator(Model model) throws InterruptedException {
    try (SessionOptions endless = new SessionOptions().setIgnoreEos(true);
        Session session = new Session(model, endless);
        Session alone = new Session(model, endless)) {
      session.prefill(PROMPT);
      alone.prefill(PROMPT);
      List<Integer> expected = ids(alone.stream(8).collect(Collectors.toList()));
      CountDownLatch third = new CountDownLatch(1);
      CountDownLatch cancelled = new CountDownLatch(1);
      Thread canceller = new Thread(() -> {
        try {
          if (third.await(60, TimeUnit.SECONDS)) session.cancel();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        cancelled.countDown();
      });
      canceller.start();
      List<Integer> pulled = new ArrayList<>();
      for (Token token : session.tokens(200)) { // a budget the cancellation must cut short
        pulled.add(token.id());
        if (pulled.size() == 3) {
          third.countDown();
          check(cancelled.await(60, TimeUnit.SECONDS), "the other thread cancelled in a minute");
        }
      }
      third.countDown();
      canceller.join();
      check(pulled.equals(expected.subList(0, 3)) && session.stopReason() == StopReason.CANCELLED,
          "cancel() from another thread ends the loop: " + pulled.size() + " tokens, "
              + session.stopReason());
      session.cancel();
      check(session.stream(5).count() == 0 && session.stopReason() == StopReason.CANCELLED,
          "a cancel() before a loop ends it at its first pull");
      check(ids(session.stream(5).collect(Collectors.toList())).equals(expected.subList(3, 8)),
          "pulling again resumes");
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

  // scoreTop gives each token score()'s log-probability and its position's k alternatives, the
  // most likely first; the token's own value among them is its log-probability exactly; the first
  // token has none; k outside [1, the vocabulary] is an error.
  static void testScoreTop(Model model) {
    int[] ids;
    try (SessionOptions greedy = new SessionOptions().setIgnoreEos(true);
        Session session = new Session(model, greedy)) {
      session.prefill(PROMPT);
      session.generate(6);  // greedy: the drawn tokens are among their alternatives
      ids = session.history();
    }
    float[] plain = model.score(ids);
    List<ScoredToken> scored = model.scoreTop(ids, TOP_K);
    check(scored.size() == ids.length, "a ScoredToken per token: " + scored);
    check(scored.get(0).id() == ids[0] && Float.isNaN(scored.get(0).logprob())
        && scored.get(0).topLogprobs().isEmpty(), "the first token has none: " + scored.get(0));
    int among = 0;
    for (int i = 1; i < ids.length; ++i) {
      ScoredToken token = scored.get(i);
      List<TopLogprob> top = token.topLogprobs();
      check(token.id() == ids[i] && token.logprob() == plain[i],
          "score's log-probability: " + token + " vs " + plain[i]);
      check(top.size() == TOP_K && top.stream().map(TopLogprob::id).distinct().count() == TOP_K,
          TOP_K + " alternatives of distinct ids: " + token);
      for (int j = 1; j < top.size(); ++j) {
        TopLogprob a = top.get(j - 1);
        TopLogprob b = top.get(j);
        check(a.logprob() > b.logprob() || (a.logprob() == b.logprob() && a.id() < b.id()),
            "the most likely first: " + token);
      }
      for (TopLogprob alternative : top) {
        if (alternative.id() != token.id()) continue;
        check(alternative.logprob() == token.logprob(), "the token's value among them: " + token);
        ++among;
      }
    }
    check(among > 0, "the greedy tokens are among their alternatives: " + scored);
    for (int k : new int[] {0, model.vocabSize() + 1}) {
      expectError(() -> model.scoreTop(ids, k), "scoreTop with k = " + k,
          "PHOTON_ERR_INVALID_ARGUMENT");
    }
    expectError(() -> model.scoreTop(new int[0], TOP_K), "nothing to score with alternatives",
        "PHOTON_ERR_INVALID_ARGUMENT");
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
      List<ScoredToken> windowed = model.scoreTopWithStride(ids, 2, stride);
      for (int i = 1; i < ids.length; ++i) {
        check(windowed.get(i).logprob() == scored[i] && windowed.get(i).topLogprobs().size() == 2,
            "scoreTopWithStride scores token " + i + " as scoreWithStride: " + windowed.get(i));
      }

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

  static final int SAMPLER_TOKENS = 8;

  // The token ids a greedy session generates after PROMPT with options, which it closes.
  static List<Integer> greedyTokens(Model model, SessionOptions options) {
    try (Session session = new Session(model, options)) {
      session.prefill(PROMPT);
      return session.stream(SAMPLER_TOKENS).map(Token::id).collect(Collectors.toList());
    } finally {
      options.close();
    }
  }

  // Logit biases and presence / frequency penalties reach the sampler, each value with its token
  // and its penalty. Greedy decoding shows it: a bias of -100 bars the unbiased first token and
  // one of +100 forces its token; a frequency penalty of -100 (a gain of 100 per occurrence)
  // repeats the prompt's most frequent token; presence -100 with frequency +60 favours the ids
  // that occur once in the window (a gain of 40) over the others (a loss of 20 or more).
  static void testSamplerSettings(Model model) {
    List<Integer> prompt =
        Arrays.stream(model.tokenize(PROMPT)).boxed().collect(Collectors.toList());
    List<Integer> plain = greedyTokens(model, greedy());
    int first = plain.get(0);
    int forced = prompt.get(1);
    check(!prompt.contains(first) && forced != first,
        "the unbiased greedy run starts outside the prompt: " + plain);
    List<Integer> barred =
        greedyTokens(model, greedy().setLogitBias(new int[] {first}, new float[] {-100}));
    check(barred.get(0) != first, "a bias of -100 bars token " + first + ": " + barred);
    List<Integer> paired = greedyTokens(
        model, greedy().setLogitBias(new int[] {first, forced}, new float[] {-100, 100}));
    check(paired.equals(Collections.nCopies(SAMPLER_TOKENS, forced)),
        "a bias of +100 forces token " + forced + ": " + paired);
    SessionOptions cleared = greedy().setLogitBias(new int[] {forced}, new float[] {100});
    check(cleared.setLogitBias(new int[0], new float[0]) == cleared, "setLogitBias chains");
    check(greedyTokens(model, cleared).equals(plain), "empty arrays clear the biases");

    int common = prompt.stream()
                     .max(Comparator.comparingInt(token -> Collections.frequency(prompt, token)))
                     .get();
    check(prompt.stream().allMatch(token -> token == common
              || Collections.frequency(prompt, token) < Collections.frequency(prompt, common)),
        "the prompt has one most frequent token: " + prompt);
    List<Integer> repeated = greedyTokens(model, greedy().setFrequencyPenalty(-100));
    check(repeated.equals(Collections.nCopies(SAMPLER_TOKENS, common)),
        "frequency -100 repeats " + common + ": " + repeated);
    List<Integer> mixed =
        greedyTokens(model, greedy().setPresencePenalty(-100).setFrequencyPenalty(60));
    List<Integer> window = new ArrayList<>(prompt);
    window.addAll(mixed);
    for (int i = 0; i < mixed.size(); ++i) {
      check(Collections.frequency(window.subList(0, prompt.size() + i), mixed.get(i)) == 1,
          "presence -100 and frequency +60 favour the ids seen once: " + mixed);
    }

    try (SessionOptions options = new SessionOptions()) {
      PhotonException e =
          expectError(() -> options.setLogitBias(new int[] {first, forced}, new float[] {1}),
              "2 tokens with 1 bias", "PHOTON_ERR_INVALID_ARGUMENT");
      check(e.getMessage().contains("2 tokens") && e.getMessage().contains("1 biases"),
          "the counts named: " + e.getMessage());
      expectError(() -> options.setLogitBias(new int[] {first}, new float[] {Float.NaN}),
          "a NaN bias", "PHOTON_ERR_INVALID_ARGUMENT");
      expectError(() -> options.setPresencePenalty(Float.POSITIVE_INFINITY),
          "an infinite presence penalty", "PHOTON_ERR_INVALID_ARGUMENT");
      expectError(() -> options.setFrequencyPenalty(Float.NaN), "a NaN frequency penalty",
          "PHOTON_ERR_INVALID_ARGUMENT");
      try {
        options.setLogitBias(new int[] {first}, null);
        throw new AssertionError("no NullPointerException for null biases");
      } catch (NullPointerException expected) {
        // the array typemaps refuse null
      }
      options.setLogitBias(new int[] {model.vocabSize()}, new float[] {1});
      expectError(() -> new Session(model, options).close(),
          "a biased token outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
    }
  }

  static final int TOP_K = 3;

  // Each token holds k alternatives of distinct ids, the most likely first (the lower id first on
  // ties); greedy decoding drew the first one, whose log-probability is the token's own (to float
  // rounding).
  static void checkAlternatives(List<Token> tokens, int k, String what) {
    check(tokens.size() == SAMPLER_TOKENS, what + ": " + tokens.size() + " tokens");
    for (Token token : tokens) {
      List<TopLogprob> top = token.topLogprobs();
      check(top.size() == k, what + ": " + k + " alternatives: " + token);
      if (k == 0) continue;
      check(top.get(0).id() == token.id()
          && Math.abs(top.get(0).logprob() - token.logprob()) <= 1e-5f,
          what + ": the greedy token is the first alternative: " + token);
      for (int i = 1; i < k; ++i) {
        TopLogprob a = top.get(i - 1);
        TopLogprob b = top.get(i);
        check(a.logprob() > b.logprob() || (a.logprob() == b.logprob() && a.id() < b.id()),
            what + ": the most likely first: " + token);
      }
      check(top.stream().map(TopLogprob::id).distinct().count() == k
          && top.stream().allMatch(alternative -> alternative.logprob() <= 0),
          what + ": distinct ids, log-probabilities: " + token);
    }
  }

  // The tokens a greedy session with options generates after PROMPT, pulled or pushed.
  static List<Token> greedyRun(Model model, SessionOptions options, boolean pull) {
    try (Session session = new Session(model, options)) {
      session.prefill(PROMPT);
      if (pull) return session.stream(SAMPLER_TOKENS).collect(Collectors.toList());
      List<Token> pushed = new ArrayList<>();
      session.generate(SAMPLER_TOKENS, pushed::add);
      return pushed;
    }
  }

  // setTopLogprobs(k) gives each token its k alternatives, the same through the iterator, the
  // callback and a batch; 0 gives none and the same draws; Model.tokenPiece names them.
  static void testTopLogprobs(Model model) {
    try (SessionOptions options = greedy();
        SessionOptions plainOptions = greedy();
        SessionOptions zero = greedy().setTopLogprobs(0)) {
      check(options.setTopLogprobs(TOP_K) == options, "setTopLogprobs chains");
      List<Token> pulled = greedyRun(model, options, true);
      checkAlternatives(pulled, TOP_K, "pulled");
      List<Token> pushed = greedyRun(model, options, false);
      check(pushed.equals(pulled), "the callback's alternatives are the iterator's: " + pushed);
      try (Session first = new Session(model, options);
          Session second = new Session(model, options)) {
        first.prefill(PROMPT);
        second.prefill(PROMPT);
        List<List<Token>> batched = List.of(new ArrayList<>(), new ArrayList<>());
        Session.generateBatch(List.of(first, second), SAMPLER_TOKENS,
            (index, token) -> batched.get(index).add(token));
        check(batched.equals(List.of(pulled, pulled)), "a batch's alternatives: " + batched);
      }

      List<Token> plain = greedyRun(model, plainOptions, true);
      checkAlternatives(plain, 0, "k = 0 pulled");
      List<Token> quiet = greedyRun(model, zero, false);
      checkAlternatives(quiet, 0, "k = 0 pushed");
      check(ids(plain).equals(ids(pulled)) && ids(quiet).equals(ids(pulled)),
          "alternatives leave the draws alone");
      check(new Token(1, "a", -1f).topLogprobs().isEmpty(), "a Token without alternatives");
      for (int k : new int[] {21, -1}) { // PHOTON_MAX_TOP_LOGPROBS is 20
        expectError(() -> options.setTopLogprobs(k), "setTopLogprobs(" + k + ")",
            "PHOTON_ERR_INVALID_ARGUMENT");
      }

      // A token's raw bytes after the one before it are its piece when that piece is plain text:
      // it is not empty (the start of a split character) and nothing was held back before it.
      int[] prompt = model.tokenize(PROMPT);
      int previous = prompt[prompt.length - 1];
      boolean held = false;
      int compared = 0;
      for (Token token : pulled) {
        byte[] raw = model.tokenPiece(token.id(), previous);
        if (!token.piece().isEmpty() && !held) {
          check(Arrays.equals(raw, token.piece().getBytes(StandardCharsets.UTF_8)),
              "token " + token.id() + "'s bytes after " + previous + ": " + Arrays.toString(raw)
                  + " vs '" + token.piece() + "'");
          ++compared;
        }
        for (TopLogprob alternative : token.topLogprobs()) {
          model.tokenPiece(alternative.id(), previous); // every alternative has a piece
        }
        previous = token.id();
        held = token.piece().isEmpty();
      }
      check(compared > 0, "a plain text token's bytes are its piece: " + pulled);
      for (Token token : pulled) {
        if (!token.piece().startsWith(" ") || token.piece().length() < 2) continue;
        byte[] start = model.tokenPiece(token.id(), -1);
        check(Arrays.equals(start, token.piece().substring(1).getBytes(StandardCharsets.UTF_8))
            && Arrays.equals(start, model.tokenPiece(token.id(), model.bos())),
            "at the start of the text a leading space is dropped: " + token);
      }
      expectError(() -> model.tokenPiece(model.vocabSize(), -1),
          "tokenPiece of an id outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
      expectError(() -> model.tokenPiece(pulled.get(0).id(), model.vocabSize()),
          "tokenPiece after an id outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
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

  // The precision load option: "exact" by default on the CPU; "bf16" rounds activations to bf16
  // before each product, so its scores stay close to the exact ones (not equal); other text fails,
  // naming it.
  static void testPrecision(Model model, String modelPath) {
    check(model.precision().equals("exact"), "the CPU's default precision: " + model.precision());
    int[] ids = model.tokenize(PROMPT);
    float[] exact = model.score(ids);
    try (Model bf16 = new Model(modelPath, "cpu", "bf16")) {
      check(bf16.precision().equals("bf16") && bf16.device().equals("cpu"),
          "precision " + bf16.precision() + " on " + bf16.device());
      float[] rounded = bf16.score(ids);
      check(rounded.length == exact.length && Float.isNaN(rounded[0]), "bf16 score's shape");
      for (int i = 1; i < exact.length; ++i) {
        check(Float.isFinite(rounded[i]) && Math.abs(rounded[i] - exact[i]) < 0.5f,
            "token " + i + ": bf16 " + rounded[i] + " vs " + exact[i]);
      }
      try (Session session = prompted(bf16)) {
        List<Token> generated = session.stream(4).collect(Collectors.toList());
        check(generated.size() == 4 && generated.stream().allMatch(t -> t.logprob() <= 0),
            "a bf16 model generates: " + generated);
      }
    }
    try (Model chosen = new Model(modelPath, "cpu", 0, false, "exact")) {
      check(chosen.precision().equals("exact"), "precision exact: " + chosen.precision());
    }
    PhotonException e = expectError(() -> new Model(modelPath, "cpu", "fp8"), "bad precision",
        "PHOTON_ERR_INVALID_ARGUMENT");
    check(e.getMessage().contains("'fp8'"), "the message names the precision: " + e.getMessage());
  }

  // ---- the serving engine ----------------------------------------------------------------------

  static final int ENGINE_TOKENS = 8;
  // A bound for waits that end within a second when all is well.
  static final Duration ENGINE_WAIT = Duration.ofSeconds(120);

  static SessionOptions greedy() {
    return new SessionOptions().setIgnoreEos(true);
  }

  static RequestOptions ask(String prompt, int maxTokens) {
    try (SessionOptions greedy = greedy()) {
      return new RequestOptions().setPromptText(prompt).setOptions(greedy).setMaxTokens(maxTokens);
    }
  }

  // The token ids a session alone generates greedily after prompt: what a request must give.
  static List<Integer> alone(Model model, String prompt, int maxTokens) {
    try (SessionOptions greedy = greedy(); Session session = new Session(model, greedy)) {
      session.prefill(prompt);
      return session.stream(maxTokens).map(Token::id).collect(Collectors.toList());
    }
  }

  static List<Integer> pulled(Request request) {
    return request.stream().map(Token::id).collect(Collectors.toList());
  }

  static void await(Request request) {
    try {
      check(request.await(ENGINE_WAIT), "the request ends in time");
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    }
  }

  static void stepToEnd(Engine engine) {
    for (int steps = 0; engine.step() > 0 && steps < 10000; ++steps) {
    }
  }

  // Requests streamed at once, pulled by iterators on threads and pushed to callbacks: each gives
  // exactly the tokens of its session run alone; statistics count them.
  static void testEngineStreams(Model model) throws InterruptedException {
    List<List<Integer>> expected = new ArrayList<>();
    for (String prompt : BATCH_PROMPTS) expected.add(alone(model, prompt, ENGINE_TOKENS));
    try (EngineOptions options = new EngineOptions().setMaxRunning(4);
        Engine engine = new Engine(model, options)) {
      engine.start();
      List<Request> pulledRequests = new ArrayList<>();
      List<Request> pushedRequests = new ArrayList<>();
      List<List<Token>> pushed = new ArrayList<>();
      for (String prompt : BATCH_PROMPTS) {
        try (RequestOptions ask = ask(prompt, ENGINE_TOKENS)) {
          pulledRequests.add(engine.submit(ask));
          List<Token> tokens = Collections.synchronizedList(new ArrayList<>());
          pushed.add(tokens);
          pushedRequests.add(engine.submit(ask, tokens::add));
        }
      }
      List<List<Integer>> got = new ArrayList<>();
      List<Thread> threads = new ArrayList<>();
      for (Request request : pulledRequests) {
        List<Integer> ids = Collections.synchronizedList(new ArrayList<>());
        got.add(ids);
        threads.add(new Thread(() -> ids.addAll(pulled(request))));
      }
      for (Thread thread : threads) thread.start();
      for (Thread thread : threads) thread.join(ENGINE_WAIT.toMillis());
      check(got.equals(expected), "pulled tokens: " + got + " vs alone " + expected);
      List<List<Integer>> pushedIds = new ArrayList<>();
      for (int i = 0; i < pushedRequests.size(); ++i) {
        await(pushedRequests.get(i));
        pushedIds.add(ids(pushed.get(i)));
      }
      check(pushedIds.equals(expected), "pushed tokens: " + pushedIds + " vs alone " + expected);
      List<Request> all = new ArrayList<>(pulledRequests);
      all.addAll(pushedRequests);
      for (int i = 0; i < all.size(); ++i) {
        Request request = all.get(i);
        RequestStats stats = request.stats();
        int promptTokens = model.tokenize(BATCH_PROMPTS.get(i % BATCH_PROMPTS.size())).length;
        check(request.state() == RequestState.FINISHED
            && request.stopReason() == StopReason.LENGTH && request.error() == null,
            "finished by length: " + request.state() + " " + request.stopReason());
        check(stats.getGeneratedTokens() == ENGINE_TOKENS
            && stats.getPromptTokens() == promptTokens && stats.getReusedTokens() == 0
            && stats.getPauses() == 0, "request stats");
        check(0 <= stats.getQueueSeconds() && stats.getQueueSeconds() <= stats.getFirstTokenSeconds()
            && stats.getDecodeSeconds() >= 0, "request times");
        request.close();
      }
      engine.stop(true); // the worker's last step has retired every request
      EngineStats stats = engine.stats();
      int total = all.size();
      check(stats.getSubmitted() == total && stats.getFinished() == total
          && stats.getFailed() == 0 && stats.getGeneratedTokens() == total * ENGINE_TOKENS
          && stats.getRunning() == 0 && stats.getWaiting() == 0 && stats.getSteps() > 0
          && stats.getMemoryPeak() > 0 && stats.getMemoryInUse() == 0, "engine stats");
    }
  }

  // A request's alternatives (SessionOptions.setTopLogprobs) are its session's alone, pulled and
  // pushed to a callback alike.
  static void testEngineTopLogprobs(Model model) {
    try (SessionOptions options = greedy().setTopLogprobs(TOP_K)) {
      List<Token> expected;
      try (Session session = new Session(model, options)) {
        session.prefill(PROMPT);
        expected = session.stream(ENGINE_TOKENS).collect(Collectors.toList());
      }
      check(expected.stream().allMatch(token -> token.topLogprobs().size() == TOP_K),
          "alternatives: " + expected);
      List<Token> pushed = Collections.synchronizedList(new ArrayList<>());
      List<Token> pulled;
      List<Token> plain;
      try (RequestOptions ask = new RequestOptions().setPromptText(PROMPT).setOptions(options);
          RequestOptions plainAsk = ask(PROMPT, ENGINE_TOKENS);
          Engine engine = new Engine(model)) {
        engine.start();
        ask.setMaxTokens(ENGINE_TOKENS);
        try (Request pushing = engine.submit(ask, pushed::add);
            Request pulling = engine.submit(ask);
            Request plainRequest = engine.submit(plainAsk)) {
          pulled = pulling.stream().collect(Collectors.toList());
          plain = plainRequest.stream().collect(Collectors.toList());
          await(pushing);
        }
        engine.stop(true);
      }
      check(pulled.equals(expected), "pulled alternatives: " + pulled + " vs alone " + expected);
      check(new ArrayList<>(pushed).equals(expected),
          "pushed alternatives: " + pushed + " vs alone " + expected);
      check(plain.size() == ENGINE_TOKENS
          && plain.stream().allMatch(token -> token.topLogprobs().isEmpty()), "k = 0: " + plain);
    }
  }

  // An engine stepped by the caller's loop: nothing happens between steps.
  static void testEngineStepped(Model model) throws InterruptedException {
    List<Integer> expected = alone(model, PROMPT, ENGINE_TOKENS);
    try (Engine engine = new Engine(model); RequestOptions ask = ask(PROMPT, ENGINE_TOKENS);
        Request request = engine.submit(ask)) {
      check(request.state() == RequestState.WAITING && !request.await(Duration.ZERO),
          "waiting before the first step");
      check(Double.isNaN(request.stats().getQueueSeconds()), "NaN before admission");
      stepToEnd(engine);
      check(request.await(Duration.ZERO) && pulled(request).equals(expected),
          "a stepped request gives the tokens of its session alone");
      check(engine.step() == 0, "a step with nothing to do");
      expectError(() -> engine.stop(true), "stop without a worker", "PHOTON_ERR_INVALID_ARGUMENT");
    }
  }

  // With a prefix cache, a request whose prompt is a prompt read before starts from its
  // save: those tokens count as reused, the engine counts the hit and the cache's bytes, and both
  // requests generate what an engine without the cache generates.
  static void testEnginePrefixCache(Model model) {
    int[] first = model.tokenize(PROMPT + " " + BATCH_PROMPTS.get(1));
    // The same prompt again: a RecGen model (the test model's AUTO mode) restores only that.
    int[] second = first.clone();
    List<List<Token>> expected = new ArrayList<>();
    try (Engine uncached = new Engine(model)) {
      for (int[] prompt : List.of(first, second)) {
        try (Request request = runToEnd(uncached, prompt)) {
          expected.add(request.stream().collect(Collectors.toList()));
        }
      }
      EngineStats stats = uncached.stats();
      check(stats.getPrefixHits() == 0 && stats.getPrefixBytes() == 0, "no cache");
    }
    try (EngineOptions options = new EngineOptions().setPrefixCache(64L << 20);
        Engine engine = new Engine(model, options)) {
      List<List<Token>> got = new ArrayList<>();
      try (Request request = runToEnd(engine, first)) {
        got.add(request.stream().collect(Collectors.toList()));
        EngineStats stats = engine.stats();
        check(request.stats().getReusedTokens() == 0 && stats.getPrefixHits() == 0
            && stats.getPrefixBytes() > 0, "the first prompt is read and saved");
      }
      try (Request request = runToEnd(engine, second)) {
        got.add(request.stream().collect(Collectors.toList()));
        RequestStats stats = request.stats();
        check(stats.getReusedTokens() == first.length
            && stats.getPromptTokens() == second.length - first.length,
            "the second starts from the first's save: reused " + stats.getReusedTokens() + " of "
                + first.length);
      }
      EngineStats stats = engine.stats();
      check(stats.getPrefixHits() == 1 && stats.getPrefixBytes() > 0
          && stats.getReusedTokens() == first.length, "the hit is counted");
      check(got.equals(expected), "the cache changes no result: " + got + " vs " + expected);
    }
  }

  // A greedy request for prompt, stepped until the engine has finished it.
  static Request runToEnd(Engine engine, int[] prompt) {
    try (SessionOptions greedy = greedy();
        RequestOptions ask = new RequestOptions().setPrompt(prompt).setOptions(greedy)
            .setMaxTokens(ENGINE_TOKENS)) {
      Request request = engine.submit(ask);
      stepToEnd(engine);
      return request;
    }
  }

  // cancel() from another thread ends a streaming request (pulled or pushed) at the next step; the
  // other requests go on.
  static void testEngineCancel(Model model) throws InterruptedException {
    try (Engine engine = new Engine(model); SessionOptions greedy = greedy();
        RequestOptions endless = new RequestOptions().setPromptText(PROMPT).setOptions(greedy);
        RequestOptions ask = ask(PROMPT, ENGINE_TOKENS)) {
      engine.start();
      Request pulledRequest = engine.submit(endless);
      List<Token> got = Collections.synchronizedList(new ArrayList<>());
      Thread puller = new Thread(() -> pulledRequest.tokens().forEach(got::add));
      puller.start();
      List<Token> pushed = Collections.synchronizedList(new ArrayList<>());
      Request pushedRequest = engine.submit(endless, pushed::add);
      Request beside = engine.submit(ask);
      long deadline = System.nanoTime() + ENGINE_WAIT.toNanos();
      while ((got.size() < 2 || pushed.size() < 2) && System.nanoTime() < deadline) {
        Thread.sleep(5);
      }
      Thread canceller = new Thread(() -> {
        pulledRequest.cancel();
        pushedRequest.cancel();
      });
      canceller.start();
      canceller.join();
      puller.join(ENGINE_WAIT.toMillis());
      check(!puller.isAlive(), "the iterator ends after cancel()");
      for (Request request : List.of(pulledRequest, pushedRequest)) {
        await(request);
        List<Token> tokens = request == pulledRequest ? got : pushed;
        check(request.stopReason() == StopReason.CANCELLED, "cancelled: " + request.stopReason());
        check(tokens.size() >= 2 && tokens.size() < model.contextLength()
            && request.stats().getGeneratedTokens() == tokens.size(),
            "tokens before the cancel: " + tokens.size());
      }
      await(beside);
      check(beside.stopReason() == StopReason.LENGTH, "the request beside goes on");
      engine.stop(false);
      check(engine.stats().getCancelled() == 2, "cancelled requests are counted");
      for (Request request : List.of(pulledRequest, pushedRequest, beside)) request.close();
    }
  }

  // A callback returning false stops its request alone; one that throws stops it and the
  // exception comes out of await(); one that waits on its own engine gets an error, not a
  // deadlock; a request closed from its own callback just ends.
  static void testEngineCallbacks(Model model) throws InterruptedException {
    try (Engine engine = new Engine(model); RequestOptions ask = ask(PROMPT, ENGINE_TOKENS)) {
      engine.start();
      List<Token> seen = Collections.synchronizedList(new ArrayList<>());
      Request stopped = engine.submit(ask, token -> seen.add(token) && false);
      List<Token> failures = Collections.synchronizedList(new ArrayList<>());
      Request failing = engine.submit(ask, token -> {
        failures.add(token);
        if (failures.size() == 2) throw new CallbackFailure("stop here");
        return true;
      });
      Request beside = engine.submit(ask);
      await(stopped);
      check(seen.size() == 1 && stopped.stopReason() == StopReason.CALLBACK,
          "false stops the request");
      try {
        failing.await();
        throw new AssertionError("the callback's exception was swallowed");
      } catch (CallbackFailure e) {
        check(e.getMessage().equals("stop here"), "the very exception reaches await()");
      }
      check(failures.size() == 2 && failing.stopReason() == StopReason.CALLBACK,
          "the exception stopped its request");
      check(pulled(beside).equals(alone(model, PROMPT, ENGINE_TOKENS)), "the others go on");

      try (RequestOptions two = ask(PROMPT, 2)) {
        Request waiting = engine.submit(two, token -> {
          try {
            beside.await(Duration.ofSeconds(1));
          } catch (InterruptedException e) {
            throw new AssertionError(e);
          }
          return true;
        });
        PhotonException e = expectError(waiting::await,
            "waiting on the engine from its own callback", "PHOTON_ERR_INVALID_ARGUMENT");
        check(e.getMessage().contains("callback"), "the message says why: " + e.getMessage());
        waiting.close();
      }
      Request[] holder = new Request[1];
      CountDownLatch ready = new CountDownLatch(1);
      CountDownLatch closed = new CountDownLatch(1);
      try (RequestOptions open = new RequestOptions().setPromptText(PROMPT)) {
        holder[0] = engine.submit(open, token -> {
          try {
            ready.await();
          } catch (InterruptedException e) {
            throw new AssertionError(e);
          }
          holder[0].close();
          closed.countDown();
          return true;
        });
      }
      ready.countDown();
      check(closed.await(ENGINE_WAIT.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS),
          "closed from its own callback");
      expectError(() -> holder[0].state(), "use after close", "PHOTON_ERR_INVALID_ARGUMENT");
      try (RequestOptions two = ask(PROMPT, 2); Request after = engine.submit(two)) {
        await(after);
        check(after.stats().getGeneratedTokens() == 2, "the engine serves on");
      }
      engine.stop(true);
      for (Request request : List.of(stopped, failing, beside)) request.close();
    }
  }

  static StopReason completed(CompletableFuture<StopReason> future) {
    try {
      return future.get(ENGINE_WAIT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException | ExecutionException | java.util.concurrent.TimeoutException e) {
      throw new AssertionError(e);
    }
  }

  // completion() completes once, after the last token, with the stop reason (a request finished
  // already: at once); exceptionally with a callback's exception; with CANCELLED for a request
  // closed before it finished. Its stages run on the engine's thread: they may close the request,
  // and one that waits on it gets an error instead of a deadlock.
  static void testEngineCompletion(Model model) throws InterruptedException {
    try (Engine engine = new Engine(model); RequestOptions ask = ask(PROMPT, ENGINE_TOKENS);
        SessionOptions greedy = greedy();
        RequestOptions endless = new RequestOptions().setPromptText(PROMPT).setOptions(greedy)) {
      engine.start();
      List<Token> tokens = Collections.synchronizedList(new ArrayList<>());
      Request pushed = engine.submit(ask, tokens::add);
      int[] tokensAtEnd = {-1};
      CompletableFuture<StopReason> end = pushed.completion().thenApply(reason -> {
        tokensAtEnd[0] = tokens.size();
        return reason;
      });
      check(completed(end) == StopReason.LENGTH && tokensAtEnd[0] == ENGINE_TOKENS,
          "completed after the last token: " + tokensAtEnd[0]);
      check(pushed.completion() == pushed.completion() && pushed.completion().isDone(),
          "one future");
      Request pulled = engine.submit(ask);
      check(pulled(pulled).size() == ENGINE_TOKENS, "pulled");
      check(completed(pulled.completion()) == StopReason.LENGTH, "a pulled request completes");

      Request failing = engine.submit(ask, token -> {
        throw new CallbackFailure("fails");
      });
      try {
        failing.completion().get(ENGINE_WAIT.toMillis(), TimeUnit.MILLISECONDS);
        throw new AssertionError("completed despite the callback's exception");
      } catch (ExecutionException e) {
        check(e.getCause() instanceof CallbackFailure, "the callback's exception: " + e);
      } catch (java.util.concurrent.TimeoutException e) {
        throw new AssertionError(e);
      }

      try (Engine stepped = new Engine(model)) {
        Request closing = stepped.submit(ask);
        Request waiting = stepped.submit(ask);
        CompletableFuture<RequestState> closedInStage = closing.completion().thenApply(reason -> {
          RequestState state = closing.state();
          closing.close();
          return state;
        });
        CompletableFuture<Void> waitingStage = waiting.completion().thenRun(() -> {
          try {
            waiting.await(Duration.ofSeconds(1));
          } catch (InterruptedException e) {
            throw new AssertionError(e);
          }
        });
        stepToEnd(stepped);
        check(closedInStage.getNow(null) == RequestState.FINISHED, "finished in its stage");
        expectError(() -> closing.state(), "closed in its stage", "PHOTON_ERR_INVALID_ARGUMENT");
        try {
          waitingStage.getNow(null);
          throw new AssertionError("a stage waited on its own engine");
        } catch (java.util.concurrent.CompletionException e) {
          check(e.getCause() instanceof PhotonException
              && e.getCause().getMessage().contains("finish callback"), "waiting refused: " + e);
        }
        waiting.close();
      }

      Request abandoned = engine.submit(endless, token -> true);
      CompletableFuture<StopReason> abandonedEnd = abandoned.completion();
      abandoned.close();
      check(completed(abandonedEnd) == StopReason.CANCELLED, "closed before it finished");
      Request closedFirst = engine.submit(ask);
      closedFirst.close();
      try {
        closedFirst.completion().getNow(null);
        throw new AssertionError("a closed request's completion completed");
      } catch (java.util.concurrent.CompletionException e) {
        check(e.getCause() instanceof PhotonException, "the closed request's error: " + e);
      }
      engine.stop(true);
      for (Request request : List.of(pushed, pulled, failing)) request.close();
    }
  }

  // A full queue is BusyException; a request that fails ends with its error, which the iterator
  // throws; closed objects refuse calls.
  static void testEngineErrors(Model model) {
    try (EngineOptions options = new EngineOptions().setMaxWaiting(1);
        Engine engine = new Engine(model, options); RequestOptions one = ask(PROMPT, 1);
        Request first = engine.submit(one)) {
      PhotonException e = expectError(() -> engine.submit(one), "a full queue", "PHOTON_ERR_BUSY");
      check(e instanceof BusyException, "BusyException: " + e);
      check(engine.stats().getRefused() == 1 && first.state() == RequestState.WAITING,
          "refused submissions are counted");
    }
    try (EngineOptions options = new EngineOptions().setMemoryBudget(1);
        Engine engine = new Engine(model, options); RequestOptions four = ask(PROMPT, 4);
        Request request = engine.submit(four)) {
      stepToEnd(engine);
      check(request.stopReason() == StopReason.ERROR, "stop reason " + request.stopReason());
      PhotonException error = request.error();
      check(error != null && error.getStatusName().equals("PHOTON_ERR_OUT_OF_MEMORY")
          && error.getMessage().contains("budget"), "the request's error: " + error);
      expectError(() -> pulled(request), "the iterator of a failed request",
          "PHOTON_ERR_OUT_OF_MEMORY");
      expectError(request::save, "save of a failed request", "PHOTON_ERR_INVALID_ARGUMENT");
      check(engine.stats().getFailed() == 1, "failed requests are counted");
    }
    Engine closedEngine;
    try (Engine engine = new Engine(model); RequestOptions nothing = new RequestOptions();
        RequestOptions bad = new RequestOptions().setPrompt(new int[] {model.vocabSize()})) {
      expectError(() -> engine.submit(nothing), "a request without a prompt",
          "PHOTON_ERR_INVALID_ARGUMENT");
      expectError(() -> engine.submit(bad), "a token outside the vocabulary",
          "PHOTON_ERR_BAD_TOKEN");
      expectError(() -> new EngineOptions().setMaxRunning(0), "max running 0",
          "PHOTON_ERR_INVALID_ARGUMENT");
      try (RequestOptions one = ask(PROMPT, 1)) {
        Request pushed = engine.submit(one, token -> true);
        expectError(() -> pulled(pushed), "pulling a request that has a callback",
            "PHOTON_ERR_INVALID_ARGUMENT");
        pushed.close();
        pushed.close(); // idempotent
        expectError(pushed::state, "use after close", "PHOTON_ERR_INVALID_ARGUMENT");
      }
      closedEngine = engine;
    }
    try (RequestOptions one = ask(PROMPT, 1)) {
      expectError(() -> closedEngine.submit(one), "a closed engine", "PHOTON_ERR_INVALID_ARGUMENT");
    }
  }

  // A finished request's state and session continue it exactly as the session alone would.
  static void testEngineContinue(Model model) {
    List<Integer> expected = alone(model, PROMPT, 2 * ENGINE_TOKENS);
    try (Engine engine = new Engine(model); RequestOptions ask = ask(PROMPT, ENGINE_TOKENS);
        Request first = engine.submit(ask)) {
      stepToEnd(engine);
      check(pulled(first).equals(expected.subList(0, ENGINE_TOKENS)), "the first half");
      byte[] state = first.save();
      Session session = first.takeSession();
      expectError(first::takeSession, "a session taken twice", "PHOTON_ERR_INVALID_ARGUMENT");
      int position = session.position();
      try (SessionOptions greedy = greedy();
          RequestOptions byStateOptions = new RequestOptions().setState(state).setOptions(greedy)
              .setMaxTokens(ENGINE_TOKENS);
          RequestOptions bySessionOptions =
              new RequestOptions().setSession(session).setMaxTokens(ENGINE_TOKENS);
          Request byState = engine.submit(byStateOptions);
          Request bySession = engine.submit(bySessionOptions)) {
        expectClosed(session);
        stepToEnd(engine);
        for (Request request : List.of(byState, bySession)) {
          check(pulled(request).equals(expected.subList(ENGINE_TOKENS, 2 * ENGINE_TOKENS)),
              "the continuation equals the session's alone");
          check(request.stats().getReusedTokens() == position, "reused tokens");
        }
        try (Session again = bySession.takeSession();
            Session restored = Session.restore(model, byState.save())) {
          check(again.position() == position + ENGINE_TOKENS, "the taken session's history");
          check(restored.position() == position + ENGINE_TOKENS, "a request's state restores");
        }
      }
    }
  }

  static void expectClosed(Session session) {
    expectError(session::position, "a session taken over", "PHOTON_ERR_INVALID_ARGUMENT");
  }

  // A request keeps its engine alive and the engine its model: closing them first leaves the
  // request streaming.
  static void testEngineOwnership(String modelPath) {
    List<Integer> expected;
    try (Model model = new Model(modelPath)) {
      expected = alone(model, PROMPT, ENGINE_TOKENS);
    }
    Model model = new Model(modelPath);
    Engine engine = new Engine(model);
    model.close();
    engine.start();
    try (RequestOptions ask = ask(PROMPT, ENGINE_TOKENS); Request request = engine.submit(ask)) {
      engine.close();
      check(pulled(request).equals(expected), "the request outlives its engine handle");
    } // the engine (and its worker) goes now
  }

  // Leaves a started engine running a slow callback (its handle open, or closed and held by the
  // requests) and a pulled request while the program ends: returning from main or System.exit.
  static void exitWithARunningEngine(String modelPath, String handle, String how)
      throws InterruptedException {
    Model model = new Model(modelPath);
    Engine engine = new Engine(model);
    engine.start();
    CountDownLatch seen = new CountDownLatch(2);
    RequestOptions endless = new RequestOptions().setPromptText(PROMPT).setOptions(greedy());
    engine.submit(endless, token -> {
      seen.countDown();
      try {
        Thread.sleep(2);  // the worker is in the callback, or about to be, when the exit comes
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      return true;
    });
    engine.submit(endless);
    if (handle.equals("closed")) engine.close();
    seen.await();
    if (how.equals("exit")) System.exit(0);
  }

  // A program that ends while an engine's worker runs callbacks exits cleanly and promptly.
  static void testEngineExit(String modelPath) throws IOException, InterruptedException {
    String java = ProcessHandle.current().info().command().orElseThrow();
    String classPath = System.getProperty("java.class.path");
    for (String handle : List.of("open", "closed")) {
      for (String how : List.of("return", "exit")) {
        Process child = new ProcessBuilder(java, "-cp", classPath, "BindingTest", "engine-exit",
                                           modelPath, handle, how)
                            .redirectErrorStream(true)
                            .start();
        boolean ended = child.waitFor(ENGINE_WAIT.toSeconds(), TimeUnit.SECONDS);
        if (!ended) child.destroyForcibly().waitFor();
        String output = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        check(ended && child.exitValue() == 0,
              "exit with a running engine (" + handle + " handle, " + how + "): "
                  + (ended ? child.exitValue() : "hung") + " " + output);
      }
    }
  }

  // A model with an engine and two requests (pulled, pushed) run to the end (every tenth by its
  // worker), one continued from a state, one session taken back.
  static void churnEngine(String modelPath, int iteration, boolean close) {
    Model model = new Model(modelPath);
    SessionOptions small = new SessionOptions().setContextLength(256).setSeed(iteration);
    EngineOptions engineOptions = new EngineOptions().setMaxRunning(2);
    Engine engine = new Engine(model, engineOptions);
    RequestOptions first = new RequestOptions()
        .setPrompt(new int[] {model.bos(), 5 + iteration % 50}).setOptions(small).setMaxTokens(2);
    RequestOptions second =
        new RequestOptions().setPrompt(new int[] {model.bos()}).setOptions(small).setMaxTokens(2);
    Request pulledRequest = engine.submit(first);
    Request pushedRequest = engine.submit(second, token -> true);
    if (iteration % 10 == 0) {
      engine.start();
      await(pulledRequest);
      engine.stop(true);
    }
    stepToEnd(engine);
    check(pulled(pulledRequest).size() == 2, "a churned request");
    await(pushedRequest);
    RequestOptions third = new RequestOptions().setState(pushedRequest.save()).setMaxTokens(1);
    Request continued = engine.submit(third);
    Session session = pulledRequest.takeSession();
    if (close) { // in a different order each time: requests keep their engine and model alive
      List<AutoCloseable> all = List.of(model, engine, pulledRequest, pushedRequest, continued,
          session, small, engineOptions, first, second, third);
      try {
        all.get(iteration % 6).close();
        for (AutoCloseable item : all) item.close();
      } catch (Exception e) {
        throw new AssertionError(e);
      }
    }
  }

  static void testEngineMemory(String modelPath) throws IOException {
    for (int i = 0; i < WARMUP; ++i) churnEngine(modelPath, i, true);
    System.gc();
    double baseline = rssMb();
    for (int i = 0; i < LOOPS; ++i) churnEngine(modelPath, i, true);
    double closed = rssMb();
    for (int i = 0; i < LATE_LOOPS; ++i) { // nothing closed: finalizers release the objects
      churnEngine(modelPath, i, false);
      if (i % 10 == 0) System.gc();
    }
    double late = Double.MAX_VALUE; // finalizers may need a few rounds (see testMemory)
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
    System.out.printf("rss: %.1f MB after warm-up, %.1f MB after %d closed engine loops, %.1f MB"
        + " after %d collected ones (%d collection rounds)%n", baseline, closed, LOOPS, late,
        LATE_LOOPS, rounds);
    check(closed - baseline < CLOSED_BOUND_MB && late - baseline < LATE_BOUND_MB, "memory grows");
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
          testCancelIterator(model);
          System.out.println("ok testCancelIterator");
          testCallbackException(model);
          System.out.println("ok testCallbackException");
          testBatch(model);
          System.out.println("ok testBatch");
          testScore(model);
          System.out.println("ok testScore");
          testScoreTop(model);
          System.out.println("ok testScoreTop");
          testKvType(model);
          System.out.println("ok testKvType");
          testSamplerSettings(model);
          System.out.println("ok testSamplerSettings");
          testTopLogprobs(model);
          System.out.println("ok testTopLogprobs");
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
          testPrecision(model, modelPath);
          System.out.println("ok testPrecision");
        }
      }
      case "memory" -> testMemory(modelPath);
      case "engine" -> {
        try (Model model = new Model(modelPath)) {
          testEngineStreams(model);
          System.out.println("ok testEngineStreams");
          testEngineTopLogprobs(model);
          System.out.println("ok testEngineTopLogprobs");
          testEngineStepped(model);
          System.out.println("ok testEngineStepped");
          testEnginePrefixCache(model);
          System.out.println("ok testEnginePrefixCache");
          testEngineCancel(model);
          System.out.println("ok testEngineCancel");
          testEngineCallbacks(model);
          System.out.println("ok testEngineCallbacks");
          testEngineCompletion(model);
          System.out.println("ok testEngineCompletion");
          testEngineErrors(model);
          System.out.println("ok testEngineErrors");
          testEngineContinue(model);
          System.out.println("ok testEngineContinue");
        }
        testEngineOwnership(modelPath);
        System.out.println("ok testEngineOwnership");
        testEngineExit(modelPath);
        System.out.println("ok testEngineExit");
      }
      case "engine-exit" -> exitWithARunningEngine(modelPath, args[2], args[3]);
      case "engine-memory" -> testEngineMemory(modelPath);
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
