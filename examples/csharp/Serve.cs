// Serve -- serve three completions of one prompt at once with a PHOTON engine: one pulled by this
// thread, one by another thread, one pushed to a callback on the engine's own thread.
//
//   mono build/bindings/csharp/Serve.exe [MODEL] [PROMPT] [N]
//
// MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
// "In the beginning", N (tokens per request) to 32.
using System;
using System.Text;
using System.Threading;
using Photon;

static class Serve {
  static RequestOptions Ask(string prompt, int n, ulong seed) {
    using (var sampler = new SessionOptions().SetTemperature(0.8f).SetSeed(seed)) {
      return new RequestOptions().SetPromptText(prompt).SetOptions(sampler).SetMaxTokens(n);
    }
  }

  static int Main(string[] args) {
    string path = args.Length > 0 ? args[0] : "models/photon-kjv.photon";
    string prompt = args.Length > 1 ? args[1] : "In the beginning";
    int n = args.Length > 2 ? int.Parse(args[2]) : 32;

    try {
      using (var model = new Model(path))
      using (var options = new EngineOptions().SetMaxRunning(4))
      using (var engine = new Engine(model, options))
      using (var first = Ask(prompt, n, 1))
      using (var second = Ask(prompt, n, 2))
      using (var third = Ask(prompt, n, 3)) {
        engine.Start();  // its worker thread runs the steps
        var pushed = new StringBuilder();
        var pulled = new StringBuilder();
        using (var streamed = engine.Submit(first))
        using (var other = engine.Submit(second))
        using (var called = engine.Submit(third, token => {
                 pushed.Append(token.Piece);  // on the engine's thread; false would stop
                 return true;
               })) {
          var puller = new Thread(() => {
            foreach (Token token in other.Tokens()) pulled.Append(token.Piece);
          });
          puller.Start();
          Console.Write(prompt);
          foreach (Token token in streamed.Tokens()) {
            Console.Write(token.Piece);
          }
          Console.WriteLine();
          puller.Join();
          called.Wait();  // an exception thrown by the callback would be rethrown here
          Console.WriteLine(prompt + pulled);
          Console.WriteLine(prompt + pushed);
        }
        engine.Stop(true);
        EngineStats stats = engine.Stats();
        Console.Error.WriteLine("[3 requests, {0} tokens, {1} steps]", stats.GeneratedTokens,
                                stats.Steps);
      }
      return 0;
    } catch (PhotonException e) {
      Console.Error.WriteLine("serve: " + e.Message);
      return 1;
    }
  }
}
