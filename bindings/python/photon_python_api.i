/* photon_python_api.i -- the Pythonic surface of package photon, included by photon_python.i:
 * enums, Token, properties, context managers, and the methods that check their arguments and
 * dispatch to the generated ones (photon/__init__.pyi describes the result for editors). */

/* The callback, the pull primitives and the getters are reached through the API below. */
%rename(_TokenListener) photon_binding::TokenListener;
%rename(_BatchListener) photon_binding::BatchListener;
%rename(_FinishListener) photon_binding::FinishListener;
%rename(_SessionVector) std::vector<photon_binding::Session *>;
/* Model.score_top gives ScoredToken lists made from the native result. */
%rename(_TopScores) photon_binding::TopScores;
%rename(_score_top) photon_binding::Model::score_top;
%rename(_score_top_with_stride) photon_binding::Model::score_top_with_stride;
%rename(_next_token) photon_binding::Session::next_token;
%rename(_last_piece) photon_binding::Session::last_piece;
%rename(_last_logprob) photon_binding::Session::last_logprob;
%rename(_last_top_tokens) photon_binding::Session::last_top_tokens;
%rename(_last_top_logprobs) photon_binding::Session::last_top_logprobs;
%define PHOTON_PYTHON_GETTER(CLASS, GETTER)
%rename(_ ## GETTER) CLASS::GETTER;
%enddef
PHOTON_PYTHON_GETTER(photon_binding::Model, device)
PHOTON_PYTHON_GETTER(photon_binding::Model, precision)
PHOTON_PYTHON_GETTER(photon_binding::Model, arch)
PHOTON_PYTHON_GETTER(photon_binding::Model, levels)
PHOTON_PYTHON_GETTER(photon_binding::Model, parameter_count)
PHOTON_PYTHON_GETTER(photon_binding::Model, vocab_size)
PHOTON_PYTHON_GETTER(photon_binding::Model, context_length)
PHOTON_PYTHON_GETTER(photon_binding::Model, bos)
PHOTON_PYTHON_GETTER(photon_binding::Model, eos)
PHOTON_PYTHON_GETTER(photon_binding::Model, config_json)
PHOTON_PYTHON_GETTER(photon_binding::Model, is_closed)
PHOTON_PYTHON_GETTER(photon_binding::Session, mode)
PHOTON_PYTHON_GETTER(photon_binding::Session, kv_type)
PHOTON_PYTHON_GETTER(photon_binding::Session, stop_reason)
PHOTON_PYTHON_GETTER(photon_binding::Session, position)
PHOTON_PYTHON_GETTER(photon_binding::Session, is_closed)

/* Objects passed to the library are checked first, so that a wrong one gets a plain message. */
%pythonprepend photon_binding::Session::restore %{
    _require(model, Model, "model")
%}
%pythonprepend photon_binding::Session::restore_file %{
    _require(model, Model, "model")
%}
%pythonprepend photon_binding::Session::set_sampler %{
    _require(options, SessionOptions, "options")
%}
/* One constructor, with the device, threads and precision defaulted here (the others serve the
   other languages). */
%ignore photon_binding::Model::Model(const std::string &);
%ignore photon_binding::Model::Model(const std::string &, const std::string &);
%ignore photon_binding::Model::Model(const std::string &, const std::string &,
                                     const std::string &);
%ignore photon_binding::Model::Model(const std::string &, int);
%ignore photon_binding::Model::Model(const std::string &, const std::string &, int);
%ignore photon_binding::Model::Model(const std::string &, const std::string &, int, bool);
%feature("shadow")
photon_binding::Model::Model(const std::string &, const std::string &, int, bool,
                             const std::string &) %{
    def __init__(self, path, device="cpu", threads=0, verify=False, precision=None):
        """Loads and verifies a .photon file (str, bytes or os.PathLike), to run on device:
        "cpu" (the default), "cuda", "cuda:N" or "auto" (a GPU when one is usable); threads: the
        most CPU threads one call computes with (0: every core); verify: also read every weight,
        refusing NaN, infinities and data changed since the file was written; precision: how
        products of activations and weights compute, "exact", "bf16" or "int8" (None: the device's
        default, "exact" on the CPU and "bf16" on a GPU)."""
        precision = "" if precision is None else precision
        _native.Model_swiginit(self, _native.new_Model(path, device, threads, verify, precision))
%}
%feature("shadow") photon_binding::Model::tokenize %{
    def tokenize(self, text, add_bos=True):
        """Token ids of UTF-8 text (str, or bytes taken as they are), with BOS first when
        add_bos."""
        return _native.Model_tokenize(self, text, add_bos)
%}
%feature("shadow") photon_binding::Model::token_piece %{
    def token_piece(self, token, previous=-1):
        """The raw bytes token adds to generated text after the token previous (-1, or a token
        without text such as BOS: at the start of the text, where a leading space is dropped):
        bytes, since a piece may hold part of a UTF-8 character. For naming the alternatives of
        Token.top_logprobs."""
        return _native.Model_token_piece(self, token, previous)
%}
%feature("shadow") photon_binding::SessionOptions::set_logit_bias %{
    def set_logit_bias(self, tokens, biases=None):
        """Replaces the logit biases: biases[i] is added to the logit of tokens[i] (distinct
        ids); or one mapping {token id: bias}, biases left out. Empty clears them."""
        if biases is None and isinstance(tokens, _Mapping):
            tokens, biases = list(tokens.keys()), list(tokens.values())
        _native.SessionOptions_set_logit_bias(self, tokens, biases)
        return self
%}
%feature("shadow") photon_binding::Session::Session(const Model &, const SessionOptions &) %{
    def __init__(self, model, options=None):
        """Opens a session on model; options (SessionOptions) default to greedy decoding in the
        model's default mode."""
        _require(model, Model, "model")
        options = SessionOptions() if options is None else options
        _require(options, SessionOptions, "options")
        _native.Session_swiginit(self, _native.new_Session(model, options))
%}

%pythoncode %{
import enum as _enum
import json as _json
from collections.abc import Mapping as _Mapping
from typing import NamedTuple as _NamedTuple

PhotonError = _native.PhotonError


class Mode(_enum.IntEnum):
    """How a session decodes (photon_mode)."""
    AUTO = 0
    HIERGEN = 1
    RECGEN = 2


class StopReason(_enum.IntEnum):
    """Why the last generation stopped (photon_stop_reason)."""
    NONE = 0
    LENGTH = 1
    EOS = 2
    STOP_STRING = 3
    CALLBACK = 4
    CANCELLED = 5
    CONTEXT_FULL = 6
    ERROR = 7


class _TokenFields(_NamedTuple):
    id: int
    piece: str
    logprob: float


class Token(_TokenFields):
    """A generated token: id, UTF-8-complete text piece (may be empty while a character is split
    across tokens) and log p(token) under the model's unmodified distribution; top_logprobs: the
    alternatives of its position, ((id, logprob), ...) for the k most likely ids, the most likely
    first (SessionOptions.set_top_logprobs(k); empty when k is 0). Model.token_piece names
    them. The alternatives are an attribute beside the tuple, so a token still unpacks into its
    three fields and compares by them."""
    top_logprobs = ()

    def __new__(cls, id, piece, logprob, top_logprobs=()):
        token = super().__new__(cls, id, piece, logprob)
        if top_logprobs:
            token.top_logprobs = tuple(top_logprobs)
        return token


class ScoredToken(_NamedTuple):
    """A token scored with its alternatives (Model.score_top): its id, log p(token | the tokens
    before it) as Model.score gives it (NaN for the first token, which is not predicted), and
    top_logprobs: the alternatives of its position as Token.top_logprobs holds them, ((id,
    logprob), ...) for the k most likely ids, the most likely first (the lower id first on ties);
    () for the first token. Where the token is among them, its value there equals logprob
    exactly, so `top_logprobs[0][0] == id` tells whether it was the greedy choice."""
    id: int
    logprob: float
    top_logprobs: tuple


def _scored_tokens(scores):
    """Model.score_top's list of ScoredToken from the native result, whose alternatives are rows
    of k cells: position i's are cells [i * k, (i + 1) * k)."""
    k = scores.k()
    pairs = list(zip(scores.top_tokens(), scores.top_logprobs()))
    return [ScoredToken(token, logprob, tuple(pairs[i * k:(i + 1) * k]) if i > 0 else ())
            for i, (token, logprob) in enumerate(zip(scores.tokens(), scores.logprobs()))]


def _top_logprobs(tokens, logprobs):
    """A token's alternatives as Token.top_logprobs holds them, from the native getters of its
    ids and log-probabilities (the second is not called when there are none)."""
    ids = tokens()
    return tuple(zip(ids, logprobs())) if ids else ()


class _ClosingMixin:
    """with-statement support: leaving the block closes the object."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _require(value, kind, what):
    if not isinstance(value, kind):
        raise TypeError(f"photon: {what} must be a photon.{kind.__name__}, "
                        f"not {type(value).__name__}")


def _require_callable(on_token):
    if not callable(on_token):
        raise TypeError(f"photon: on_token must be callable, not {type(on_token).__name__}")
%}

%extend photon_binding::Model {
%pythoncode %{
    __enter__ = _ClosingMixin.__enter__
    __exit__ = _ClosingMixin.__exit__
    closed = property(_is_closed, doc="True once close() has released the model.")
    device = property(_device, doc='Where the model runs: "cpu" or "cuda:N".')
    precision = property(_precision, doc='How the model\'s products compute: "exact" or "bf16".')
    arch = property(_arch, doc='"photon" or "vanilla".')
    levels = property(_levels, doc="Number of PHOTON levels (0 for vanilla).")
    parameter_count = property(_parameter_count)
    vocab_size = property(_vocab_size)
    context_length = property(_context_length)
    bos = property(_bos, doc="Id of the BOS token, -1 if none.")
    eos = property(_eos, doc="Id of the EOS token, -1 if none.")
    config_json = property(_config_json, doc="The configuration as JSON text.")

    @property
    def config(self):
        """The configuration as a dict."""
        return _json.loads(self._config_json())

    def score_top(self, tokens, k):
        """Teacher-forced scoring with alternatives: a ScoredToken per token (a sequence of int
        ids), with the log-probability score() gives it and its position's k most likely ids and
        their log-probabilities (1 <= k <= vocab_size; the first token has none). Longer than the
        context: in sliding windows half a context apart."""
        return _scored_tokens(self._score_top(tokens, k))

    def score_top_with_stride(self, tokens, k, stride):
        """As score_top, with the sliding windows stride tokens apart (1 <= stride < the context;
        0: half the context)."""
        return _scored_tokens(self._score_top_with_stride(tokens, k, stride))
%}
}

%extend photon_binding::Session {
%pythoncode %{
    __enter__ = _ClosingMixin.__enter__
    __exit__ = _ClosingMixin.__exit__
    closed = property(_is_closed, doc="True once close() has released the session.")
    mode = property(_mode, doc="The Mode the session runs in (AUTO resolved).")
    kv_type = property(_kv_type, doc='Storage of the KV caches: "f32", "bf16" or "f16" (a '
                       "restored session keeps its saved type).")
    stop_reason = property(_stop_reason, doc="Why the last generation stopped.")
    position = property(_position, doc="Number of tokens the session holds.")

    def prefill(self, prompt):
        """Consumes a prompt: text (str, or bytes taken as UTF-8) is tokenized, with BOS first
        while the session is empty; a sequence of int is taken as token ids."""
        if isinstance(prompt, (str, bytes, bytearray, memoryview)):
            self._prefill_text(prompt)
        elif hasattr(prompt, "__len__") and hasattr(prompt, "__getitem__"):
            self._prefill_tokens(prompt)
        else:
            raise TypeError("photon: prompt must be str, bytes or a sequence of int token ids, "
                            f"not {type(prompt).__name__}")

    def generate(self, max_tokens, on_token=None):
        """Generates up to max_tokens tokens; returns how many were delivered.

        on_token(token) receives each Token; returning False stops generation (any other value,
        None included, goes on). An exception it raises stops generation and propagates from
        here. cancel() from another thread stops it too."""
        if on_token is None:
            return self._generate_quietly(max_tokens)
        _require_callable(on_token)
        return self._generate_with(max_tokens, _CallbackListener(on_token))

    @staticmethod
    def generate_batch(sessions, max_tokens, on_token=None):
        """Advances sessions of one model together, each by up to max_tokens tokens, with their
        matrix products batched; each produces exactly the tokens generate() would have. Returns
        the list of how many tokens each session delivered.

        on_token(index, token) receives each Token with its session's index in sessions;
        returning False stops that session. An exception it raises stops them all and
        propagates from here."""
        sessions = list(sessions)
        for index, session in enumerate(sessions):
            _require(session, Session, f"sessions[{index}]")
        if on_token is None:
            return Session._generate_batch_quietly(sessions, max_tokens)
        _require_callable(on_token)
        return Session._generate_batch_with(sessions, max_tokens,
                                            _BatchCallbackListener(on_token))

    @staticmethod
    def prefill_batch(sessions, token_lists):
        """Consumes token_lists[i] (a sequence of int token ids) into sessions[i], for sessions of
        one model, with the prompts of all of them sharing each matrix product; each session ends
        as prefill(token_lists[i]) would leave it. Every session's tokens are checked first: a
        bad token or a full context raises PhotonError and leaves all sessions unchanged."""
        sessions = list(sessions)
        for index, session in enumerate(sessions):
            _require(session, Session, f"sessions[{index}]")
        Session._prefill_batch(sessions, token_lists)

    def tokens(self, max_tokens):
        """An iterator over the next tokens (at most max_tokens), each generated when it is asked
        for. It ends early when generation stops (stop_reason says why; a stop string ends it
        after the token that completes it), and cancel() from another thread ends it at its next
        token, also when called before the iteration starts."""
        if not hasattr(max_tokens, "__index__"):
            raise TypeError(f"photon: max_tokens must be an int, not {type(max_tokens).__name__}")
        if max_tokens.__index__() < 0:
            raise ValueError(f"photon: max_tokens must be >= 0, got {max_tokens}")
        return self._pull(max_tokens.__index__())

    def _pull(self, max_tokens):
        for _ in range(max_tokens):
            token_id = self._next_token()
            if token_id < 0:
                return
            yield Token(token_id, self._last_piece(), self._last_logprob(),
                        _top_logprobs(self._last_top_tokens, self._last_top_logprobs))
%}
}
