/* photon_csharp_engine.i -- the serving engine in namespace Photon, included by
 * photon_csharp.i: Engine, EngineOptions, Request, RequestOptions, RequestState, RequestStats,
 * EngineStats (and BusyException, thrown for a full waiting queue). */

/* Engine and Request: Dispose() calls their own close(), which may overlap calls on other threads
 * (disposing a request while another thread waits on it is safe); the finalizer deletes the native
 * object. */
%typemap(csdispose) photon_binding::Engine %{
  ~Engine() {
    Dispose(false);
  }

  /// <summary>Releases this handle (idempotent); the native engine and its worker go once its
  /// requests are disposed too. Stop first to drain or cancel them.</summary>
  public void Dispose() {
    Close();
  }
%}
%typemap(csdispose) photon_binding::Request %{
  ~Request() {
    Dispose(false);
  }

  /// <summary>Cancels the request if it has not finished and releases it (idempotent); calls
  /// waiting on it in other threads return first. A request disposed or collected before it
  /// finished is cancelled.</summary>
  public void Dispose() {
    Close();
  }
%}
%csmethodmodifiers photon_binding::Engine::close "internal";
%csmethodmodifiers photon_binding::Request::close "internal";
%ignore photon_binding::Engine::is_closed;
%ignore photon_binding::Request::is_closed;

/* Statistics: snapshots with PascalCase read-only properties (GeneratedTokens, ...). */
%rename("%(camelcase)s", %$isvariable) "";

/* EngineOptions and RequestOptions setters chain on the object itself (as SessionOptions'). */
%typemap(csout, excode=SWIGEXCODE)
    photon_binding::EngineOptions &, photon_binding::RequestOptions & {
    $imcall;$excode
    return this;
  }

%rename(Error) photon_binding::StopReason::ERROR;
%rename(Waiting) photon_binding::RequestState::WAITING;
%rename(Running) photon_binding::RequestState::RUNNING;
%rename(Paused) photon_binding::RequestState::PAUSED;
%rename(Finished) photon_binding::RequestState::FINISHED;

/* The pull primitives, the listener form of Submit and the error parts are reached through the C#
 * API below. */
%rename(WaitFor) photon_binding::Request::wait;
%rename(StartWorker) photon_binding::Engine::start;
%rename(SubmitPulled) photon_binding::Engine::submit(const RequestOptions &);
%csmethodmodifiers photon_binding::Engine::start "internal";
%csmethodmodifiers photon_binding::Engine::submit(const RequestOptions &) "internal";
%rename(SetSessionHandle) photon_binding::RequestOptions::set_session;
PHOTON_CSHARP_GETTER(photon_binding::Request, state, State)
PHOTON_CSHARP_GETTER(photon_binding::Request, stop_reason, StopReason)
%csmethodmodifiers photon_binding::Request::wait "internal";
%csmethodmodifiers photon_binding::Request::when_finished "internal";
%csmethodmodifiers photon_binding::Request::next_token "internal";
%csmethodmodifiers photon_binding::Request::last_piece "internal";
%csmethodmodifiers photon_binding::Request::last_logprob "internal";
%csmethodmodifiers photon_binding::Request::last_top_tokens "internal";
%csmethodmodifiers photon_binding::Request::last_top_logprobs "internal";
%csmethodmodifiers photon_binding::Request::error_status "internal";
%csmethodmodifiers photon_binding::Request::error_status_name "internal";
%csmethodmodifiers photon_binding::Request::error_message "internal";
%csmethodmodifiers photon_binding::Engine::submit(const RequestOptions &, TokenListener *)
    "internal";
%csmethodmodifiers photon_binding::RequestOptions::set_session "internal";

%typemap(cscode) photon_binding::RequestOptions %{
  // The session to continue stays reachable until the submit that takes it over.
  internal Session session;

  /// <summary>Continues a live session of the engine's model: the submit takes it over (the
  /// Session is disposed then; Request.TakeSession gives it back).</summary>
  public RequestOptions SetSession(Session session) {
    if (session == null) throw new global::System.ArgumentNullException(nameof(session));
    SetSessionHandle(session);
    this.session = session;
    return this;
  }
%}

%typemap(cscode) photon_binding::Engine %{
  /// <summary>Starts the engine's worker thread, which runs steps while there is work.</summary>
  public void Start() {
    StartWorker();
    EngineShutdown.Track(this);
  }

  /// <summary>Submits a request whose tokens are pulled with Request.Tokens. Throws
  /// BusyException when MaxWaiting requests wait.</summary>
  public Request Submit(RequestOptions options) => EngineShutdown.Track(SubmitPulled(options));

  /// <summary>Submits a request whose tokens go to onToken, on the thread that runs the engine's
  /// steps; returning false stops this request only. An exception onToken throws stops the request
  /// and is rethrown by Request.Wait. Throws BusyException when MaxWaiting requests
  /// wait.</summary>
  public Request Submit(RequestOptions options, global::System.Func<Token, bool> onToken) {
    if (onToken == null) throw new global::System.ArgumentNullException(nameof(onToken));
    var bridge = new Request.Bridge(onToken);
    Request request = Submit(options, (TokenListener)bridge);
    request.bridge = bridge;
    return EngineShutdown.Track(request);
  }
%}

%typemap(csimports) photon_binding::Request %{
using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
using System.Threading.Tasks;
%}
%typemap(cscode) photon_binding::Request %{
  public RequestState State => GetState();
  public StopReason StopReason => GetStopReason();

  // The callback of a request submitted with one: it lives as long as this object, and the
  // native request (which owns its native part) calls it no more once disposed or collected.
  internal Bridge bridge;

  internal sealed class Bridge : TokenListener {
    readonly Func<Token, bool> onToken;
    internal volatile ExceptionDispatchInfo Error;

    internal Bridge(Func<Token, bool> onToken) {
      this.onToken = onToken;
      swigCMemOwn = false;  // the native request deletes the native part
    }

    public override bool OnToken(int token, string piece, float logprob) {
      try {
        return onToken(
            new Token(token, piece, logprob, TopLogprob.Of(TopTokens(), TopLogprobs)));
      } catch (Exception e) {  // it cannot cross the engine's thread: kept for Wait
        if (Error == null) Error = ExceptionDispatchInfo.Capture(e);
        return false;
      }
    }
  }

  // Completes Completion's task; the request owns its native part, this object keeps it alive.
  internal sealed class FinishBridge : FinishListener {
    readonly TaskCompletionSource<StopReason> source;
    readonly Bridge tokens;

    internal FinishBridge(TaskCompletionSource<StopReason> source, Bridge tokens) {
      this.source = source;
      this.tokens = tokens;
      swigCMemOwn = false;
    }

    public override void OnFinish(StopReason reason) {
      ExceptionDispatchInfo error = tokens?.Error;
      if (error == null) {
        source.TrySetResult(reason);
      } else {
        source.TrySetException(error.SourceException);
      }
    }
  }

  readonly object completionLock = new object();
  Task<StopReason> completion;
  FinishBridge finishBridge;

  /// <summary>The request's end, to await without a thread waiting for it: a task that completes
  /// with the stop reason once the request has finished (Error: the Error property says which),
  /// or faults with the exception its callback threw. Its continuations run on the thread pool,
  /// never on the engine's thread. A request disposed before it finished completes it with
  /// Cancelled; asked of a disposed request, it faults with the PhotonException of the disposed
  /// request. The same task each time.</summary>
  public Task<StopReason> Completion {
    get {
      lock (completionLock) {
        if (completion == null) {
          var source = new TaskCompletionSource<StopReason>(
              TaskCreationOptions.RunContinuationsAsynchronously);
          completion = source.Task;
          finishBridge = new FinishBridge(source, bridge);
          try {
            WhenFinished(finishBridge);
          } catch (PhotonException e) {
            source.TrySetException(e);
          }
        }
        return completion;
      }
    }
  }

  /// <summary>Waits until the request has finished. An exception its callback threw is rethrown
  /// here then.</summary>
  public void Wait() {
    WaitFor(-1);
    bridge?.Error?.Throw();
  }

  /// <summary>Waits at most timeout for the request to finish; false when it has not by then. An
  /// exception its callback threw is rethrown once it has.</summary>
  public bool Wait(TimeSpan timeout) {
    double ms = Math.Ceiling(Math.Max(0, timeout.TotalMilliseconds));
    if (!WaitFor((int)Math.Min(ms, int.MaxValue))) return false;
    bridge?.Error?.Throw();
    return true;
  }

  /// <summary>The error that ended the request (stop reason Error), or null.</summary>
  public PhotonException Error {
    get {
      int status = ErrorStatus();
      return status == 0 ? null : new PhotonException(status, ErrorStatusName(), ErrorMessage());
    }
  }

  /// <summary>The request's tokens (a request submitted without a callback), each waited for as
  /// the enumeration advances; it ends once the request has finished and every token was taken,
  /// and throws the request's PhotonException if it ended by an error. One thread at a
  /// time.</summary>
  public IEnumerable<Token> Tokens() {
    for (;;) {
      int id = NextToken(-1);
      if (id < 0) yield break;
      yield return new Token(id, LastPiece(), LastLogprob(),
                             TopLogprob.Of(LastTopTokens(), LastTopLogprobs));
    }
  }
%}
