// Tests of the C# binding, run by ctest with mono. Same modes as the other languages' binding
// tests (see tests/bindings/python/binding_test.py):
//   BindingTest.exe test MODEL WORKDIR SHIPPED | memory MODEL | save MODEL STATE OUT
//                   | restore MODEL STATE OUT (SHIPPED: the shipped model, for inputs longer
//                   than the context)
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using Photon;

static class BindingTest {
  const string Prompt = "In the beginning God created the heaven and the earth.";
  // Prompts of different lengths for the batched prefill.
  static readonly string[] BatchPrompts = {
    Prompt, "And the earth was without form.", "Let there be light."
  };
  const int Warmup = 20, Loops = 200, LateLoops = 100;
  // RSS growth allowed over the loops, far below a leak's: a model kept alive holds ~30 MB.
  const double DisposedBoundMb = 64, LateBoundMb = 128;

  sealed class CallbackFailure : Exception {
    public CallbackFailure(string message) : base(message) {}
  }

  static void Check(bool condition, string what) {
    if (!condition) throw new Exception("check failed: " + what);
  }

  static SessionOptions Sampling() => new SessionOptions().SetTemperature(0.8f).SetSeed(42);

  static Session Prompted(Model model) {
    using (var options = Sampling()) {
      var session = new Session(model, options);
      session.Prefill(Prompt);
      return session;
    }
  }

  static PhotonException ExpectError(Action call, string what, params string[] statusNames) {
    try {
      call();
    } catch (PhotonException e) {
      Check(statusNames.Contains(e.StatusName),
            $"{what}: expected {string.Join("|", statusNames)}, got {e.StatusName}: {e.Message}");
      Check(e.Status > 0, what + ": status");
      return e;
    }
    throw new Exception(what + ": no PhotonException thrown");
  }

  static void TestModel(Model model) {
    Check(model.VocabSize > 0 && model.Levels >= 0, "model properties");
    Check(model.Arch == "photon" || model.Arch == "vanilla", model.Arch);
    Check(model.Device == "cpu", model.Device);
    Check(model.ConfigJson.Contains("\"vocab_size\""), "config");
    int[] ids = model.Tokenize(Prompt);
    Check(ids[0] == model.Bos && model.Detokenize(ids) == Prompt, "tokenize round trip");
    Check(Model.Version().Split('.').Length == 3, "version");
  }

  static void TestStreaming(Model model) {
    using (var pushed = Prompted(model))
    using (var pulled = Prompted(model)) {
      var received = new List<Token>();
      Check(pushed.Generate(12, token => { received.Add(token); return true; }) == 12,
            "Generate's count");
      Check(pushed.StopReason == StopReason.Length, "stop: " + pushed.StopReason);
      var streamed = pulled.Tokens(12).ToList();
      Check(received.Select(t => t.Id).SequenceEqual(streamed.Select(t => t.Id)),
            "callback and iterator produce the same tokens");
      Check(pushed.History().SequenceEqual(pulled.History()), "same history");
      string text = string.Concat(received.Select(t => t.Piece));
      Check(model.Detokenize(pushed.History()) == Prompt + text, "pieces: " + text);
      Check(received.All(t => t.Logprob <= 0), "log probabilities");
      Check(pulled.Tokens(3).Count() == 3 && !pulled.Tokens(0).Any(), "enumeration budgets");
    }
  }

  static void TestCancel(Model model) {
    using (var session = Prompted(model)) {
      int start = session.Position;
      var seen = new List<Token>();
      int count = session.Generate(10, token => { seen.Add(token); return seen.Count < 3; });
      Check(count == 3 && session.StopReason == StopReason.Callback,
            $"returning false stops: {count}, {session.StopReason}");
      Check(session.Position == start + 3, "the stopping token is kept");
      count = session.Generate(10, token => { session.Cancel(); return true; });
      Check(session.StopReason == StopReason.Cancelled && count >= 1 && count < 10,
            $"Cancel() from the callback: {count}, {session.StopReason}");
    }
  }

  static void TestCallbackException(Model model) {
    using (var session = Prompted(model)) {
      int start = session.Position;
      int seen = 0;
      try {
        session.Generate(10, token => {
          if (++seen == 2) throw new CallbackFailure("stop here");
          return true;
        });
        throw new Exception("the callback's exception was swallowed");
      } catch (CallbackFailure e) {
        Check(e.Message == "stop here", "the very exception reaches the caller");
        Check(e.StackTrace.Contains("TestCallbackException"), "with its stack trace");
      }
      Check(session.Position == start + 2 && session.StopReason == StopReason.Callback,
            "generation stopped at the exception");
      Check(session.Generate(2) == 2, "the session stays usable");
    }
  }

  static void TestBatch(Model model) {
    int[] expected;
    using (var solo = Prompted(model)) {
      expected = solo.Tokens(6).Select(t => t.Id).ToArray();
    }
    using (var first = Prompted(model))
    using (var second = Prompted(model)) {
      var received = new[] { new List<int>(), new List<int>() };
      int[] counts = Session.GenerateBatch(new[] { first, second }, 6, (index, token) => {
        received[index].Add(token.Id);
        return true;
      });
      Check(counts.SequenceEqual(new[] { 6, 6 }) && received[0].SequenceEqual(expected)
            && received[1].SequenceEqual(expected), "a batch gives each session its own tokens");
      counts = Session.GenerateBatch(new[] { first, second }, 4, (index, token) => index == 1);
      Check(counts.SequenceEqual(new[] { 1, 4 }) && first.StopReason == StopReason.Callback,
            "false stops one session of the batch: " + string.Join(",", counts));
      counts = Session.GenerateBatch(new[] { first, second }, 2);
      Check(counts.SequenceEqual(new[] { 2, 2 }), "without a callback");
    }
    TestPrefillBatch(model);
  }

  // PrefillBatch leaves each session as Prefill alone would (same position, same greedy tokens),
  // and a bad token fails the batch before any session changes.
  static void TestPrefillBatch(Model model) {
    int[][] prompts = BatchPrompts.Select(text => model.Tokenize(text)).ToArray();
    var positions = new List<int>();
    var expected = new List<int[]>();
    foreach (int[] tokens in prompts) {
      using (var solo = new Session(model)) {
        solo.Prefill(tokens);
        positions.Add(solo.Position);
        expected.Add(solo.Tokens(6).Select(t => t.Id).ToArray());
      }
    }
    Session[] sessions = prompts.Select(_ => new Session(model)).ToArray();
    try {
      Session.PrefillBatch(sessions, prompts);
      int[] batchedPositions = sessions.Select(s => s.Position).ToArray();
      Check(batchedPositions.SequenceEqual(positions),
            $"PrefillBatch positions: {string.Join(",", batchedPositions)} vs "
                + string.Join(",", positions));
      for (int i = 0; i < sessions.Length; ++i) {
        int[] batched = sessions[i].Tokens(6).Select(t => t.Id).ToArray();
        Check(batched.SequenceEqual(expected[i]),
              $"PrefillBatch gives session {i} its own tokens: {string.Join(",", batched)} vs "
                  + string.Join(",", expected[i]));
      }
      int[] before = sessions.Select(s => s.Position).ToArray();
      var bad = new[] { new[] { 1 }, new[] { model.Bos, model.VocabSize }, new[] { 2 } };
      PhotonException e = ExpectError(() => Session.PrefillBatch(sessions, bad),
                                      "a token outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
      Check(e.Message.Contains("session 1"), "the message names the session: " + e.Message);
      Check(sessions.Select(s => s.Position).SequenceEqual(before),
            "a bad token leaves every session unchanged");
      ExpectError(() => Session.PrefillBatch(sessions, prompts.Take(2).ToArray()),
                  "fewer token lists than sessions", "PHOTON_ERR_INVALID_ARGUMENT");
    } finally {
      foreach (var session in sessions) session.Dispose();
    }
  }

  // Teacher forcing gives each token the log-probability that HierGen generation (whose logits
  // equal teacher forcing) reported for it.
  static void TestScore(Model model) {
    using (var hiergen = new SessionOptions().SetMode(Mode.HierGen))
    using (var session = new Session(model, hiergen)) {
      session.Prefill(Prompt);
      int start = session.Position;
      var generated = new List<Token>();
      session.Generate(6, token => {
        generated.Add(token);
        return true;
      });
      float[] logprobs = model.Score(session.History());
      Check(logprobs.Length == start + 6 && float.IsNaN(logprobs[0]), "Score's shape");
      for (int i = 0; i < generated.Count; ++i) {
        Check(Math.Abs(generated[i].Logprob - logprobs[start + i]) < 1e-3,
              $"score {logprobs[start + i]} vs generation {generated[i].Logprob}");
      }
      ExpectError(() => model.Score(new int[0]), "nothing to score", "PHOTON_ERR_INVALID_ARGUMENT");
    }
  }

  // Past the context, on the shipped model (a context of 256 tokens, its tokenizer beside it):
  // scoring in sliding windows (a later window scores as its own tokens do), the context shift;
  // and the embedded tokenizer, loaded with verification.
  static void TestLongInputs(string shippedPath) {
    using (var model = new Model(shippedPath, "cpu", 0, true)) {
      int context = model.ContextLength;
      int[] ids = model.Tokenize(string.Join(" ", Enumerable.Repeat(Prompt, 2 * context / 10)));
      Check(ids.Length > context, $"{ids.Length} tokens exceed the context {context}");
      int stride = context / 3;
      float[] scored = model.ScoreWithStride(ids, stride);
      // Window 1 covers [stride, stride + context) and scores the tokens after window 0's end.
      int end = Math.Min(ids.Length, stride + context);
      float[] window = model.Score(ids.Skip(stride).Take(end - stride).ToArray());
      for (int i = context; i < end; ++i) {
        Check(scored[i] == window[i - stride],
              $"token {i}: {scored[i]} vs its window's {window[i - stride]}");
      }
      Check(model.Score(ids.Take(context).ToArray())
                .Skip(1)
                .SequenceEqual(model.Score(ids).Skip(1).Take(context - 1)),
            "window 0 is the first context");
      ExpectError(() => model.ScoreWithStride(ids, context), "a stride of the whole context",
                  "PHOTON_ERR_INVALID_ARGUMENT");

      using (var options =
                 Sampling().SetIgnoreEos(true).SetContextLength(16).SetContextShift(true))
      using (var session = new Session(model, options)) {
        session.Prefill(Prompt);
        Check(session.Generate(40) == 40 && session.StopReason == StopReason.Length &&
                  session.Position <= 16,
              $"the context shift goes on: {session.StopReason} at {session.Position}");
      }

      byte[] shipped = File.ReadAllBytes(
          Path.Combine(Path.GetDirectoryName(shippedPath), "tokenizer.model"));
      Check(model.TokenizerModel().SequenceEqual(shipped),
            "the embedded tokenizer is models/tokenizer.model");
    }
  }

  // 16-bit KV caches: chosen by name, reported by the session, kept by a restored one.
  static void TestKvType(Model model) {
    using (var session = new Session(model)) {
      Check(session.KvType == "f32", "the default kv type: " + session.KvType);
    }
    using (var options = Sampling().SetIgnoreEos(true).SetKvType("bf16"))
    using (var session = new Session(model, options)) {
      Check(session.KvType == "bf16", "a bf16 session's kv type: " + session.KvType);
      session.Prefill(Prompt);
      Token[] tokens = session.Tokens(4).ToArray();
      Check(tokens.Length == 4 && tokens.All(t => t.Logprob <= 0), "a bf16 session generates");
      using (var restored = Session.Restore(model, session.Save())) {
        Check(restored.KvType == "bf16", "a restored session's type: " + restored.KvType);
      }
    }
    using (var options = new SessionOptions().SetKvType("f16"))
    using (var session = new Session(model, options)) {
      Check(session.KvType == "f16", "an f16 session's kv type: " + session.KvType);
    }
    using (var options = new SessionOptions()) {
      var e = ExpectError(() => options.SetKvType("f8"), "kv type 'f8'",
                          "PHOTON_ERR_INVALID_ARGUMENT");
      Check(e.Message.Contains("f8") && e.Message.Contains("bf16"),
            "the message names the kv type: " + e.Message);
    }
  }

  // Cancel() from another thread stops a Generate, and a second call on the busy session fails
  // instead of racing.
  static void TestThreads(Model model) {
    using (var endless = new SessionOptions().SetIgnoreEos(true))
    using (var session = new Session(model, endless)) {
      session.Prefill(Prompt);
      int budget = model.ContextLength - session.Position;
      int count = -1;
      var started = new ManualResetEventSlim();
      var worker = new Thread(() => count = session.Generate(budget, token => {
        started.Set();
        return true;
      }));
      worker.Start();
      started.Wait();
      ExpectError(() => session.Prefill(new[] { 1 }), "a call while another thread's runs",
                  "PHOTON_ERR_INVALID_ARGUMENT");
      while (!worker.Join(10)) session.Cancel();  // each call clears an earlier cancel on entry
      Check(session.StopReason == StopReason.Cancelled && count >= 1 && count < budget,
            $"Cancel() from another thread: {session.StopReason} after {count}");
    }
  }

  static void TestErrors(Model model, string modelPath, string workdir) {
    string missing = Path.Combine(workdir, "missing.photon");
    var e = ExpectError(() => new Model(missing), "missing file", "PHOTON_ERR_IO");
    Check(e.Message.Contains(missing), "the message names the file: " + e.Message);
    e = ExpectError(() => new Model(modelPath, "gpu"), "bad device", "PHOTON_ERR_INVALID_ARGUMENT");
    Check(e.Message.Contains("'gpu'"), "the message names the device: " + e.Message);

    byte[] data = File.ReadAllBytes(modelPath);
    string truncated = Path.Combine(workdir, "truncated.photon");
    File.WriteAllBytes(truncated, data.Take(data.Length / 2).ToArray());
    e = ExpectError(() => new Model(truncated), "truncated", "PHOTON_ERR_TRUNCATED");
    Check(e.Message.Contains(truncated), "the message names the file");
    string garbled = Path.Combine(workdir, "garbled.photon");
    data[100] ^= 0xFF;
    File.WriteAllBytes(garbled, data);
    ExpectError(() => new Model(garbled), "damaged header", "PHOTON_ERR_CORRUPT");

    byte[] garbage =
        Encoding.UTF8.GetBytes(string.Concat(Enumerable.Repeat("not a session state ", 8)));
    ExpectError(() => Session.Restore(model, garbage), "restore of garbage",
                "PHOTON_ERR_BAD_IDENTIFIER", "PHOTON_ERR_TRUNCATED", "PHOTON_ERR_CORRUPT");
    Session disposed;
    using (var session = new Session(model)) {
      ExpectError(() => session.Prefill(new[] { model.VocabSize }), "bad token",
                  "PHOTON_ERR_BAD_TOKEN");
      disposed = session;
    }
    try {
      disposed.Generate(1);
      throw new Exception("use after Dispose");
    } catch (ObjectDisposedException expected) {
      Check(expected.Message.Contains("disposed"), expected.Message);
    }
    disposed.Dispose();  // idempotent
  }

  static void TestSaveRestore(Model model, string workdir) {
    byte[] state;
    int[] history;
    int[] expected;
    string path = Path.Combine(workdir, "csharp.state");
    using (var session = Prompted(model)) {
      session.Generate(6);
      state = session.Save();
      session.SaveFile(path);
      history = session.History();
      expected = session.Tokens(8).Select(t => t.Id).ToArray();
    }
    Check(state.Length > 0, "Save() gives bytes");
    var restoredSessions = new[] {
      Session.Restore(model, state), Session.RestoreFile(model, path)
    };
    foreach (var restored in restoredSessions) {
      using (restored) {
        Check(restored.History().SequenceEqual(history), "the restored history");
        Check(restored.Tokens(8).Select(t => t.Id).SequenceEqual(expected),
              "the restored continuation");
      }
    }
    using (var restored = Session.Restore(model, state))
    using (var greedy = new SessionOptions()) {
      restored.SetSampler(greedy);
      Check(restored.Generate(2) == 2 && restored.Mode != Mode.Auto, "a restored session");
    }
  }

  static double RssMb() {
    foreach (string line in File.ReadAllLines("/proc/self/status")) {
      if (line.StartsWith("VmRSS:")) {
        return long.Parse(new string(line.Where(char.IsDigit).ToArray())) / 1024.0;
      }
    }
    throw new Exception("no VmRSS");
  }

  static void Churn(string modelPath, int iteration, bool dispose) {
    var model = new Model(modelPath);
    var small = new SessionOptions().SetContextLength(256).SetSeed((ulong)iteration);
    var session = new Session(model, small);
    session.Prefill(new[] { model.Bos });
    session.Generate(1);
    var restored = Session.Restore(model, session.Save());
    Check(restored.Tokens(1).Any(), "a restored token");
    if (dispose) {  // in a different order each time: a session keeps its model alive
      var all = new IDisposable[] { model, session, restored, small };
      all[iteration % 3].Dispose();
      foreach (var item in all) item.Dispose();
    }
  }

  static void TestMemory(string modelPath) {
    for (int i = 0; i < Warmup; ++i) Churn(modelPath, i, true);
    GC.Collect();
    GC.WaitForPendingFinalizers();
    double baseline = RssMb();
    for (int i = 0; i < Loops; ++i) Churn(modelPath, i, true);
    double disposed = RssMb();
    for (int i = 0; i < LateLoops; ++i) {  // nothing disposed: finalizers release the objects
      Churn(modelPath, i, false);
      if (i % 10 == 0) GC.Collect();
    }
    GC.Collect();
    GC.WaitForPendingFinalizers();
    double late = RssMb();
    Console.WriteLine($"rss: {baseline:F1} MB after warm-up, {disposed:F1} MB after {Loops} "
                      + $"disposed loops, {late:F1} MB after {LateLoops} collected ones");
    Check(disposed - baseline < DisposedBoundMb && late - baseline < LateBoundMb, "memory grows");
  }

  static void TestThreads(Model model, string modelPath) {
    int[] expected;
    using (var session = Prompted(model)) expected = session.Tokens(8).Select(t => t.Id).ToArray();
    using (var single = new Model(modelPath, 1))
    using (var session = Prompted(single)) {
      int[] got = session.Tokens(8).Select(t => t.Id).ToArray();
      Check(got.SequenceEqual(expected), "one thread gives the same tokens");
    }
    ExpectError(() => new Model(modelPath, -1), "negative threads", "PHOTON_ERR_INVALID_ARGUMENT");
  }

  static void WriteContinuation(Session session, string output) {
    File.WriteAllText(output, string.Join(" ", session.Tokens(8).Select(t => t.Id)) + "\n");
  }

  static int Main(string[] args) {
    string mode = args[0], modelPath = args[1];
    switch (mode) {
      case "test":
        Directory.CreateDirectory(args[2]);
        using (var model = new Model(modelPath)) {
          TestModel(model);
          Console.WriteLine("ok TestModel");
          TestStreaming(model);
          Console.WriteLine("ok TestStreaming");
          TestCancel(model);
          Console.WriteLine("ok TestCancel");
          TestCallbackException(model);
          Console.WriteLine("ok TestCallbackException");
          TestBatch(model);
          Console.WriteLine("ok TestBatch");
          TestScore(model);
          Console.WriteLine("ok TestScore");
          TestKvType(model);
          Console.WriteLine("ok TestKvType");
          TestLongInputs(args[3]);
          Console.WriteLine("ok TestLongInputs");
          TestThreads(model);
          Console.WriteLine("ok TestThreads");
          TestErrors(model, modelPath, args[2]);
          Console.WriteLine("ok TestErrors");
          TestSaveRestore(model, args[2]);
          Console.WriteLine("ok TestSaveRestore");
          TestThreads(model, modelPath);
          Console.WriteLine("ok TestThreads");
        }
        break;
      case "memory":
        TestMemory(modelPath);
        break;
      case "save":
        using (var model = new Model(modelPath))
        using (var session = Prompted(model)) {
          session.Generate(5);
          session.SaveFile(args[2]);
          WriteContinuation(session, args[3]);
        }
        break;
      case "restore":
        using (var model = new Model(modelPath))
        using (var session = Session.RestoreFile(model, args[2])) {
          WriteContinuation(session, args[3]);
        }
        break;
      default:
        Console.Error.WriteLine("unknown mode " + mode);
        return 2;
    }
    return 0;
  }
}
