// Stream -- load a PHOTON model, stream a completion through a callback and through an iterator,
// save the session, restore it and continue.
//
//   java -cp build/bindings/java/photon.jar examples/java/Stream.java [MODEL] [PROMPT] [N]
//
// MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
// "In the beginning", N (tokens per step) to 16.
import com.photon.Model;
import com.photon.PhotonException;
import com.photon.Session;
import com.photon.SessionOptions;
import com.photon.Token;

public class Stream {
  public static void main(String[] args) {
    String path = args.length > 0 ? args[0] : "models/photon-kjv.photon";
    String prompt = args.length > 1 ? args[1] : "In the beginning";
    int n = args.length > 2 ? Integer.parseInt(args[2]) : 16;

    try (Model model = new Model(path);
        SessionOptions options = new SessionOptions().setTemperature(0.8f).setSeed(42);
        Session session = new Session(model, options)) {
      session.prefill(prompt);
      System.out.print(prompt);

      // 1. A callback receives each token as it is generated; returning false would stop.
      session.generate(n, token -> {
        System.out.print(token.piece());
        System.out.flush();
        return true;
      });

      // 2. An iterator pulls one token at a time.
      for (Token token : session.tokens(n)) {
        System.out.print(token.piece());
        System.out.flush();
      }

      // 3. Save the session, restore the state into a new session and continue there.
      byte[] state = session.save();
      try (Session restored = Session.restore(model, state)) {
        restored.stream(n).forEach(token -> System.out.print(token.piece()));
        System.out.println();
        System.err.printf("[%d tokens, %s, state %d bytes]%n", restored.position(),
            restored.mode().toString().toLowerCase(), state.length);
      }
    } catch (PhotonException e) {
      System.err.println("stream: " + e.getMessage());
      System.exit(1);
    }
  }
}
