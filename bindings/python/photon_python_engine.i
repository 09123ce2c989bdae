/* photon_python_engine.i -- the serving engine in package photon, included by photon_python.i:
 * Engine, Request, RequestState, RequestStats, EngineStats and BusyError. The options builders of
 * the C++ layer stay inside: Engine() and Engine.submit() take keyword arguments instead. */

%rename(_EngineOptions) photon_binding::EngineOptions;
%rename(_RequestOptions) photon_binding::RequestOptions;
%rename(_RequestStats) photon_binding::RequestStats;
%rename(_EngineStats) photon_binding::EngineStats;
%rename(_RequestState) photon_binding::RequestState;
%rename(_submit_pulled) photon_binding::Engine::submit(const RequestOptions &);
%rename(_submit_with) photon_binding::Engine::submit(const RequestOptions &, TokenListener *);
PHOTON_PYTHON_GETTER(photon_binding::Engine, is_closed)
PHOTON_PYTHON_GETTER(photon_binding::Engine, stats)
PHOTON_PYTHON_GETTER(photon_binding::Request, is_closed)
PHOTON_PYTHON_GETTER(photon_binding::Request, state)
PHOTON_PYTHON_GETTER(photon_binding::Request, stop_reason)
PHOTON_PYTHON_GETTER(photon_binding::Request, error_status)
PHOTON_PYTHON_GETTER(photon_binding::Request, error_status_name)
PHOTON_PYTHON_GETTER(photon_binding::Request, error_message)
PHOTON_PYTHON_GETTER(photon_binding::Request, stats)
PHOTON_PYTHON_GETTER(photon_binding::Request, wait)
PHOTON_PYTHON_GETTER(photon_binding::Request, next_token)
PHOTON_PYTHON_GETTER(photon_binding::Request, last_piece)
PHOTON_PYTHON_GETTER(photon_binding::Request, last_logprob)
PHOTON_PYTHON_GETTER(photon_binding::Request, last_top_tokens)
PHOTON_PYTHON_GETTER(photon_binding::Request, last_top_logprobs)
PHOTON_PYTHON_GETTER(photon_binding::Request, when_finished)
PHOTON_PYTHON_GETTER(photon_binding::Engine, start)
PHOTON_PYTHON_GETTER(photon_binding::Engine, stop)

/* Calls that wait for the engine's worker or for a token callback (which takes the interpreter lock
 * on the worker's thread) release the lock, destructors included. */
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Engine::Engine)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Engine::~Engine)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Engine::close)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Engine::stop)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Engine::step)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Engine::submit)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Request::~Request)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Request::close)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Request::wait)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Request::next_token)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Request::save)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Request::take_session)

%typemap(out) photon_binding::RequestState %{
  $result = photon_python_enum("RequestState", static_cast<int>($1));
%}

%ignore photon_binding::Engine::Engine(const Model &);
%feature("shadow") photon_binding::Engine::Engine(const Model &, const EngineOptions &) %{
    def __init__(self, model, *, max_running=None, max_waiting=None, memory_budget=None,
                 step_tokens=None, prefix_cache=None):
        """A serving engine over model. max_running: the most requests that run at once (64);
        max_waiting: the most that wait for admission (1024; submit() beyond raises BusyError);
        memory_budget: the most bytes the running requests' sessions hold (0: no limit);
        step_tokens: the most prompt tokens a step consumes (512); prefix_cache: the most bytes
        of saved prompt sessions (0: none), from which a request whose prompt begins with a
        prompt read before starts, those tokens counted in RequestStats.reused_tokens and its
        results unchanged. None keeps the default."""
        _require(model, Model, "model")
        options = _EngineOptions()
        for value, setter in ((max_running, options.set_max_running),
                              (max_waiting, options.set_max_waiting),
                              (memory_budget, options.set_memory_budget),
                              (step_tokens, options.set_step_tokens),
                              (prefix_cache, options.set_prefix_cache)):
            if value is not None:
                setter(value)
        _native.Engine_swiginit(self, _native.new_Engine(model, options))
%}

%pythoncode %{
import atexit as _atexit
import concurrent.futures as _futures
import math as _math
import threading as _threading
import weakref as _weakref

BusyError = _native.BusyError

# A request's pull waits in slices, so that signals (Ctrl-C) are handled while it waits.
_WAIT_SLICE_MS = 100


class RequestState(_enum.IntEnum):
    """Where a request stands (photon_request_state)."""
    WAITING = 0
    RUNNING = 1
    PAUSED = 2
    FINISHED = 3


class RequestStats(_NamedTuple):
    """A request's statistics at one moment; times not reached yet are NaN. reused_tokens: those
    of a continued state or session, or of a prompt restored from the prefix cache."""
    prompt_tokens: int
    reused_tokens: int
    generated_tokens: int
    pauses: int
    queue_seconds: float
    first_token_seconds: float
    decode_seconds: float
    paused_seconds: float


class EngineStats(_NamedTuple):
    """An engine's statistics at one moment: requests now, counts in all, memory, rate, and the
    prefix cache: requests restored from it in all (prefix_hits), bytes it holds now
    (prefix_bytes)."""
    waiting: int
    running: int
    paused: int
    submitted: int
    refused: int
    finished: int
    failed: int
    cancelled: int
    prompt_tokens: int
    reused_tokens: int
    generated_tokens: int
    pauses: int
    steps: int
    memory_in_use: int
    memory_peak: int
    tokens_per_second: float
    prefix_hits: int
    prefix_bytes: int


def _snapshot(kind, native):
    return kind(*(getattr(native, field) for field in kind._fields))


def _timeout_ms(timeout):
    if timeout is None:
        return -1
    return min(max(0, _math.ceil(float(timeout) * 1000)), 2**31 - 1)


# Guards the making of each Request's future.
_future_lock = _threading.Lock()

# When the interpreter exits, before it can no longer run token callbacks, the requests that have
# one are closed (cancelled) and the engines whose worker was started are stopped.
_started_engines = _weakref.WeakSet()
_callback_requests = _weakref.WeakSet()


@_atexit.register
def _stop_engines():
    for request in list(_callback_requests):
        request.close()
    for engine in list(_started_engines):
        if not engine.closed:
            try:
                engine.stop(drain=False)
            except PhotonError:
                pass  # it was stopped already
%}

%extend photon_binding::Engine {
%pythoncode %{
    __enter__ = _ClosingMixin.__enter__
    __exit__ = _ClosingMixin.__exit__
    closed = property(_is_closed, doc="True once close() has released the engine.")

    def start(self):
        """Starts the engine's worker thread, which runs steps while there is work."""
        self._start()
        _started_engines.add(self)

    def stop(self, drain=True):
        """Stops the worker and returns once it has ended: drain finishes every request submitted
        so far; drain=False cancels the unfinished ones."""
        self._stop(bool(drain))

    def submit(self, prompt=None, *, options=None, max_tokens=None, state=None, session=None,
               on_token=None):
        """Submits a request and returns its Request at once (keep it: a request closed or
        collected before it finished is cancelled). BusyError when max_waiting requests wait.

        prompt: text (str, or bytes taken as UTF-8; BOS first unless a state or session is
        continued) or a sequence of int token ids; state: bytes of Session.save() or
        Request.save() to continue; session: a Session to continue (the request takes it over:
        the Session is closed, Request.take_session() gives it back); options: SessionOptions
        (the sampler of a continued state or session); max_tokens: the most tokens to generate
        (None: up to the context length).

        on_token(token) receives each Token on the thread that runs the steps; returning False
        stops this request only. An exception it raises stops the request and is raised by
        Request.wait(). Without on_token, pull the tokens with Request.tokens()."""
        request_options = _RequestOptions()
        if isinstance(prompt, (str, bytes, bytearray, memoryview)):
            request_options.set_prompt_text(prompt)
        elif hasattr(prompt, "__len__") and hasattr(prompt, "__getitem__"):
            request_options.set_prompt(prompt)
        elif prompt is not None:
            raise TypeError("photon: prompt must be str, bytes or a sequence of int token ids, "
                            f"not {type(prompt).__name__}")
        if state is not None:
            request_options.set_state(state)
        if session is not None:
            _require(session, Session, "session")
            request_options.set_session(session)
        if options is not None:
            _require(options, SessionOptions, "options")
            request_options.set_options(options)
        if max_tokens is not None:
            request_options.set_max_tokens(max_tokens)
        if on_token is None:
            return self._submit_pulled(request_options)
        _require_callable(on_token)
        listener = _RequestListener(on_token)
        listener.__disown__()  # the request owns it from here
        request = self._submit_with(request_options, listener)
        request._listener = listener
        _callback_requests.add(request)
        return request

    def stats(self):
        """The engine's EngineStats now."""
        return _snapshot(EngineStats, self._stats())
%}
}

%extend photon_binding::Request {
%pythoncode %{
    __enter__ = _ClosingMixin.__enter__
    __exit__ = _ClosingMixin.__exit__
    closed = property(_is_closed, doc="True once close() has released the request.")
    state = property(_state, doc="The RequestState now.")
    stop_reason = property(_stop_reason, doc="Why the request ended; NONE while it has not.")

    @property
    def error(self):
        """The PhotonError that ended the request (stop reason ERROR), or None."""
        status = self._error_status()
        if status == 0:
            return None
        error = PhotonError(self._error_message())
        error.status, error.status_name = status, self._error_status_name()
        return error

    def wait(self, timeout=None):
        """Waits until the request has finished, at most timeout seconds (None: no limit), with
        the interpreter lock released; returns whether it has. Once it has, an exception its
        on_token callback raised is raised here."""
        if timeout is None:
            while not self._wait(_WAIT_SLICE_MS):
                pass
        elif not self._wait(_timeout_ms(timeout)):
            return False
        listener = getattr(self, "_listener", None)
        if listener is not None and listener.error is not None:
            raise listener.error
        return True

    def future(self):
        """The request's end as a concurrent.futures.Future, without a thread waiting for it:
        its result is the StopReason once the request has finished (ERROR: see error), its
        exception the one on_token raised. It resolves on the thread that runs the engine's
        steps, where its done callbacks then run (they may close the request, not wait for it);
        from asyncio, `await asyncio.wrap_future(request.future())`. A request closed before it
        finished resolves it with CANCELLED; asked of a closed request, its exception is the
        PhotonError of the closed request. The same future each call."""
        with _future_lock:
            future = getattr(self, "_future", None)
            if future is None:
                future = self._future = _futures.Future()
                future.set_running_or_notify_cancel()  # request.cancel() ends it, not future's
                listener = _FutureListener(future, getattr(self, "_listener", None))
                listener.__disown__()  # the request owns it from here, also if this fails
                try:
                    self._when_finished(listener)
                except PhotonError as error:
                    future.set_exception(error)
            return future

    def tokens(self):
        """An iterator over the request's tokens (a request submitted without on_token): each
        step waits, with the interpreter lock released, until the engine delivers the next one,
        so it may run on any thread, and from asyncio through an executor:
        `await loop.run_in_executor(None, next, iterator, None)`. It ends once the request has
        finished and every token was taken, and raises the request's PhotonError if it ended by
        an error."""
        while True:
            try:
                token_id = self._next_token(_WAIT_SLICE_MS)
            except PhotonError as error:
                if error.status_name == "PHOTON_ERR_TIMEOUT":
                    continue
                raise
            if token_id < 0:
                return
            yield Token(token_id, self._last_piece(), self._last_logprob(),
                        _top_logprobs(self._last_top_tokens, self._last_top_logprobs))

    def stats(self):
        """The request's RequestStats now."""
        return _snapshot(RequestStats, self._stats())
%}
}
