// Serve -- serve three completions of one prompt at once with a PHOTON engine: one pulled by this
// thread, one by another thread, one pushed to a callback on the engine's own thread.
//
//   java -cp build/bindings/java/photon.jar examples/java/Serve.java [MODEL] [PROMPT] [N]
//
// MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
// "In the beginning", N (tokens per request) to 32.
import com.photon.Engine;
import com.photon.EngineOptions;
import com.photon.EngineStats;
import com.photon.Model;
import com.photon.PhotonException;
import com.photon.Request;
import com.photon.RequestOptions;
import com.photon.SessionOptions;
import com.photon.Token;

public class Serve {
  static RequestOptions ask(String prompt, int n, long seed) {
    try (SessionOptions sampler = new SessionOptions().setTemperature(0.8f).setSeed(seed)) {
      return new RequestOptions().setPromptText(prompt).setOptions(sampler).setMaxTokens(n);
    }
  }

  public static void main(String[] args) throws InterruptedException {
    String path = args.length > 0 ? args[0] : "models/photon-kjv.photon";
    String prompt = args.length > 1 ? args[1] : "In the beginning";
    int n = args.length > 2 ? Integer.parseInt(args[2]) : 32;

    try (Model model = new Model(path);
        EngineOptions options = new EngineOptions().setMaxRunning(4);
        Engine engine = new Engine(model, options);
        RequestOptions first = ask(prompt, n, 1);
        RequestOptions second = ask(prompt, n, 2);
        RequestOptions third = ask(prompt, n, 3)) {
      engine.start(); // its worker thread runs the steps
      StringBuffer pushed = new StringBuffer(); // appended on other threads
      StringBuffer pulled = new StringBuffer();
      try (Request streamed = engine.submit(first); Request other = engine.submit(second);
          Request called = engine.submit(third, token -> {
            pushed.append(token.piece()); // on the engine's thread; returning false would stop
            return true;
          })) {
        Thread puller = new Thread(() -> other.tokens().forEach(t -> pulled.append(t.piece())));
        puller.start();
        System.out.print(prompt);
        for (Token token : streamed.tokens()) {
          System.out.print(token.piece());
          System.out.flush();
        }
        System.out.println();
        puller.join();
        called.await(); // an exception thrown by the callback would be rethrown here
        System.out.println(prompt + pulled);
        System.out.println(prompt + pushed);
      }
      engine.stop(true);
      EngineStats stats = engine.stats();
      System.err.printf("[3 requests, %d tokens, %d steps]%n", stats.getGeneratedTokens(),
          stats.getSteps());
    } catch (PhotonException e) {
      System.err.println("serve: " + e.getMessage());
      System.exit(1);
    }
  }
}
