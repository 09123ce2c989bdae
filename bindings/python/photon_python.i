/* photon_python.i -- the Python binding: package photon (photon/__init__.py re-exports this
 * module, photon.native, whose extension is photon._native). */
%module(package="photon", directors="1", threads="1") native

%include <std_string.i>

%{
#include "photon_binding.hpp"

#include <climits>
#include <cstdint>

/* photon.PhotonError, created when the extension is imported. */
static PyObject *photon_python_error = nullptr;
/* photon.BusyError, its subclass for PHOTON_ERR_BUSY (an engine's waiting queue is full). */
static PyObject *photon_python_busy = nullptr;

static void photon_python_raise(const photon_binding::PhotonError &error) {
  const std::string message = error.what();
  PyObject *type = error.status() == PHOTON_ERR_BUSY ? photon_python_busy : photon_python_error;
  PyObject *text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                        "replace");
  PyObject *exception = text ? PyObject_CallFunctionObjArgs(type, text, nullptr) : nullptr;
  Py_XDECREF(text);
  if (!exception) return;  /* that failure's error is pending instead */
  PyObject *status = PyLong_FromLong(error.status());
  PyObject *name = PyUnicode_FromString(error.status_name().c_str());
  if (status && name && PyObject_SetAttrString(exception, "status", status) == 0 &&
      PyObject_SetAttrString(exception, "status_name", name) == 0) {
    PyErr_SetObject(type, exception);
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

/* Arguments are converted here, with messages that name the argument, instead of by SWIG's
 * generic conversions ("in method 'x', argument 2 of type 'int'"). Each returns false with a
 * Python exception set. */

/* An integer in [low, high]: any object with __index__ (int, numpy integers), never truncated. */
static bool photon_python_integer(PyObject *object, const char *name, long long low,
                                  unsigned long long high, unsigned long long *out) {
  PyObject *index = PyNumber_Index(object);
  if (!index) {
    PyErr_Format(PyExc_TypeError, "photon: %s must be an int, not %.100s", name,
                 Py_TYPE(object)->tp_name);
    return false;
  }
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
  bool fits = false;
  if (overflow == 0 && !PyErr_Occurred()) {
    fits = value >= low && (value < 0 || static_cast<unsigned long long>(value) <= high);
    *out = static_cast<unsigned long long>(value);
  } else if (overflow > 0) {  /* above LLONG_MAX: may still fit an unsigned 64-bit range */
    *out = PyLong_AsUnsignedLongLong(index);
    fits = !PyErr_Occurred() && *out <= high;
  }
  PyErr_Clear();
  if (!fits) {
    PyErr_Format(PyExc_OverflowError, "photon: %s = %S is out of range [%lld, %llu]", name, index,
                 low, high);
  }
  Py_DECREF(index);
  return fits;
}

static bool photon_python_int(PyObject *object, const char *name, int *out) {
  unsigned long long value = 0;
  if (!photon_python_integer(object, name, INT_MIN, INT_MAX, &value)) return false;
  *out = static_cast<int>(static_cast<long long>(value));
  return true;
}

/* A number (int, float, numpy numbers), rounded to float. */
static bool photon_python_float(PyObject *object, const char *name, float *out) {
  const double value = PyFloat_AsDouble(object);
  if (value == -1.0 && PyErr_Occurred()) {
    PyErr_Format(PyExc_TypeError, "photon: %s must be a number, not %.100s", name,
                 Py_TYPE(object)->tp_name);
    return false;
  }
  *out = static_cast<float>(value);
  return true;
}

/* UTF-8 text: str, or bytes-like objects taken as they are. */
static bool photon_python_text(PyObject *object, const char *name, std::string *out) {
  if (PyUnicode_Check(object)) {
    Py_ssize_t size = 0;
    const char *data = PyUnicode_AsUTF8AndSize(object, &size);
    if (!data) return false;
    out->assign(data, static_cast<size_t>(size));
    return true;
  }
  Py_buffer view;
  if (!PyObject_CheckBuffer(object) || PyObject_GetBuffer(object, &view, PyBUF_SIMPLE) < 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "photon: %s must be str or bytes, not %.100s", name,
                 Py_TYPE(object)->tp_name);
    return false;
  }
  out->assign(static_cast<const char *>(view.buf), static_cast<size_t>(view.len));
  PyBuffer_Release(&view);
  return true;
}

/* A file system path: str, bytes or os.PathLike (pathlib.Path), encoded as the OS expects. */
static bool photon_python_path(PyObject *object, std::string *out) {
  PyObject *path = PyOS_FSPath(object);
  if (!path) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "photon: path must be str, bytes or os.PathLike, not %.100s",
                 Py_TYPE(object)->tp_name);
    return false;
  }
  PyObject *encoded = PyUnicode_Check(path) ? PyUnicode_EncodeFSDefault(path) : path;
  if (encoded == path) Py_INCREF(encoded);
  Py_DECREF(path);
  if (!encoded) return false;
  out->assign(PyBytes_AS_STRING(encoded), static_cast<size_t>(PyBytes_GET_SIZE(encoded)));
  Py_DECREF(encoded);
  return true;
}

/* Token ids: any sequence of int, each a 32-bit id (the library checks the vocabulary). */
static bool photon_python_token_ids(PyObject *object, const char *name,
                                    photon_binding::TokenIds *out) {
  if (PyUnicode_Check(object) || PyBytes_Check(object) || !PySequence_Check(object)) {
    PyErr_Format(PyExc_TypeError, "photon: %s must be a sequence of int token ids, not %.100s",
                 name, Py_TYPE(object)->tp_name);
    return false;
  }
  PyObject *sequence = PySequence_Fast(object, "photon: token ids must be a sequence");
  if (!sequence) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
  out->reserve(static_cast<size_t>(n));
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    const std::string item = std::string(name) + "[" + std::to_string(i) + "]";
    int id = 0;
    ok = photon_python_int(PySequence_Fast_GET_ITEM(sequence, i), item.c_str(), &id);
    out->push_back(id);
  }
  Py_DECREF(sequence);
  return ok;
}

/* Numbers (logit biases): any sequence of them, each rounded to float. */
static bool photon_python_floats(PyObject *object, const char *name,
                                 photon_binding::Logprobs *out) {
  if (PyUnicode_Check(object) || PyBytes_Check(object) || !PySequence_Check(object)) {
    PyErr_Format(PyExc_TypeError, "photon: %s must be a sequence of numbers, not %.100s", name,
                 Py_TYPE(object)->tp_name);
    return false;
  }
  PyObject *sequence = PySequence_Fast(object, "photon: numbers must be a sequence");
  if (!sequence) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
  out->reserve(static_cast<size_t>(n));
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    const std::string item = std::string(name) + "[" + std::to_string(i) + "]";
    float value = 0.0f;
    ok = photon_python_float(PySequence_Fast_GET_ITEM(sequence, i), item.c_str(), &value);
    out->push_back(value);
  }
  Py_DECREF(sequence);
  return ok;
}

/* One sequence of token ids per session of a batch: any sequence of them. */
static bool photon_python_token_lists(PyObject *object, const char *name,
                                      std::vector<photon_binding::TokenIds> *out) {
  if (PyUnicode_Check(object) || PyBytes_Check(object) || !PySequence_Check(object)) {
    PyErr_Format(PyExc_TypeError,
                 "photon: %s must be a sequence of token id sequences, not %.100s", name,
                 Py_TYPE(object)->tp_name);
    return false;
  }
  PyObject *sequence = PySequence_Fast(object, "photon: token lists must be a sequence");
  if (!sequence) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
  out->resize(static_cast<size_t>(n));
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    const std::string item = std::string(name) + "[" + std::to_string(i) + "]";
    ok = photon_python_token_ids(PySequence_Fast_GET_ITEM(sequence, i), item.c_str(),
                                 &(*out)[static_cast<size_t>(i)]);
  }
  Py_DECREF(sequence);
  return ok;
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
  photon_python_busy = PyErr_NewExceptionWithDoc(
      "photon.BusyError",
      "An engine's waiting queue is full (PHOTON_ERR_BUSY): submit again later.",
      photon_python_error, nullptr);
  if (!photon_python_busy) return nullptr;
  Py_INCREF(photon_python_busy);
  if (PyModule_AddObject(m, "BusyError", photon_python_busy) < 0) return nullptr;
%}

/* Errors: photon.PhotonError for a failed call; an exception raised by a token callback reaches
 * the caller of generate() as itself. */
%exception {
  try {
    $action
  } catch (const photon_binding::PhotonError &e) {
    photon_python_raise(e);
    SWIG_fail;
  } catch (Swig::DirectorException &) {
    SWIG_fail;  /* the callback's exception is still set */
  } catch (const std::exception &e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    SWIG_fail;
  }
}

/* The interpreter lock is released while the library works (callbacks take it back), so that other
 * Python threads run meanwhile: loading, tokenizing, scoring, prefill, generation, save and
 * restore. Every other call is quick and keeps it. */
%feature("nothreadallow");
%define PHOTON_PYTHON_RELEASES_LOCK(FUNCTION)
%feature("nothreadallow", "0") FUNCTION;
%enddef
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Model::Model)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Model::tokenize)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Model::detokenize)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Model::score)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Model::score_with_stride)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Model::score_top)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Model::score_top_with_stride)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::restore)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::restore_file)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::close)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::history)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::prefill)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::generate)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::generate_batch)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::prefill_batch)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::next_token)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::save)
PHOTON_PYTHON_RELEASES_LOCK(photon_binding::Session::save_file)

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

/* Numbers, text and paths (see the converters above). */
%typemap(in) int %{
  if (!photon_python_int($input, "$1_name", &$1)) SWIG_fail;
%}
%typemap(typecheck, precedence=SWIG_TYPECHECK_INTEGER) int %{ $1 = PyIndex_Check($input); %}
%typemap(in) std::uint64_t %{
  {
    unsigned long long value = 0;
    if (!photon_python_integer($input, "$1_name", 0, UINT64_MAX, &value)) SWIG_fail;
    $1 = static_cast<std::uint64_t>(value);
  }
%}
%typemap(in) float %{
  if (!photon_python_float($input, "$1_name", &$1)) SWIG_fail;
%}
%typemap(in) bool %{
  {
    const int value = PyObject_IsTrue($input);
    if (value < 0) SWIG_fail;
    $1 = value != 0;
  }
%}
%typemap(in) const std::string & (std::string text) %{
  if (!photon_python_text($input, "$1_name", &text)) SWIG_fail;
  $1 = &text;
%}
%typemap(in) const std::string &path (std::string path) %{
  if (!photon_python_path($input, &path)) SWIG_fail;
  $1 = &path;
%}
%typemap(freearg) const std::string & ""

/* photon_binding::Bytes <-> bytes (any bytes-like object in), TokenIds <-> list of int (any
 * sequence of int in), Logprobs <-> list of float (any sequence of numbers in: logit biases),
 * std::vector<TokenIds> <- any sequence of sequences of int (prefill_batch's token_lists). */
%typemap(in) const photon_binding::Bytes & (photon_binding::Bytes bytes) %{
  {
    Py_buffer view;
    if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) < 0) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "photon: $1_name must be bytes-like, not %.100s",
                   Py_TYPE($input)->tp_name);
      SWIG_fail;
    }
    const auto *data = static_cast<const std::uint8_t *>(view.buf);
    bytes.assign(data, data + view.len);
    PyBuffer_Release(&view);
    $1 = &bytes;
  }
%}
%typemap(out) photon_binding::Bytes %{
  $result = PyBytes_FromStringAndSize(reinterpret_cast<const char *>($1.data()),
                                      static_cast<Py_ssize_t>($1.size()));
%}

%typemap(in) const photon_binding::TokenIds & (photon_binding::TokenIds ids) %{
  if (!photon_python_token_ids($input, "$1_name", &ids)) SWIG_fail;
  $1 = &ids;
%}
%typemap(in) const photon_binding::Logprobs & (photon_binding::Logprobs values) %{
  if (!photon_python_floats($input, "$1_name", &values)) SWIG_fail;
  $1 = &values;
%}
%typemap(in) const std::vector<photon_binding::TokenIds> &
    (std::vector<photon_binding::TokenIds> lists) %{
  if (!photon_python_token_lists($input, "token_lists", &lists)) SWIG_fail;
  $1 = &lists;
%}
%typemap(out) photon_binding::TokenIds %{
  $result = PyList_New(static_cast<Py_ssize_t>($1.size()));
  for (size_t i = 0; $result && i < $1.size(); ++i) {
    PyList_SET_ITEM($result, static_cast<Py_ssize_t>(i), PyLong_FromLong($1.data()[i]));
  }
%}
%typemap(out) photon_binding::Logprobs %{
  $result = PyList_New(static_cast<Py_ssize_t>($1.size()));
  for (size_t i = 0; $result && i < $1.size(); ++i) {
    PyList_SET_ITEM($result, static_cast<Py_ssize_t>(i), PyFloat_FromDouble($1.data()[i]));
  }
%}

%typemap(out) photon_binding::Mode %{ $result = photon_python_enum("Mode", static_cast<int>($1)); %}
%typemap(out) photon_binding::StopReason %{
  $result = photon_python_enum("StopReason", static_cast<int>($1));
%}

/* SessionOptions setters chain on the object itself: a new proxy for the returned reference would
 * not keep the options alive. */
%define PHOTON_PYTHON_CHAIN(SETTER)
%feature("pythonappend") photon_binding::SessionOptions::SETTER "val = self"
%enddef
PHOTON_PYTHON_CHAIN(set_mode)
PHOTON_PYTHON_CHAIN(set_context_length)
PHOTON_PYTHON_CHAIN(set_kv_type)
PHOTON_PYTHON_CHAIN(set_seed)
PHOTON_PYTHON_CHAIN(set_temperature)
PHOTON_PYTHON_CHAIN(set_top_k)
PHOTON_PYTHON_CHAIN(set_top_p)
PHOTON_PYTHON_CHAIN(set_min_p)
PHOTON_PYTHON_CHAIN(set_repetition_penalty)
PHOTON_PYTHON_CHAIN(set_presence_penalty)
PHOTON_PYTHON_CHAIN(set_frequency_penalty)
PHOTON_PYTHON_CHAIN(set_top_logprobs)
PHOTON_PYTHON_CHAIN(set_ignore_eos)
PHOTON_PYTHON_CHAIN(add_stop_string)
PHOTON_PYTHON_CHAIN(set_context_shift)

/* No overloads reach Python (a failed overload match gives SWIG's raw "Wrong number or type of
 * arguments"): tokenize's default argument stays one function, the rest is dispatched by the
 * Pythonic API below (photon_python_api.i). */
%feature("compactdefaultargs") photon_binding::Model::tokenize;
%ignore photon_binding::Session::Session(const Model &);
%rename(_prefill_tokens) photon_binding::Session::prefill(const TokenIds &);
%rename(_prefill_text) photon_binding::Session::prefill(const std::string &);
%rename(_generate_quietly) photon_binding::Session::generate(int);
%rename(_generate_with) photon_binding::Session::generate(int, TokenListener &);
%rename(_generate_batch_quietly)
    photon_binding::Session::generate_batch(const std::vector<Session *> &, int);
%rename(_generate_batch_with)
    photon_binding::Session::generate_batch(const std::vector<Session *> &, int, BatchListener &);
%rename(_prefill_batch) photon_binding::Session::prefill_batch;

%include "photon_python_api.i"
%include "photon_python_engine.i"

%include "../photon.i"

%pythoncode %{
class _CallbackListener(_TokenListener):
    def __init__(self, on_token):
        super().__init__()
        self._on_token = on_token

    def on_token(self, token, piece, logprob):
        top = _top_logprobs(self.top_tokens, self.top_logprobs)
        return self._on_token(Token(token, piece, logprob, top)) is not False


class _BatchCallbackListener(_BatchListener):
    def __init__(self, on_token):
        super().__init__()
        self._on_token = on_token

    def on_token(self, session_index, token, piece, logprob):
        top = _top_logprobs(self.top_tokens, self.top_logprobs)
        return self._on_token(session_index, Token(token, piece, logprob, top)) is not False


class _RequestListener(_TokenListener):
    """An engine request's callback, on the engine's stepping thread: an exception is kept for
    Request.wait() (it cannot propagate there) and stops the request."""

    def __init__(self, on_token):
        super().__init__()
        self._on_token = on_token
        self.error = None

    def on_token(self, token, piece, logprob):
        try:
            top = _top_logprobs(self.top_tokens, self.top_logprobs)
            return self._on_token(Token(token, piece, logprob, top)) is not False
        except BaseException as error:
            self.error = error
            return False


class _FutureListener(_FinishListener):
    """Resolves Request.future(): with the StopReason, or with the exception the request's
    on_token raised."""

    def __init__(self, future, tokens):
        super().__init__()
        self._future = future
        self._tokens = tokens

    def on_finish(self, reason):
        error = None if self._tokens is None else self._tokens.error
        if error is None:
            self._future.set_result(StopReason(reason))
        else:
            self._future.set_exception(error)
%}
