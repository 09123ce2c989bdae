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
"""

from .native import Mode, Model, PhotonError, Session, SessionOptions, StopReason, Token

version = Model.version
__version__ = version()

__all__ = [
    "Mode",
    "Model",
    "PhotonError",
    "Session",
    "SessionOptions",
    "StopReason",
    "Token",
    "version",
]
