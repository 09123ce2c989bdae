/* photon_python.i -- the Python binding: package photon (photon/__init__.py re-exports this
 * module, photon.native, whose extension is photon._native). */
%module(package="photon", directors="1") native

%include <std_string.i>

%{
#include "photon_binding.hpp"

/* photon.PhotonError, created when the extension is imported. */
static PyObject *photon_python_error = nullptr;

static void photon_python_raise(const photon::PhotonError &error) {
  const std::string message = error.what();
  PyObject *text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                        "replace");
  PyObject *exception = text ? PyObject_CallFunctionObjArgs(photon_python_error, text, nullptr)
                             : nullptr;
  Py_XDECREF(text);
  if (!exception) return;  /* that failure's error is pending instead */
  PyObject *status = PyLong_FromLong(error.status());
  PyObject *name = PyUnicode_FromString(error.status_name().c_str());
  if (status && name && PyObject_SetAttrString(exception, "status", status) == 0 &&
      PyObject_SetAttrString(exception, "status_name", name) == 0) {
    PyErr_SetObject(photon_python_error, exception);
  }
  Py_XDECREF(status);
  Py_XDECREF(name);
  Py_DECREF(exception);
}

/* An enum value as the IntEnum of the same name defined in photon.native. */
static PyObject *photon_python_enum(const char *name, int value) {
  PyObject *module = PyImport_ImportModule("photon.native");
  if (!module) return nullptr;
  PyObject *type = PyObject_GetAttrString(module, name);
  Py_DECREF(module);
  if (!type) return nullptr;
  PyObject *result = PyObject_CallFunction(type, "i", value);
  Py_DECREF(type);
  return result;
}
%}

%init %{
  photon_python_error = PyErr_NewExceptionWithDoc(
      "photon.PhotonError",
      "A PHOTON call failed. str(error) is the library's message (it names the input); status is "
      "the photon_status code and status_name its name, e.g. 'PHOTON_ERR_IO'.",
      PyExc_RuntimeError, nullptr);
  if (!photon_python_error) return nullptr;
  Py_INCREF(photon_python_error);
  if (PyModule_AddObject(m, "PhotonError", photon_python_error) < 0) return nullptr;
%}

/* Errors: photon.PhotonError for a failed call; an exception raised by a token callback reaches
 * the caller of generate() as itself. */
%exception {
  try {
    $action
  } catch (const photon::PhotonError &e) {
    photon_python_raise(e);
    SWIG_fail;
  } catch (Swig::DirectorException &) {
    SWIG_fail;  /* the callback's exception is still set */
  } catch (const std::exception &e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    SWIG_fail;
  }
}

/* Python keeps photon's snake_case names. */
%define PHOTON_FUNCTION_NAMES
%enddef

%define PHOTON_CLOSED_CHECK(TYPE, WHAT)
%typemap(check) TYPE *self %{
  if (!$1) {
    PyErr_SetString(PyExc_ValueError, "photon: the " WHAT " is closed");
    SWIG_fail;
  }
%}
%enddef

/* photon::Bytes <-> bytes (any bytes-like object in), photon::TokenIds <-> list of int (any
 * sequence of int in). */
%typemap(in) const photon::Bytes & (photon::Bytes bytes) %{
  {
    Py_buffer view;
    if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) < 0) SWIG_fail;
    const auto *data = static_cast<const std::uint8_t *>(view.buf);
    bytes.assign(data, data + view.len);
    PyBuffer_Release(&view);
    $1 = &bytes;
  }
%}
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const photon::Bytes & %{
  $1 = PyObject_CheckBuffer($input) ? 1 : 0;
%}
%typemap(out) photon::Bytes %{
  $result = PyBytes_FromStringAndSize(reinterpret_cast<const char *>($1.data()),
                                      static_cast<Py_ssize_t>($1.size()));
%}

%typemap(in) const photon::TokenIds & (photon::TokenIds ids) %{
  {
    PyObject *sequence = PySequence_Fast($input, "photon: token ids must be a sequence of int");
    if (!sequence) SWIG_fail;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    ids.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      const long id = PyLong_AsLong(PySequence_Fast_GET_ITEM(sequence, i));
      if (id == -1 && PyErr_Occurred()) break;
      ids.push_back(static_cast<std::int32_t>(id));
    }
    Py_DECREF(sequence);
    if (PyErr_Occurred()) SWIG_fail;
    $1 = &ids;
  }
%}
%typemap(typecheck, precedence=SWIG_TYPECHECK_INT32_ARRAY) const photon::TokenIds & %{
  $1 = PySequence_Check($input) && !PyUnicode_Check($input) && !PyBytes_Check($input) ? 1 : 0;
%}
%typemap(out) photon::TokenIds %{
  $result = PyList_New(static_cast<Py_ssize_t>($1.size()));
  for (size_t i = 0; $result && i < $1.size(); ++i) {
    PyList_SET_ITEM($result, static_cast<Py_ssize_t>(i), PyLong_FromLong($1.data()[i]));
  }
%}

%typemap(out) photon::Mode %{ $result = photon_python_enum("Mode", static_cast<int>($1)); %}
%typemap(out) photon::StopReason %{
  $result = photon_python_enum("StopReason", static_cast<int>($1));
%}

/* SessionOptions setters chain on the object itself: a new proxy for the returned reference would
 * not keep the options alive. */
%define PHOTON_PYTHON_CHAIN(SETTER)
%feature("pythonappend") photon::SessionOptions::SETTER "val = self"
%enddef
PHOTON_PYTHON_CHAIN(set_mode)
PHOTON_PYTHON_CHAIN(set_context_length)
PHOTON_PYTHON_CHAIN(set_seed)
PHOTON_PYTHON_CHAIN(set_temperature)
PHOTON_PYTHON_CHAIN(set_top_k)
PHOTON_PYTHON_CHAIN(set_top_p)
PHOTON_PYTHON_CHAIN(set_min_p)
PHOTON_PYTHON_CHAIN(set_repetition_penalty)
PHOTON_PYTHON_CHAIN(set_ignore_eos)
PHOTON_PYTHON_CHAIN(add_stop_string)

/* The callback, the pull primitives and the getters are reached through the Pythonic API
 * below: generate(max_tokens, on_token), tokens(max_tokens), properties. */
%rename(_TokenListener) photon::TokenListener;
%rename(_BatchListener) photon::BatchListener;
%rename(_SessionVector) std::vector<photon::Session *>;
%rename(_generate) photon::Session::generate;
%rename(_generate_batch) photon::Session::generate_batch;
%rename(_next_token) photon::Session::next_token;
%rename(_last_piece) photon::Session::last_piece;
%rename(_last_logprob) photon::Session::last_logprob;
%define PHOTON_PYTHON_GETTER(CLASS, GETTER)
%rename(_ ## GETTER) CLASS::GETTER;
%enddef
PHOTON_PYTHON_GETTER(photon::Model, arch)
PHOTON_PYTHON_GETTER(photon::Model, levels)
PHOTON_PYTHON_GETTER(photon::Model, parameter_count)
PHOTON_PYTHON_GETTER(photon::Model, vocab_size)
PHOTON_PYTHON_GETTER(photon::Model, context_length)
PHOTON_PYTHON_GETTER(photon::Model, bos)
PHOTON_PYTHON_GETTER(photon::Model, eos)
PHOTON_PYTHON_GETTER(photon::Model, config_json)
PHOTON_PYTHON_GETTER(photon::Model, is_closed)
PHOTON_PYTHON_GETTER(photon::Session, mode)
PHOTON_PYTHON_GETTER(photon::Session, stop_reason)
PHOTON_PYTHON_GETTER(photon::Session, position)
PHOTON_PYTHON_GETTER(photon::Session, is_closed)

%pythoncode %{
import enum as _enum
import json as _json
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


class Token(_NamedTuple):
    """A generated token: id, UTF-8-complete text piece (may be empty while a character is split
    across tokens) and log p(token) under the model's unmodified distribution."""
    id: int
    piece: str
    logprob: float


class _ClosingMixin:
    """with-statement support: leaving the block closes the object."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
%}

%extend photon::Model {
%pythoncode %{
    __enter__ = _ClosingMixin.__enter__
    __exit__ = _ClosingMixin.__exit__
    closed = property(_is_closed, doc="True once close() has released the model.")
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
%}
}

%extend photon::Session {
%pythoncode %{
    __enter__ = _ClosingMixin.__enter__
    __exit__ = _ClosingMixin.__exit__
    closed = property(_is_closed, doc="True once close() has released the session.")
    mode = property(_mode, doc="The Mode the session runs in (AUTO resolved).")
    stop_reason = property(_stop_reason, doc="Why the last generation stopped.")
    position = property(_position, doc="Number of tokens the session holds.")

    def generate(self, max_tokens, on_token=None):
        """Generates up to max_tokens tokens; returns how many were delivered.

        on_token(token) receives each Token; returning False stops generation (any other value
        goes on). An exception it raises stops generation and propagates from here."""
        if on_token is None:
            return self._generate(max_tokens)
        return self._generate(max_tokens, _CallbackListener(on_token))

    @staticmethod
    def generate_batch(sessions, max_tokens, on_token=None):
        """Advances sessions of one model together, each by up to max_tokens tokens, with their
        matrix products batched; each produces exactly the tokens generate() would have. Returns
        the list of how many tokens each session delivered.

        on_token(index, token) receives each Token with its session's index in sessions;
        returning False stops that session. An exception it raises stops them all and
        propagates from here."""
        if on_token is None:
            return Session._generate_batch(sessions, max_tokens)
        return Session._generate_batch(sessions, max_tokens, _BatchCallbackListener(on_token))

    def tokens(self, max_tokens):
        """Yields the next tokens (at most max_tokens), each generated when it is asked for."""
        for _ in range(max_tokens):
            token_id = self._next_token()
            if token_id < 0:
                return
            yield Token(token_id, self._last_piece(), self._last_logprob())
%}
}

%include "../photon.i"

%pythoncode %{
class _CallbackListener(_TokenListener):
    def __init__(self, on_token):
        super().__init__()
        self._on_token = on_token

    def on_token(self, token, piece, logprob):
        return self._on_token(Token(token, piece, logprob)) is not False


class _BatchCallbackListener(_BatchListener):
    def __init__(self, on_token):
        super().__init__()
        self._on_token = on_token

    def on_token(self, session_index, token, piece, logprob):
        return self._on_token(session_index, Token(token, piece, logprob)) is not False
%}
