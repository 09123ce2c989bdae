// Tests of the C# binding, run by ctest with mono. Same modes as the other languages' binding
// tests (see tests/bindings/python/binding_test.py):
//   BindingTest.exe test MODEL WORKDIR SHIPPED | memory MODEL | save MODEL STATE OUT
//                   | restore MODEL STATE OUT | engine MODEL | engine-memory MODEL
//                   | engine-exit MODEL open|closed return|exit (SHIPPED: the shipped model, for
//                   inputs longer than the context)
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
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

  // Cancel() from another thread ends a pull loop (Tokens) at its next pull, with Cancelled. The
  // loop waits at its third token until the other thread has cancelled, so that the request lands
  // inside the loop however the threads are scheduled; every wait is bounded. A Cancel() made
  // before a loop ends it at its first pull, and pulling again resumes.
  static void TestCancelIterator(Model model) {
    using (var endless = new SessionOptions().SetIgnoreEos(true))
    using (var session = new Session(model, endless))
    using (var alone = new Session(model, endless)) {
      session.Prefill(Prompt);
      alone.Prefill(Prompt);
      var expected = alone.Tokens(8).Select(t => t.Id).ToList();
      var third = new ManualResetEventSlim();
      var cancelled = new ManualResetEventSlim();
      var canceller = new Thread(() => {
        if (third.Wait(TimeSpan.FromSeconds(60))) session.Cancel();
        cancelled.Set();
      });
      canceller.Start();
      var pulled = new List<int>();
      foreach (var token in session.Tokens(200)) {  // a budget the cancellation must cut short
        pulled.Add(token.Id);
        if (pulled.Count == 3) {
          third.Set();
          Check(cancelled.Wait(TimeSpan.FromSeconds(60)), "the other thread cancelled in a minute");
        }
      }
      third.Set();
      canceller.Join();
      Check(pulled.SequenceEqual(expected.Take(3)) && session.StopReason == StopReason.Cancelled,
            $"Cancel() from another thread ends the loop: {pulled.Count}, {session.StopReason}");
      session.Cancel();
      Check(!session.Tokens(5).Any() && session.StopReason == StopReason.Cancelled,
            "a Cancel() before a loop ends it at its first pull");
      Check(session.Tokens(5).Select(t => t.Id).SequenceEqual(expected.Skip(3)),
            "pulling again resumes");
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

  // ScoreTop gives each token Score's log-probability and its position's k alternatives, the most
  // likely first; the token's own value among them is its log-probability exactly; the first
  // token has none; k outside [1, the vocabulary] is an error.
  static void TestScoreTop(Model model) {
    int[] ids;
    using (var greedy = new SessionOptions().SetIgnoreEos(true))
    using (var session = new Session(model, greedy)) {
      session.Prefill(Prompt);
      session.Generate(6);  // greedy: the drawn tokens are among their alternatives
      ids = session.History();
    }
    float[] plain = model.Score(ids);
    IReadOnlyList<ScoredToken> scored = model.ScoreTop(ids, TopK);
    Check(scored.Count == ids.Length, $"a ScoredToken per token: {scored.Count}");
    Check(scored[0].Id == ids[0] && float.IsNaN(scored[0].Logprob) &&
              scored[0].TopLogprobs.Count == 0,
          $"the first token has none: {scored[0]}");
    int among = 0;
    for (int i = 1; i < ids.Length; ++i) {
      ScoredToken token = scored[i];
      IReadOnlyList<TopLogprob> top = token.TopLogprobs;
      Check(token.Id == ids[i] && token.Logprob == plain[i],
            $"Score's log-probability: {token} vs {plain[i]}");
      Check(top.Count == TopK && top.Select(a => a.Id).Distinct().Count() == TopK,
            $"{TopK} alternatives of distinct ids: {token}");
      for (int j = 1; j < top.Count; ++j) {
        Check(top[j - 1].Logprob > top[j].Logprob ||
                  (top[j - 1].Logprob == top[j].Logprob && top[j - 1].Id < top[j].Id),
              $"the most likely first: {token}");
      }
      foreach (TopLogprob alternative in top.Where(a => a.Id == token.Id)) {
        Check(alternative.Logprob == token.Logprob, $"the token's value among them: {token}");
        ++among;
      }
    }
    Check(among > 0, "the greedy tokens are among their alternatives");
    foreach (int k in new[] {0, model.VocabSize + 1}) {
      ExpectError(() => model.ScoreTop(ids, k), $"ScoreTop with k = {k}",
                  "PHOTON_ERR_INVALID_ARGUMENT");
    }
    ExpectError(() => model.ScoreTop(new int[0], TopK), "nothing to score with alternatives",
                "PHOTON_ERR_INVALID_ARGUMENT");
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
      IReadOnlyList<ScoredToken> windowed = model.ScoreTopWithStride(ids, 2, stride);
      for (int i = 1; i < ids.Length; ++i) {
        Check(windowed[i].Logprob == scored[i] && windowed[i].TopLogprobs.Count == 2,
              $"ScoreTopWithStride scores token {i} as ScoreWithStride: {windowed[i]}");
      }

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

  const int SamplerTokens = 8;

  // The token ids a greedy session generates after Prompt with options, which it disposes.
  static int[] GreedyTokens(Model model, SessionOptions options) {
    using (options)
    using (var session = new Session(model, options)) {
      session.Prefill(Prompt);
      return session.Tokens(SamplerTokens).Select(t => t.Id).ToArray();
    }
  }

  // Logit biases and presence / frequency penalties reach the sampler, each value with its token
  // and its penalty. Greedy decoding shows it: a bias of -100 bars the unbiased first token and
  // one of +100 forces its token; a frequency penalty of -100 (a gain of 100 per occurrence)
  // repeats the prompt's most frequent token; presence -100 with frequency +60 favours the ids
  // that occur once in the window (a gain of 40) over the others (a loss of 20 or more).
  static void TestSamplerSettings(Model model) {
    int[] prompt = model.Tokenize(Prompt);
    int[] plain = GreedyTokens(model, Greedy());
    int first = plain[0], forced = prompt[1];
    Check(!prompt.Contains(first) && forced != first,
          "the unbiased greedy run starts outside the prompt: " + string.Join(" ", plain));
    int[] barred = GreedyTokens(model, Greedy().SetLogitBias(new[] { first }, new[] { -100f }));
    Check(barred[0] != first, $"a bias of -100 bars token {first}: {string.Join(" ", barred)}");
    int[] paired = GreedyTokens(
        model, Greedy().SetLogitBias(new[] { first, forced }, new[] { -100f, 100f }));
    Check(paired.All(token => token == forced) && paired.Length == SamplerTokens,
          $"a bias of +100 forces token {forced}: {string.Join(" ", paired)}");
    var cleared = Greedy().SetLogitBias(new[] { forced }, new[] { 100f });
    Check(ReferenceEquals(cleared.SetLogitBias(new int[0], new float[0]), cleared),
          "SetLogitBias chains");
    Check(GreedyTokens(model, cleared).SequenceEqual(plain), "empty arrays clear the biases");

    var counts = prompt.GroupBy(token => token).OrderByDescending(group => group.Count()).ToList();
    int common = counts[0].Key;
    Check(counts[0].Count() > counts[1].Count(),
          "the prompt has one most frequent token: " + string.Join(" ", prompt));
    int[] repeated = GreedyTokens(model, Greedy().SetFrequencyPenalty(-100));
    Check(repeated.All(token => token == common) && repeated.Length == SamplerTokens,
          $"frequency -100 repeats {common}: {string.Join(" ", repeated)}");
    int[] mixed = GreedyTokens(model, Greedy().SetPresencePenalty(-100).SetFrequencyPenalty(60));
    int[] window = prompt.Concat(mixed).ToArray();
    for (int i = 0; i < mixed.Length; ++i) {
      Check(window.Take(prompt.Length + i).Count(token => token == mixed[i]) == 1,
            "presence -100 and frequency +60 favour the ids seen once: " + string.Join(" ", mixed));
    }

    using (var options = new SessionOptions()) {
      var e = ExpectError(() => options.SetLogitBias(new[] { first, forced }, new[] { 1f }),
                          "2 tokens with 1 bias", "PHOTON_ERR_INVALID_ARGUMENT");
      Check(e.Message.Contains("2 tokens") && e.Message.Contains("1 biases"),
            "the counts named: " + e.Message);
      ExpectError(() => options.SetLogitBias(new[] { first }, new[] { float.NaN }), "a NaN bias",
                  "PHOTON_ERR_INVALID_ARGUMENT");
      ExpectError(() => options.SetPresencePenalty(float.PositiveInfinity),
                  "an infinite presence penalty", "PHOTON_ERR_INVALID_ARGUMENT");
      ExpectError(() => options.SetFrequencyPenalty(float.NaN), "a NaN frequency penalty",
                  "PHOTON_ERR_INVALID_ARGUMENT");
      try {
        options.SetLogitBias(new[] { first }, null);
        throw new Exception("no ArgumentNullException for null biases");
      } catch (ArgumentNullException e2) {
        Check(e2.ParamName == "biases", "the null argument named: " + e2.ParamName);
      }
      options.SetLogitBias(new[] { model.VocabSize }, new[] { 1f });
      ExpectError(() => new Session(model, options).Dispose(),
                  "a biased token outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
    }
  }

  const int TopK = 3;

  // A token with its alternatives, for comparing tokens (Token has reference equality).
  static string Describe(Token token) =>
      $"{token.Id} '{token.Piece}' {token.Logprob:R} [" +
      string.Join(" ", token.TopLogprobs.Select(a => $"{a.Id}:{a.Logprob:R}")) + "]";

  static string Describe(IEnumerable<Token> tokens) => string.Join(", ", tokens.Select(Describe));

  // Each token holds k alternatives of distinct ids, the most likely first (the lower id first on
  // ties); greedy decoding drew the first one, whose log-probability is the token's own (to float
  // rounding).
  static void CheckAlternatives(List<Token> tokens, int k, string what) {
    Check(tokens.Count == SamplerTokens, $"{what}: {tokens.Count} tokens");
    foreach (Token token in tokens) {
      IReadOnlyList<TopLogprob> top = token.TopLogprobs;
      Check(top.Count == k, $"{what}: {k} alternatives: {Describe(token)}");
      if (k == 0) continue;
      Check(top[0].Id == token.Id && Math.Abs(top[0].Logprob - token.Logprob) <= 1e-5f,
            $"{what}: the greedy token is the first alternative: {Describe(token)}");
      for (int i = 1; i < k; ++i) {
        Check(top[i - 1].Logprob > top[i].Logprob
                  || (top[i - 1].Logprob == top[i].Logprob && top[i - 1].Id < top[i].Id),
              $"{what}: the most likely first: {Describe(token)}");
      }
      Check(top.Select(a => a.Id).Distinct().Count() == k && top.All(a => a.Logprob <= 0),
            $"{what}: distinct ids, log-probabilities: {Describe(token)}");
    }
  }

  // The tokens a greedy session with options generates after Prompt, pulled or pushed.
  static List<Token> GreedyRun(Model model, SessionOptions options, bool pull) {
    using (var session = new Session(model, options)) {
      session.Prefill(Prompt);
      if (pull) return session.Tokens(SamplerTokens).ToList();
      var pushed = new List<Token>();
      session.Generate(SamplerTokens, token => { pushed.Add(token); return true; });
      return pushed;
    }
  }

  // SetTopLogprobs(k) gives each token its k alternatives, the same through the enumeration, the
  // callback and a batch; 0 gives none and the same draws; Model.TokenPiece names them.
  static void TestTopLogprobs(Model model) {
    using (var options = Greedy())
    using (var plainOptions = Greedy())
    using (var zero = Greedy().SetTopLogprobs(0)) {
      Check(ReferenceEquals(options.SetTopLogprobs(TopK), options), "SetTopLogprobs chains");
      List<Token> pulled = GreedyRun(model, options, true);
      CheckAlternatives(pulled, TopK, "pulled");
      List<Token> pushed = GreedyRun(model, options, false);
      Check(Describe(pushed) == Describe(pulled),
            "the callback's alternatives are the enumeration's: " + Describe(pushed));
      using (var first = new Session(model, options))
      using (var second = new Session(model, options)) {
        first.Prefill(Prompt);
        second.Prefill(Prompt);
        var batched = new[] { new List<Token>(), new List<Token>() };
        Session.GenerateBatch(new[] { first, second }, SamplerTokens, (index, token) => {
          batched[index].Add(token);
          return true;
        });
        Check(batched.All(tokens => Describe(tokens) == Describe(pulled)),
              "a batch's alternatives: " + string.Join("; ", batched.Select(Describe)));
      }

      List<Token> plain = GreedyRun(model, plainOptions, true);
      CheckAlternatives(plain, 0, "k = 0 pulled");
      List<Token> quiet = GreedyRun(model, zero, false);
      CheckAlternatives(quiet, 0, "k = 0 pushed");
      Check(plain.Select(t => t.Id).SequenceEqual(pulled.Select(t => t.Id))
                && quiet.Select(t => t.Id).SequenceEqual(pulled.Select(t => t.Id)),
            "alternatives leave the draws alone");
      Check(new Token(1, "a", -1f).TopLogprobs.Count == 0, "a Token without alternatives");
      foreach (int k in new[] { 21, -1 }) {  // PHOTON_MAX_TOP_LOGPROBS is 20
        ExpectError(() => options.SetTopLogprobs(k), $"SetTopLogprobs({k})",
                    "PHOTON_ERR_INVALID_ARGUMENT");
      }

      // A token's raw bytes after the one before it are its piece when that piece is plain text:
      // it is not empty (the start of a split character) and nothing was held back before it.
      int[] prompt = model.Tokenize(Prompt);
      int previous = prompt[prompt.Length - 1], compared = 0;
      bool held = false;
      foreach (Token token in pulled) {
        byte[] raw = model.TokenPiece(token.Id, previous);
        if (token.Piece.Length > 0 && !held) {
          Check(raw.SequenceEqual(Encoding.UTF8.GetBytes(token.Piece)),
                $"token {token.Id}'s bytes after {previous}: {BitConverter.ToString(raw)} vs " +
                    $"'{token.Piece}'");
          ++compared;
        }
        foreach (TopLogprob alternative in token.TopLogprobs) {
          model.TokenPiece(alternative.Id, previous);  // every alternative has a piece
        }
        previous = token.Id;
        held = token.Piece.Length == 0;
      }
      Check(compared > 0, "a plain text token's bytes are its piece: " + Describe(pulled));
      foreach (Token token in pulled.Where(t => t.Piece.StartsWith(" ") && t.Piece.Length > 1)) {
        byte[] start = model.TokenPiece(token.Id, -1);
        Check(start.SequenceEqual(Encoding.UTF8.GetBytes(token.Piece.Substring(1)))
                  && start.SequenceEqual(model.TokenPiece(token.Id, model.Bos)),
              "at the start of the text a leading space is dropped: " + Describe(token));
      }
      ExpectError(() => model.TokenPiece(model.VocabSize, -1),
                  "TokenPiece of an id outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
      ExpectError(() => model.TokenPiece(pulled[0].Id, model.VocabSize),
                  "TokenPiece after an id outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
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

  // The precision load option: "exact" by default on the CPU; "bf16" rounds activations to bf16
  // before each product, so its scores stay close to the exact ones (not equal); other text fails,
  // naming it.
  static void TestPrecision(Model model, string modelPath) {
    Check(model.Precision == "exact", "the CPU's default precision: " + model.Precision);
    int[] ids = model.Tokenize(Prompt);
    float[] exact = model.Score(ids);
    using (var bf16 = new Model(modelPath, "cpu", "bf16")) {
      Check(bf16.Precision == "bf16" && bf16.Device == "cpu",
            $"precision {bf16.Precision} on {bf16.Device}");
      float[] rounded = bf16.Score(ids);
      Check(rounded.Length == exact.Length && float.IsNaN(rounded[0]), "bf16 score's shape");
      for (int i = 1; i < exact.Length; ++i) {
        Check(!float.IsNaN(rounded[i]) && !float.IsInfinity(rounded[i])
                  && Math.Abs(rounded[i] - exact[i]) < 0.5f,
              $"token {i}: bf16 {rounded[i]} vs {exact[i]}");
      }
      using (var session = Prompted(bf16)) {
        Token[] generated = session.Tokens(4).ToArray();
        Check(generated.Length == 4 && generated.All(t => t.Logprob <= 0),
              "a bf16 model generates: " + generated.Length + " tokens");
      }
    }
    using (var chosen = new Model(modelPath, "cpu", 0, false, "exact"))
      Check(chosen.Precision == "exact", "precision exact: " + chosen.Precision);
    var e = ExpectError(() => new Model(modelPath, "cpu", "fp8"), "bad precision",
                        "PHOTON_ERR_INVALID_ARGUMENT");
    Check(e.Message.Contains("'fp8'"), "the message names the precision: " + e.Message);
  }

  // ---- the serving engine ----------------------------------------------------------------------

  const int EngineTokens = 8;
  // A bound for waits that end within a second when all is well.
  static readonly TimeSpan EngineWait = TimeSpan.FromSeconds(120);

  static SessionOptions Greedy() => new SessionOptions().SetIgnoreEos(true);

  static RequestOptions Ask(string prompt, int maxTokens) {
    using (var greedy = Greedy()) {
      return new RequestOptions().SetPromptText(prompt).SetOptions(greedy).SetMaxTokens(maxTokens);
    }
  }

  // The token ids a session alone generates greedily after prompt: what a request must give.
  static int[] Alone(Model model, string prompt, int maxTokens) {
    using (var greedy = Greedy())
    using (var session = new Session(model, greedy)) {
      session.Prefill(prompt);
      return session.Tokens(maxTokens).Select(t => t.Id).ToArray();
    }
  }

  static int[] Pulled(Request request) => request.Tokens().Select(t => t.Id).ToArray();

  static void AwaitEnd(Request request) => Check(request.Wait(EngineWait), "the request ends in time");

  static void StepToEnd(Engine engine) {
    for (int steps = 0; engine.Step() > 0 && steps < 10000; ++steps) {}
  }

  // A request's alternatives (SessionOptions.SetTopLogprobs) are its session's alone, pulled and
  // pushed to a callback alike.
  static void TestEngineTopLogprobs(Model model) {
    using (var options = Greedy().SetTopLogprobs(TopK)) {
      List<Token> expected;
      using (var session = new Session(model, options)) {
        session.Prefill(Prompt);
        expected = session.Tokens(EngineTokens).ToList();
      }
      Check(expected.All(token => token.TopLogprobs.Count == TopK),
            "alternatives: " + Describe(expected));
      var pushed = new List<Token>();
      List<Token> pulled, plain;
      using (var ask = new RequestOptions().SetPromptText(Prompt).SetOptions(options)
                           .SetMaxTokens(EngineTokens))
      using (var plainAsk = Ask(Prompt, EngineTokens))
      using (var engine = new Engine(model)) {
        engine.Start();
        using (var pushing = engine.Submit(ask, token => {
                 lock (pushed) pushed.Add(token);
                 return true;
               }))
        using (var pulling = engine.Submit(ask))
        using (var plainRequest = engine.Submit(plainAsk)) {
          pulled = pulling.Tokens().ToList();
          plain = plainRequest.Tokens().ToList();
          AwaitEnd(pushing);
        }
        engine.Stop(true);
      }
      Check(Describe(pulled) == Describe(expected),
            $"pulled alternatives: {Describe(pulled)} vs alone {Describe(expected)}");
      lock (pushed) {
        Check(Describe(pushed) == Describe(expected),
              $"pushed alternatives: {Describe(pushed)} vs alone {Describe(expected)}");
      }
      Check(plain.Count == EngineTokens && plain.All(token => token.TopLogprobs.Count == 0),
            "k = 0: " + Describe(plain));
    }
  }

  // Requests streamed at once, pulled by enumerations on threads and pushed to callbacks: each
  // gives exactly the tokens of its session run alone; statistics count them.
  static void TestEngineStreams(Model model) {
    int[][] expected = BatchPrompts.Select(p => Alone(model, p, EngineTokens)).ToArray();
    using (var options = new EngineOptions().SetMaxRunning(4))
    using (var engine = new Engine(model, options)) {
      engine.Start();
      var pulled = new List<Request>();
      var pushed = new List<Request>();
      var pushedTokens = new List<List<Token>>();
      foreach (string prompt in BatchPrompts) {
        using (var ask = Ask(prompt, EngineTokens)) {
          pulled.Add(engine.Submit(ask));
          var tokens = new List<Token>();
          pushedTokens.Add(tokens);
          pushed.Add(engine.Submit(ask, token => { lock (tokens) tokens.Add(token); return true; }));
        }
      }
      var got = new int[pulled.Count][];
      var threads = pulled.Select((request, i) => new Thread(() => got[i] = Pulled(request)))
                          .ToList();
      threads.ForEach(thread => thread.Start());
      threads.ForEach(thread => thread.Join(EngineWait));
      for (int i = 0; i < expected.Length; ++i) {
        Check(got[i] != null && got[i].SequenceEqual(expected[i]), $"pulled tokens of request {i}");
        AwaitEnd(pushed[i]);
        Check(pushedTokens[i].Select(t => t.Id).SequenceEqual(expected[i]),
              $"pushed tokens of request {i}");
        Check(pushedTokens[i].All(t => t.Logprob <= 0), "log probabilities");
      }
      var all = pulled.Concat(pushed).ToList();
      for (int i = 0; i < all.Count; ++i) {
        Request request = all[i];
        RequestStats stats = request.Stats();
        int promptTokens = model.Tokenize(BatchPrompts[i % BatchPrompts.Length]).Length;
        Check(request.State == RequestState.Finished && request.StopReason == StopReason.Length
              && request.Error == null, $"finished by length: {request.State} {request.StopReason}");
        Check(stats.GeneratedTokens == EngineTokens && stats.PromptTokens == promptTokens
              && stats.ReusedTokens == 0 && stats.Pauses == 0, "request stats");
        Check(0 <= stats.QueueSeconds && stats.QueueSeconds <= stats.FirstTokenSeconds
              && stats.DecodeSeconds >= 0, "request times");
        request.Dispose();
      }
      engine.Stop(true);  // the worker's last step has retired every request
      EngineStats engineStats = engine.Stats();
      Check(engineStats.Submitted == all.Count && engineStats.Finished == all.Count
            && engineStats.Failed == 0 && engineStats.GeneratedTokens == all.Count * EngineTokens
            && engineStats.Running == 0 && engineStats.Waiting == 0 && engineStats.Steps > 0
            && engineStats.MemoryPeak > 0 && engineStats.MemoryInUse == 0, "engine stats");
    }
  }

  // An engine stepped by the caller's loop: nothing happens between steps.
  static void TestEngineStepped(Model model) {
    int[] expected = Alone(model, Prompt, EngineTokens);
    using (var engine = new Engine(model))
    using (var ask = Ask(Prompt, EngineTokens))
    using (var request = engine.Submit(ask)) {
      Check(request.State == RequestState.Waiting && !request.Wait(TimeSpan.Zero),
            "waiting before the first step");
      Check(double.IsNaN(request.Stats().QueueSeconds), "NaN before admission");
      StepToEnd(engine);
      Check(request.Wait(TimeSpan.Zero) && Pulled(request).SequenceEqual(expected),
            "a stepped request gives the tokens of its session alone");
      Check(engine.Step() == 0, "a step with nothing to do");
      ExpectError(() => engine.Stop(true), "stop without a worker", "PHOTON_ERR_INVALID_ARGUMENT");
    }
  }

  // With a prefix cache, a request whose prompt is a prompt read before starts from its
  // save: those tokens count as reused, the engine counts the hit and the cache's bytes, and both
  // requests generate what an engine without the cache generates.
  static void TestEnginePrefixCache(Model model) {
    int[] first = model.Tokenize(Prompt + " " + BatchPrompts[1]);
    // The same prompt again: a RecGen model (the test model's AUTO mode) restores only that.
    int[] second = (int[])first.Clone();
    var expected = new List<string>();
    using (var uncached = new Engine(model)) {
      foreach (int[] prompt in new[] {first, second}) {
        using (var request = RunToEnd(uncached, prompt)) {
          expected.Add(Describe(request.Tokens()));
        }
      }
      EngineStats stats = uncached.Stats();
      Check(stats.PrefixHits == 0 && stats.PrefixBytes == 0, "no cache");
    }
    using (var options = new EngineOptions().SetPrefixCache(64UL << 20))
    using (var engine = new Engine(model, options)) {
      var got = new List<string>();
      using (var request = RunToEnd(engine, first)) {
        got.Add(Describe(request.Tokens()));
        EngineStats stats = engine.Stats();
        Check(request.Stats().ReusedTokens == 0 && stats.PrefixHits == 0 && stats.PrefixBytes > 0,
              "the first prompt is read and saved");
      }
      using (var request = RunToEnd(engine, second)) {
        got.Add(Describe(request.Tokens()));
        RequestStats stats = request.Stats();
        Check(stats.ReusedTokens == first.Length &&
                  stats.PromptTokens == second.Length - first.Length,
              $"the second starts from the first's save: reused {stats.ReusedTokens} of " +
                  first.Length);
      }
      EngineStats engineStats = engine.Stats();
      Check(engineStats.PrefixHits == 1 && engineStats.PrefixBytes > 0 &&
                engineStats.ReusedTokens == first.Length,
            "the hit is counted");
      Check(got.SequenceEqual(expected),
            $"the cache changes no result: {string.Join(" / ", got)} vs " +
                string.Join(" / ", expected));
    }
  }

  // A greedy request for prompt, stepped until the engine has finished it.
  static Request RunToEnd(Engine engine, int[] prompt) {
    using (var greedy = Greedy())
    using (var ask = new RequestOptions().SetPrompt(prompt).SetOptions(greedy)
                         .SetMaxTokens(EngineTokens)) {
      Request request = engine.Submit(ask);
      StepToEnd(engine);
      return request;
    }
  }

  // Cancel from another thread ends a streaming request (pulled or pushed) at the next step; the
  // other requests go on.
  static void TestEngineCancel(Model model) {
    using (var engine = new Engine(model))
    using (var greedy = Greedy())
    using (var endless = new RequestOptions().SetPromptText(Prompt).SetOptions(greedy))
    using (var ask = Ask(Prompt, EngineTokens)) {
      engine.Start();
      var pulled = engine.Submit(endless);
      var got = new List<Token>();
      var puller = new Thread(() => {
        foreach (var token in pulled.Tokens()) lock (got) got.Add(token);
      });
      puller.Start();
      var pushedTokens = new List<Token>();
      var pushed = engine.Submit(endless, token => {
        lock (pushedTokens) pushedTokens.Add(token);
        return true;
      });
      var beside = engine.Submit(ask);
      var deadline = DateTime.UtcNow + EngineWait;
      Func<List<Token>, int> count = tokens => { lock (tokens) return tokens.Count; };
      while ((count(got) < 2 || count(pushedTokens) < 2) && DateTime.UtcNow < deadline) {
        Thread.Sleep(5);
      }
      var canceller = new Thread(() => {
        pulled.Cancel();
        pushed.Cancel();
      });
      canceller.Start();
      canceller.Join();
      Check(puller.Join(EngineWait), "the enumeration ends after Cancel");
      var cancelled = new[] { pulled, pushed };
      var streamed = new[] { got, pushedTokens };
      for (int i = 0; i < cancelled.Length; ++i) {
        Request request = cancelled[i];
        List<Token> tokens = streamed[i];
        AwaitEnd(request);
        Check(request.StopReason == StopReason.Cancelled, "cancelled: " + request.StopReason);
        Check(tokens.Count >= 2 && tokens.Count < model.ContextLength
              && request.Stats().GeneratedTokens == tokens.Count,
              "tokens before the cancel: " + tokens.Count);
      }
      AwaitEnd(beside);
      Check(beside.StopReason == StopReason.Length, "the request beside goes on");
      engine.Stop(false);
      Check(engine.Stats().Cancelled == 2, "cancelled requests are counted");
      foreach (var request in new[] { pulled, pushed, beside }) request.Dispose();
    }
  }

  // A callback returning false stops its request alone; one that throws stops it and the
  // exception comes out of Wait; one that waits on its own engine gets an error, not a deadlock;
  // a request disposed from its own callback just ends.
  static void TestEngineCallbacks(Model model) {
    using (var engine = new Engine(model))
    using (var ask = Ask(Prompt, EngineTokens)) {
      engine.Start();
      var seen = new List<Token>();
      var stopped = engine.Submit(ask, token => { seen.Add(token); return false; });
      var failures = new List<Token>();
      var failing = engine.Submit(ask, token => {
        failures.Add(token);
        if (failures.Count == 2) throw new CallbackFailure("stop here");
        return true;
      });
      var beside = engine.Submit(ask);
      AwaitEnd(stopped);
      Check(seen.Count == 1 && stopped.StopReason == StopReason.Callback, "false stops the request");
      try {
        failing.Wait();
        throw new Exception("the callback's exception was swallowed");
      } catch (CallbackFailure e) {
        Check(e.Message == "stop here", "the very exception reaches Wait");
      }
      Check(failures.Count == 2 && failing.StopReason == StopReason.Callback,
            "the exception stopped its request");
      Check(Pulled(beside).SequenceEqual(Alone(model, Prompt, EngineTokens)), "the others go on");

      using (var two = Ask(Prompt, 2))
      using (var waiting = engine.Submit(two, token => beside.Wait(TimeSpan.FromSeconds(1)))) {
        var e = ExpectError(() => waiting.Wait(), "waiting on the engine from its own callback",
                            "PHOTON_ERR_INVALID_ARGUMENT");
        Check(e.Message.Contains("callback"), "the message says why: " + e.Message);
      }
      Request itself = null;
      var ready = new ManualResetEventSlim();
      var closed = new ManualResetEventSlim();
      using (var open = new RequestOptions().SetPromptText(Prompt)) {
        itself = engine.Submit(open, token => {
          ready.Wait();
          itself.Dispose();
          closed.Set();
          return true;
        });
      }
      ready.Set();
      Check(closed.Wait(EngineWait), "disposed from its own callback");
      ExpectError(() => { var state = itself.State; }, "use after dispose",
                  "PHOTON_ERR_INVALID_ARGUMENT");
      using (var two = Ask(Prompt, 2))
      using (var after = engine.Submit(two)) {
        AwaitEnd(after);
        Check(after.Stats().GeneratedTokens == 2, "the engine serves on");
      }
      engine.Stop(true);
      foreach (var request in new[] { stopped, failing, beside }) request.Dispose();
    }
  }

  static StopReason Completed(Task<StopReason> task) {
    Check(task.Wait(EngineWait), "the task completes in time");
    return task.Result;
  }

  static async Task<int> TokensWhenAwaited(Request request, List<Token> tokens) {
    await request.Completion;
    lock (tokens) return tokens.Count;
  }

  // Completion completes once, after the last token, with the stop reason (a request finished
  // already: at once); faults with a callback's exception; completes with Cancelled for a request
  // disposed before it finished. Its continuations run off the engine's thread.
  static void TestEngineCompletion(Model model) {
    using (var engine = new Engine(model))
    using (var ask = Ask(Prompt, EngineTokens))
    using (var greedy = Greedy())
    using (var endless = new RequestOptions().SetPromptText(Prompt).SetOptions(greedy)) {
      engine.Start();
      var tokens = new List<Token>();
      var pushed = engine.Submit(ask, token => { lock (tokens) tokens.Add(token); return true; });
      var counted = TokensWhenAwaited(pushed, tokens);
      Check(counted.Wait(EngineWait) && counted.Result == EngineTokens,
            "completed after the last token");
      Check(Completed(pushed.Completion) == StopReason.Length, "by length");
      Check(ReferenceEquals(pushed.Completion, pushed.Completion), "one task");
      var pulled = engine.Submit(ask);
      Check(Pulled(pulled).Length == EngineTokens, "pulled");
      Check(Completed(pulled.Completion) == StopReason.Length, "a pulled request completes");

      var failing = engine.Submit(ask, token => { throw new CallbackFailure("fails"); });
      try {
        failing.Completion.Wait(EngineWait);
        throw new Exception("completed despite the callback's exception");
      } catch (AggregateException e) {
        Check(e.InnerException is CallbackFailure, "the callback's exception: " + e);
      }

      int engineThread = -1;
      var onThread = engine.Submit(ask, token => {
        engineThread = Thread.CurrentThread.ManagedThreadId;
        return true;
      });
      var continuedOn = onThread.Completion.ContinueWith(
          task => Thread.CurrentThread.ManagedThreadId, TaskContinuationOptions.ExecuteSynchronously);
      Check(continuedOn.Wait(EngineWait) && continuedOn.Result != engineThread,
            "continuations leave the engine's thread");

      var abandoned = engine.Submit(endless, token => true);
      var abandonedEnd = abandoned.Completion;
      abandoned.Dispose();
      Check(Completed(abandonedEnd) == StopReason.Cancelled, "disposed before it finished");
      var disposedFirst = engine.Submit(ask);
      disposedFirst.Dispose();
      Check(disposedFirst.Completion.IsFaulted &&
            disposedFirst.Completion.Exception.InnerException is PhotonException,
            "a disposed request's completion faults");
      engine.Stop(true);
      foreach (var request in new[] { pushed, pulled, failing, onThread }) request.Dispose();
    }
  }

  // A full queue is BusyException; a request that fails ends with its error, which the
  // enumeration throws; disposed objects refuse calls.
  static void TestEngineErrors(Model model) {
    using (var options = new EngineOptions().SetMaxWaiting(1))
    using (var engine = new Engine(model, options))
    using (var one = Ask(Prompt, 1))
    using (var first = engine.Submit(one)) {
      var e = ExpectError(() => engine.Submit(one), "a full queue", "PHOTON_ERR_BUSY");
      Check(e is BusyException, "BusyException: " + e.GetType());
      Check(engine.Stats().Refused == 1 && first.State == RequestState.Waiting,
            "refused submissions are counted");
    }
    using (var options = new EngineOptions().SetMemoryBudget(1))
    using (var engine = new Engine(model, options))
    using (var four = Ask(Prompt, 4))
    using (var request = engine.Submit(four)) {
      StepToEnd(engine);
      Check(request.StopReason == StopReason.Error, "stop reason " + request.StopReason);
      PhotonException error = request.Error;
      Check(error != null && error.StatusName == "PHOTON_ERR_OUT_OF_MEMORY"
            && error.Message.Contains("budget"), "the request's error: " + error);
      ExpectError(() => Pulled(request), "the enumeration of a failed request",
                  "PHOTON_ERR_OUT_OF_MEMORY");
      ExpectError(() => request.Save(), "save of a failed request", "PHOTON_ERR_INVALID_ARGUMENT");
      Check(engine.Stats().Failed == 1, "failed requests are counted");
    }
    Engine disposedEngine;
    using (var engine = new Engine(model))
    using (var nothing = new RequestOptions())
    using (var bad = new RequestOptions().SetPrompt(new[] { model.VocabSize }))
    using (var one = Ask(Prompt, 1)) {
      ExpectError(() => engine.Submit(nothing), "a request without a prompt",
                  "PHOTON_ERR_INVALID_ARGUMENT");
      ExpectError(() => engine.Submit(bad), "a token outside the vocabulary", "PHOTON_ERR_BAD_TOKEN");
      ExpectError(() => new EngineOptions().SetMaxRunning(0), "max running 0",
                  "PHOTON_ERR_INVALID_ARGUMENT");
      var pushed = engine.Submit(one, token => true);
      ExpectError(() => Pulled(pushed), "pulling a request that has a callback",
                  "PHOTON_ERR_INVALID_ARGUMENT");
      pushed.Dispose();
      pushed.Dispose();  // idempotent
      ExpectError(() => pushed.Cancel(), "use after dispose", "PHOTON_ERR_INVALID_ARGUMENT");
      disposedEngine = engine;
    }
    using (var one = Ask(Prompt, 1)) {
      ExpectError(() => disposedEngine.Submit(one), "a disposed engine",
                  "PHOTON_ERR_INVALID_ARGUMENT");
    }
  }

  // A finished request's state and session continue it exactly as the session alone would.
  static void TestEngineContinue(Model model) {
    int[] expected = Alone(model, Prompt, 2 * EngineTokens);
    using (var engine = new Engine(model))
    using (var ask = Ask(Prompt, EngineTokens))
    using (var first = engine.Submit(ask)) {
      StepToEnd(engine);
      Check(Pulled(first).SequenceEqual(expected.Take(EngineTokens)), "the first half");
      byte[] state = first.Save();
      Session session = first.TakeSession();
      ExpectError(() => first.TakeSession(), "a session taken twice", "PHOTON_ERR_INVALID_ARGUMENT");
      int position = session.Position;
      using (var greedy = Greedy())
      using (var byStateOptions =
                 new RequestOptions().SetState(state).SetOptions(greedy).SetMaxTokens(EngineTokens))
      using (var bySessionOptions =
                 new RequestOptions().SetSession(session).SetMaxTokens(EngineTokens))
      using (var byState = engine.Submit(byStateOptions))
      using (var bySession = engine.Submit(bySessionOptions)) {
        ExpectError(() => { int taken = session.Position; }, "a session taken over",
                    "PHOTON_ERR_INVALID_ARGUMENT");
        StepToEnd(engine);
        foreach (var request in new[] { byState, bySession }) {
          Check(Pulled(request).SequenceEqual(expected.Skip(EngineTokens)),
                "the continuation equals the session's alone");
          Check(request.Stats().ReusedTokens == position, "reused tokens");
        }
        using (var again = bySession.TakeSession())
        using (var restored = Session.Restore(model, byState.Save())) {
          Check(again.Position == position + EngineTokens, "the taken session's history");
          Check(restored.Position == position + EngineTokens, "a request's state restores");
        }
      }
    }
  }

  // A request keeps its engine alive and the engine its model: disposing them first leaves the
  // request streaming.
  static void TestEngineOwnership(string modelPath) {
    int[] expected;
    using (var model = new Model(modelPath)) expected = Alone(model, Prompt, EngineTokens);
    var owner = new Model(modelPath);
    var engine = new Engine(owner);
    owner.Dispose();
    engine.Start();
    using (var ask = Ask(Prompt, EngineTokens))
    using (var request = engine.Submit(ask)) {
      engine.Dispose();
      Check(Pulled(request).SequenceEqual(expected), "the request outlives its engine handle");
    }  // the engine (and its worker) goes now
  }

  // Leaves a started engine running a slow callback (its handle open, or closed and held by the
  // requests) and a pulled request while the program ends: returning from Main or
  // Environment.Exit.
  static void ExitWithARunningEngine(string modelPath, string handle, string how) {
    var model = new Model(modelPath);
    var engine = new Engine(model);
    engine.Start();
    var seen = new CountdownEvent(2);
    var endless = new RequestOptions().SetPromptText(Prompt).SetOptions(Greedy());
    engine.Submit(endless, token => {
      if (!seen.IsSet) seen.Signal();
      Thread.Sleep(2);  // the worker is in the callback, or about to be, when the exit comes
      return true;
    });
    engine.Submit(endless);
    if (handle == "closed") engine.Dispose();
    seen.Wait();
    if (how == "exit") Environment.Exit(0);
  }

  // A program that ends while an engine's worker runs callbacks exits cleanly and promptly.
  static void TestEngineExit(string modelPath) {
    string mono = Process.GetCurrentProcess().MainModule.FileName;
    string self = Assembly.GetExecutingAssembly().Location;
    foreach (string handle in new[] { "open", "closed" }) {
      foreach (string how in new[] { "return", "exit" }) {
        var start = new ProcessStartInfo(mono, $"--debug \"{self}\" engine-exit \"{modelPath}\" "
                                                   + $"{handle} {how}") {
          UseShellExecute = false, RedirectStandardError = true
        };
        using (Process child = Process.Start(start)) {
          var error = child.StandardError.ReadToEndAsync();
          bool ended = child.WaitForExit((int)EngineWait.TotalMilliseconds);
          if (!ended) {
            child.Kill();
            child.WaitForExit();
          }
          Check(ended && child.ExitCode == 0,
                $"exit with a running engine ({handle} handle, {how}): "
                    + (ended ? child.ExitCode.ToString() : "hung") + " " + error.Result);
        }
      }
    }
  }

  // A model with an engine and two requests (pulled, pushed) run to the end (every tenth by its
  // worker), one continued from a state, one session taken back.
  static void ChurnEngine(string modelPath, int iteration, bool dispose) {
    var model = new Model(modelPath);
    var small = new SessionOptions().SetContextLength(256).SetSeed((ulong)iteration);
    var engineOptions = new EngineOptions().SetMaxRunning(2);
    var engine = new Engine(model, engineOptions);
    var first = new RequestOptions().SetPrompt(new[] { model.Bos, 5 + iteration % 50 })
                    .SetOptions(small).SetMaxTokens(2);
    var second = new RequestOptions().SetPrompt(new[] { model.Bos }).SetOptions(small)
                     .SetMaxTokens(2);
    var pulled = engine.Submit(first);
    var pushed = engine.Submit(second, token => true);
    if (iteration % 10 == 0) {
      engine.Start();
      AwaitEnd(pulled);
      engine.Stop(true);
    }
    StepToEnd(engine);
    Check(Pulled(pulled).Length == 2, "a churned request");
    AwaitEnd(pushed);
    var third = new RequestOptions().SetState(pushed.Save()).SetMaxTokens(1);
    var continued = engine.Submit(third);
    var session = pulled.TakeSession();
    if (dispose) {  // in a different order each time: requests keep their engine and model alive
      var all = new IDisposable[] { model, engine, pulled, pushed, continued, session, small,
                                    engineOptions, first, second, third };
      all[iteration % 6].Dispose();
      foreach (var item in all) item.Dispose();
    }
  }

  static void TestEngineMemory(string modelPath) {
    for (int i = 0; i < Warmup; ++i) ChurnEngine(modelPath, i, true);
    GC.Collect();
    GC.WaitForPendingFinalizers();
    double baseline = RssMb();
    for (int i = 0; i < Loops; ++i) ChurnEngine(modelPath, i, true);
    double disposed = RssMb();
    for (int i = 0; i < LateLoops; ++i) {  // nothing disposed: finalizers release the objects
      ChurnEngine(modelPath, i, false);
      if (i % 10 == 0) GC.Collect();
    }
    GC.Collect();
    GC.WaitForPendingFinalizers();
    double late = RssMb();
    Console.WriteLine($"rss: {baseline:F1} MB after warm-up, {disposed:F1} MB after {Loops} "
                      + $"disposed engine loops, {late:F1} MB after {LateLoops} collected ones");
    Check(disposed - baseline < DisposedBoundMb && late - baseline < LateBoundMb, "memory grows");
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
          TestCancelIterator(model);
          Console.WriteLine("ok TestCancelIterator");
          TestCallbackException(model);
          Console.WriteLine("ok TestCallbackException");
          TestBatch(model);
          Console.WriteLine("ok TestBatch");
          TestScore(model);
          Console.WriteLine("ok TestScore");
          TestScoreTop(model);
          Console.WriteLine("ok TestScoreTop");
          TestKvType(model);
          Console.WriteLine("ok TestKvType");
          TestSamplerSettings(model);
          Console.WriteLine("ok TestSamplerSettings");
          TestTopLogprobs(model);
          Console.WriteLine("ok TestTopLogprobs");
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
          TestPrecision(model, modelPath);
          Console.WriteLine("ok TestPrecision");
        }
        break;
      case "memory":
        TestMemory(modelPath);
        break;
      case "engine":
        using (var model = new Model(modelPath)) {
          TestEngineStreams(model);
          Console.WriteLine("ok TestEngineStreams");
          TestEngineTopLogprobs(model);
          Console.WriteLine("ok TestEngineTopLogprobs");
          TestEngineStepped(model);
          Console.WriteLine("ok TestEngineStepped");
          TestEnginePrefixCache(model);
          Console.WriteLine("ok TestEnginePrefixCache");
          TestEngineCancel(model);
          Console.WriteLine("ok TestEngineCancel");
          TestEngineCallbacks(model);
          Console.WriteLine("ok TestEngineCallbacks");
          TestEngineCompletion(model);
          Console.WriteLine("ok TestEngineCompletion");
          TestEngineErrors(model);
          Console.WriteLine("ok TestEngineErrors");
          TestEngineContinue(model);
          Console.WriteLine("ok TestEngineContinue");
        }
        TestEngineOwnership(modelPath);
        Console.WriteLine("ok TestEngineOwnership");
        TestEngineExit(modelPath);
        Console.WriteLine("ok TestEngineExit");
        break;
      case "engine-exit":
        ExitWithARunningEngine(modelPath, args[2], args[3]);
        break;
      case "engine-memory":
        TestEngineMemory(modelPath);
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
