/* photon_java_engine.i -- the serving engine in package com.photon, included by photon_java.i:
 * Engine, EngineOptions, Request, RequestOptions, RequestState, RequestStats, EngineStats (and
 * BusyException, thrown for a full waiting queue). */

/* Engine and Request are AutoCloseable through their own close(), which may overlap calls on other
 * threads (closing a request while another thread waits on it is safe); the finalizer deletes the
 * native object. */
%define PHOTON_JAVA_SHARED_CLOSE(TYPE)
%typemap(javainterfaces) TYPE "AutoCloseable"
%typemap(javadestruct, methodname="delete", methodmodifiers="private synchronized") TYPE {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        $jnicall;
      }
      swigCPtr = 0;
    }
  }
%typemap(javafinalize) TYPE %{
  @SuppressWarnings("deprecation")
  protected void finalize() {
    delete();
  }
%}
%enddef
PHOTON_JAVA_SHARED_CLOSE(photon_binding::Engine)
PHOTON_JAVA_SHARED_CLOSE(photon_binding::Request)
%ignore photon_binding::Engine::is_closed;
%ignore photon_binding::Request::is_closed;
%javamethodmodifiers photon_binding::Engine::close "
  /**
   * Releases this handle (idempotent); the native engine and its worker go once its requests are
   * closed too. stop() first to drain or cancel them.
   */
  public";
%javamethodmodifiers photon_binding::Request::close "
  /**
   * Cancels the request if it has not finished and releases it (idempotent); calls waiting on it
   * in other threads return first. A request closed or collected before it finished is cancelled.
   */
  public";

/* Statistics: snapshots with getters (getGeneratedTokens(), ...); the finalizer frees them. */
%rename("%(lowercamelcase)s", %$isvariable) "";
%typemap(javaclassmodifiers) photon_binding::RequestStats "public final class"
%typemap(javaclassmodifiers) photon_binding::EngineStats "public final class"
%typemap(javadestruct, methodname="delete", methodmodifiers="private synchronized")
    photon_binding::RequestStats, photon_binding::EngineStats {
    if (swigCPtr != 0) {
      if (swigCMemOwn) {
        swigCMemOwn = false;
        $jnicall;
      }
      swigCPtr = 0;
    }
  }

/* EngineOptions and RequestOptions setters chain on the object itself (as SessionOptions'). */
%typemap(javaout) photon_binding::EngineOptions &, photon_binding::RequestOptions & {
    $jnicall;
    return this;
  }

/* The pull primitives, the listener form of submit and the error parts are reached through the
 * Java API below. */
%rename(waitFor) photon_binding::Request::wait;
%rename(submitWith) photon_binding::Engine::submit(const RequestOptions &, TokenListener *);
%rename(setSessionHandle) photon_binding::RequestOptions::set_session;
%javamethodmodifiers photon_binding::Request::wait "";
%javamethodmodifiers photon_binding::Request::when_finished "";
%javamethodmodifiers photon_binding::Request::next_token "";
%javamethodmodifiers photon_binding::Request::last_piece "";
%javamethodmodifiers photon_binding::Request::last_logprob "";
%javamethodmodifiers photon_binding::Request::last_top_tokens "";
%javamethodmodifiers photon_binding::Request::last_top_logprobs "";
%javamethodmodifiers photon_binding::Request::error_status "";
%javamethodmodifiers photon_binding::Request::error_status_name "";
%javamethodmodifiers photon_binding::Request::error_message "";
%javamethodmodifiers photon_binding::Engine::submit(const RequestOptions &, TokenListener *) "";
%javamethodmodifiers photon_binding::RequestOptions::set_session "";

%typemap(javacode) photon_binding::RequestOptions %{
  // The session to continue stays reachable until the submit that takes it over.
  private Session session;

  /**
   * Continues a live session of the engine's model: the submit takes it over (the Session is
   * closed then; Request.takeSession() gives it back).
   */
  public RequestOptions setSession(Session session) {
    if (session == null) throw new NullPointerException("session");
    setSessionHandle(session);
    this.session = session;
    return this;
  }
%}

%typemap(javacode) photon_binding::Engine %{
  /**
   * Submits a request whose tokens go to callback, on the thread that runs the engine's steps;
   * returning false stops this request only. An exception the callback throws stops the request
   * and is rethrown by Request.await(). Throws BusyException when maxWaiting requests wait.
   */
  public Request submit(RequestOptions options, TokenCallback callback) {
    if (callback == null) throw new NullPointerException("callback");
    Request.Bridge bridge = new Request.Bridge(callback);
    bridge.swigReleaseOwnership();  // the request owns it from here, also if the submit fails
    Request request = submitWith(options, bridge);
    request.bridge = bridge;
    return request;
  }
%}

%typemap(javaimports) photon_binding::Request %{
import java.time.Duration;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.concurrent.CompletableFuture;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
%}
%typemap(javacode) photon_binding::Request %{
  // A native wait lasts at most this long between checks for an interrupt.
  private static final int WAIT_SLICE_MS = 100;

  // The callback of a request submitted with one, whose exception await() rethrows.
  Bridge bridge;
  // completion()'s future, made at its first call.
  private CompletableFuture<StopReason> completion;

  static final class Bridge extends TokenListener {
    private final TokenCallback callback;
    private volatile Throwable error;

    Bridge(TokenCallback callback) {
      this.callback = callback;
    }

    @Override
    public boolean onToken(int token, String piece, float logprob) {
      try {
        return callback.onToken(new Token(
            token, piece, logprob, TopLogprob.listOf(topTokens(), this::topLogprobs)));
      } catch (RuntimeException | Error e) {  // it cannot cross the engine's thread: kept
        if (error == null) error = e;
        return false;
      }
    }
  }

  // Completes completion()'s future.
  static final class FinishBridge extends FinishListener {
    private final CompletableFuture<StopReason> future;
    private final Bridge tokens;

    FinishBridge(CompletableFuture<StopReason> future, Bridge tokens) {
      this.future = future;
      this.tokens = tokens;
    }

    @Override
    public void onFinish(StopReason reason) {
      Throwable error = tokens == null ? null : tokens.error;
      if (error == null) {
        future.complete(reason);
      } else {
        future.completeExceptionally(error);
      }
    }
  }

  /**
   * The request's end, without a thread waiting for it: a future completed with the stop reason
   * once the request has finished (ERROR: error() says which), or exceptionally with the
   * exception its callback threw. It completes on the thread that runs the engine's steps, so
   * stages that take long belong on an executor (thenApplyAsync, ...); a request closed before it
   * finished completes it with CANCELLED; asked of a closed request, it is exceptional with the
   * PhotonException of the closed request. Every call returns the same future.
   */
  public synchronized CompletableFuture<StopReason> completion() {
    if (completion == null) {
      completion = new CompletableFuture<>();
      FinishBridge finish = new FinishBridge(completion, bridge);
      finish.swigReleaseOwnership();  // the request owns it from here, also if this fails
      try {
        whenFinished(finish);
      } catch (PhotonException e) {
        completion.completeExceptionally(e);
      }
    }
    return completion;
  }

  /**
   * Waits until the request has finished. An exception its callback threw is rethrown here then.
   */
  public void await() throws InterruptedException {
    while (!waitSlice(WAIT_SLICE_MS)) {
    }
    rethrowCallbackError();
  }

  /**
   * Waits at most timeout for the request to finish; false when it has not by then. An exception
   * its callback threw is rethrown once it has.
   */
  public boolean await(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    for (;;) {
      long left = Math.max(0, (deadline - System.nanoTime() + 999_999) / 1_000_000);
      if (waitSlice((int) Math.min(left, WAIT_SLICE_MS))) break;
      if (left <= WAIT_SLICE_MS) return false;
    }
    rethrowCallbackError();
    return true;
  }

  private boolean waitSlice(int timeoutMs) throws InterruptedException {
    if (Thread.interrupted()) throw new InterruptedException();
    return waitFor(timeoutMs);
  }

  private void rethrowCallbackError() {
    Throwable error = bridge == null ? null : bridge.error;
    if (error instanceof RuntimeException) throw (RuntimeException) error;
    if (error instanceof Error) throw (Error) error;
  }

  /** The error that ended the request (stop reason ERROR), or null. */
  public PhotonException error() {
    int status = errorStatus();
    return status == 0 ? null : new PhotonException(status, errorStatusName(), errorMessage());
  }

  /**
   * The request's tokens (a request submitted without a callback), each waited for as the
   * iteration advances; the iteration ends once the request has finished and every token was
   * taken, and throws the request's PhotonException if it ended by an error. One thread at a time.
   */
  public Iterable<Token> tokens() {
    return () -> new Iterator<Token>() {
      private Token next;
      private boolean done;

      @Override
      public boolean hasNext() {
        if (next == null && !done) {
          int id = nextToken(-1);
          if (id < 0) {
            done = true;
          } else {
            next = new Token(id, lastPiece(), lastLogprob(),
                TopLogprob.listOf(lastTopTokens(), Request.this::lastTopLogprobs));
          }
        }
        return next != null;
      }

      @Override
      public Token next() {
        if (!hasNext()) throw new NoSuchElementException();
        Token token = next;
        next = null;
        return token;
      }
    };
  }

  /** As tokens(), as a sequential Stream. */
  public Stream<Token> stream() {
    return StreamSupport.stream(tokens().spliterator(), false);
  }
%}
