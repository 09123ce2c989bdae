using System;
using System.Collections.Generic;

namespace Photon {

/// <summary>Ends the engines' work when the process exits. Mono waits at exit for the threads
/// native code attached to it, an engine's worker among them once it has run a callback, and its
/// shutdown stops threads while finalizers still wait for their callbacks: on ProcessExit every
/// open request is disposed (cancelled) and every started engine stopped, so that the workers end
/// first.</summary>
internal static class EngineShutdown {
  static readonly object gate = new object();
  static readonly List<WeakReference<Request>> requests = new List<WeakReference<Request>>();
  static readonly List<WeakReference<Engine>> engines = new List<WeakReference<Engine>>();
  static int pruneAt = 64;

  static EngineShutdown() {
    AppDomain.CurrentDomain.ProcessExit += (sender, args) => EndAll();
  }

  internal static Request Track(Request request) {
    Add(requests, request);
    return request;
  }

  internal static void Track(Engine engine) {
    Add(engines, engine);
  }

  static void Add<T>(List<WeakReference<T>> list, T item) where T : class {
    lock (gate) {
      list.Add(new WeakReference<T>(item));
      if (list.Count >= pruneAt) {  // the collected ones go
        list.RemoveAll(reference => !reference.TryGetTarget(out _));
        pruneAt = Math.Max(64, 2 * list.Count);
      }
    }
  }

  static List<T> Alive<T>(List<WeakReference<T>> list) where T : class {
    var alive = new List<T>();
    lock (gate) {
      foreach (var reference in list) {
        if (reference.TryGetTarget(out T item)) alive.Add(item);
      }
    }
    return alive;
  }

  static void EndAll() {
    foreach (Request request in Alive(requests)) request.Dispose();
    foreach (Engine engine in Alive(engines)) {
      try {
        engine.Stop(false);
      } catch (PhotonException) {
        // stopped already, or disposed (then its requests, disposed above, held it)
      } catch (ObjectDisposedException) {
      }
    }
  }
}

}
