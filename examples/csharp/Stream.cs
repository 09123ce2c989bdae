// Stream -- load a PHOTON model, stream a completion through a callback and through an iterator,
// save the session, restore it and continue.
//
//   mono build/bindings/csharp/Stream.exe [MODEL] [PROMPT] [N]
//
// MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
// "In the beginning", N (tokens per step) to 16.
using System;
using Photon;

static class Stream {
  static int Main(string[] args) {
    string path = args.Length > 0 ? args[0] : "models/photon-kjv.photon";
    string prompt = args.Length > 1 ? args[1] : "In the beginning";
    int n = args.Length > 2 ? int.Parse(args[2]) : 16;

    try {
      using (var model = new Model(path))
      using (var options = new SessionOptions().SetTemperature(0.8f).SetSeed(42))
      using (var session = new Session(model, options)) {
        session.Prefill(prompt);
        Console.Write(prompt);

        // 1. A callback receives each token as it is generated; returning false would stop.
        session.Generate(n, token => {
          Console.Write(token.Piece);
          return true;
        });

        // 2. An iterator pulls one token at a time.
        foreach (Token token in session.Tokens(n)) {
          Console.Write(token.Piece);
        }

        // 3. Save the session, restore the state into a new session and continue there.
        byte[] state = session.Save();
        using (var restored = Session.Restore(model, state)) {
          foreach (Token token in restored.Tokens(n)) {
            Console.Write(token.Piece);
          }
          Console.WriteLine();
          Console.Error.WriteLine("[{0} tokens, {1}, state {2} bytes]", restored.Position,
                                  restored.Mode.ToString().ToLowerInvariant(), state.Length);
        }
      }
      return 0;
    } catch (PhotonException e) {
      Console.Error.WriteLine("stream: " + e.Message);
      return 1;
    }
  }
}
