"""PHOTON language models from Python.

    import photon

    with photon.Model("model.photon") as model, photon.Session(model) as session:
        session.prefill("In the beginning")
        session.generate(32, lambda token: print(token.piece, end=""))  # a callback ...
        for token in session.tokens(32):                                # ... or an iterator
            print(token.piece, end="")
        state = session.save()                     # bytes; photon.Session.restore(model, state)

Failed calls raise photon.PhotonError (a RuntimeError) with .status and .status_name. Loading,
scoring, prefill, generation, save and restore release the interpreter lock, so sessions on other
threads run meanwhile; Session.cancel() may be called from any thread.

An Engine serves many requests at once (continuous batching), from any thread:

    with photon.Engine(model, max_running=8) as engine:
        engine.start()                                    # its worker thread runs the steps
        request = engine.submit("In the beginning", max_tokens=32)
        for token in request.tokens():                    # or submit(..., on_token=callback)
            print(token.piece, end="")
        engine.stop()

A full waiting queue raises photon.BusyError (a PhotonError).
"""

from .native import (
    BusyError,
    Engine,
    EngineStats,
    Mode,
    Model,
    PhotonError,
    Request,
    RequestState,
    RequestStats,
    ScoredToken,
    Session,
    SessionOptions,
    StopReason,
    Token,
)

version = Model.version
__version__ = version()

__all__ = [
    "BusyError",
    "Engine",
    "EngineStats",
    "Mode",
    "Model",
    "PhotonError",
    "Request",
    "RequestState",
    "RequestStats",
    "ScoredToken",
    "Session",
    "SessionOptions",
    "StopReason",
    "Token",
    "version",
]
