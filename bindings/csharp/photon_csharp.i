/* photon_csharp.i -- the C# binding: namespace Photon, Photon.dll over libphoton_csharp.so. */
%module(directors="1") PhotonNative

%include <std_string.i>

%pragma(csharp) moduleclassmodifiers="internal class"

%{
#include "photon_binding.hpp"

#include <cstring>

/* C# delegates registered by PhotonNativePINVOKE's static constructor: they set the exception
 * that the generated code throws once the native call has returned. */
typedef void (SWIGSTDCALL *photon_csharp_error_callback)(int status, const char *status_name,
                                                         const char *message);
typedef void (SWIGSTDCALL *photon_csharp_closed_callback)(const char *message);
static photon_csharp_error_callback photon_csharp_set_error = nullptr;
static photon_csharp_closed_callback photon_csharp_set_closed = nullptr;

extern "C" SWIGEXPORT void SWIGSTDCALL photon_csharp_register(photon_csharp_error_callback error,
                                                             photon_csharp_closed_callback closed) {
  photon_csharp_set_error = error;
  photon_csharp_set_closed = closed;
}

/* Byte and token arrays cross as a heap vector that C# creates from or copies into an array. */
template <typename Vector>
static void *photon_csharp_vector_new(const typename Vector::value_type *data, int size) {
  return new Vector(data, data + (size > 0 ? size : 0));
}
template <typename Vector>
static int photon_csharp_vector_size(void *vector) {
  return static_cast<int>(static_cast<Vector *>(vector)->size());
}
template <typename Vector>
static void photon_csharp_vector_copy(void *vector, typename Vector::value_type *out) {
  const Vector &values = *static_cast<Vector *>(vector);
  if (!values.empty()) std::memcpy(out, values.data(), values.size() * sizeof values[0]);
}
template <typename Vector>
static void photon_csharp_vector_free(void *vector) {
  delete static_cast<Vector *>(vector);
}

#define PHOTON_CSHARP_VECTOR_EXPORTS(NAME, VECTOR)                                               \
  extern "C" SWIGEXPORT void *SWIGSTDCALL photon_csharp_##NAME##_new(                            \
      const VECTOR::value_type *data, int size) {                                                \
    return photon_csharp_vector_new<VECTOR>(data, size);                                         \
  }                                                                                              \
  extern "C" SWIGEXPORT int SWIGSTDCALL photon_csharp_##NAME##_size(void *vector) {              \
    return photon_csharp_vector_size<VECTOR>(vector);                                            \
  }                                                                                              \
  extern "C" SWIGEXPORT void SWIGSTDCALL photon_csharp_##NAME##_copy(void *vector,               \
                                                                     VECTOR::value_type *out) {  \
    photon_csharp_vector_copy<VECTOR>(vector, out);                                              \
  }                                                                                              \
  extern "C" SWIGEXPORT void SWIGSTDCALL photon_csharp_##NAME##_free(void *vector) {             \
    photon_csharp_vector_free<VECTOR>(vector);                                                   \
  }
PHOTON_CSHARP_VECTOR_EXPORTS(bytes, photon_binding::Bytes)
PHOTON_CSHARP_VECTOR_EXPORTS(ids, photon_binding::TokenIds)
PHOTON_CSHARP_VECTOR_EXPORTS(floats, photon_binding::Logprobs)

/* The token arrays of a batch's sessions (prefill_batch): created with one empty list per session,
 * each then filled from its array. */
extern "C" SWIGEXPORT void *SWIGSTDCALL photon_csharp_id_lists_new(int count) {
  return new std::vector<photon_binding::TokenIds>(static_cast<size_t>(count > 0 ? count : 0));
}
extern "C" SWIGEXPORT void SWIGSTDCALL photon_csharp_id_lists_set(void *lists, int index,
                                                                  const std::int32_t *data,
                                                                  int size) {
  (*static_cast<std::vector<photon_binding::TokenIds> *>(lists))[static_cast<size_t>(index)].assign(
      data, data + (size > 0 ? size : 0));
}
extern "C" SWIGEXPORT void SWIGSTDCALL photon_csharp_id_lists_free(void *lists) {
  delete static_cast<std::vector<photon_binding::TokenIds> *>(lists);
}
%}

%pragma(csharp) imclassimports=%{
using System;
using System.Runtime.InteropServices;
%}
%pragma(csharp) imclasscode=%{
  [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
  internal delegate void PhotonErrorCallback(int status, string statusName, string message);
  [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
  internal delegate void PhotonClosedCallback(string message);

  // Kept in static fields so that the garbage collector never frees what native code calls.
  static readonly PhotonErrorCallback photonErrorCallback = (status, statusName, message) =>
      SWIGPendingException.Set(statusName == "PHOTON_ERR_BUSY"
                                   ? new BusyException(status, statusName, message)
                                   : new PhotonException(status, statusName, message));
  static readonly PhotonClosedCallback photonClosedCallback = message =>
      SWIGPendingException.Set(new ObjectDisposedException(null, message));

  [DllImport("$dllimport")]
  static extern void photon_csharp_register(PhotonErrorCallback error, PhotonClosedCallback closed);

  internal static readonly bool PhotonCallbacksRegistered = RegisterPhotonCallbacks();
  static bool RegisterPhotonCallbacks() {
    photon_csharp_register(photonErrorCallback, photonClosedCallback);
    return true;
  }

  [DllImport("$dllimport")]
  static extern IntPtr photon_csharp_bytes_new(byte[] data, int size);
  [DllImport("$dllimport")]
  internal static extern int photon_csharp_bytes_size(IntPtr vector);
  [DllImport("$dllimport")]
  internal static extern void photon_csharp_bytes_copy(IntPtr vector, [Out] byte[] output);
  [DllImport("$dllimport")]
  internal static extern void photon_csharp_bytes_free(IntPtr vector);
  internal static IntPtr NewBytes(byte[] data, string name) =>
      photon_csharp_bytes_new(data ?? throw new ArgumentNullException(name), data.Length);

  [DllImport("$dllimport")]
  static extern IntPtr photon_csharp_ids_new(int[] data, int size);
  [DllImport("$dllimport")]
  internal static extern int photon_csharp_ids_size(IntPtr vector);
  [DllImport("$dllimport")]
  internal static extern void photon_csharp_ids_copy(IntPtr vector, [Out] int[] output);
  [DllImport("$dllimport")]
  internal static extern void photon_csharp_ids_free(IntPtr vector);
  internal static IntPtr NewIds(int[] data, string name) =>
      photon_csharp_ids_new(data ?? throw new ArgumentNullException(name), data.Length);

  [DllImport("$dllimport")]
  static extern IntPtr photon_csharp_id_lists_new(int count);
  [DllImport("$dllimport")]
  static extern void photon_csharp_id_lists_set(IntPtr lists, int index, int[] data, int size);
  [DllImport("$dllimport")]
  internal static extern void photon_csharp_id_lists_free(IntPtr lists);
  internal static IntPtr NewIdLists(global::System.Collections.Generic.IList<int[]> lists,
                                    string name) {
    if (lists == null) throw new ArgumentNullException(name);
    for (int i = 0; i < lists.Count; ++i) {
      if (lists[i] == null) throw new ArgumentNullException(name, $"{name}[{i}] is null");
    }
    IntPtr native = photon_csharp_id_lists_new(lists.Count);
    for (int i = 0; i < lists.Count; ++i) {
      photon_csharp_id_lists_set(native, i, lists[i], lists[i].Length);
    }
    return native;
  }

  [DllImport("$dllimport")]
  static extern IntPtr photon_csharp_floats_new(float[] data, int size);
  [DllImport("$dllimport")]
  internal static extern int photon_csharp_floats_size(IntPtr vector);
  [DllImport("$dllimport")]
  internal static extern void photon_csharp_floats_copy(IntPtr vector, [Out] float[] output);
  [DllImport("$dllimport")]
  internal static extern void photon_csharp_floats_free(IntPtr vector);
  internal static IntPtr NewFloats(float[] data, string name) =>
      photon_csharp_floats_new(data ?? throw new ArgumentNullException(name), data.Length);
%}

/* Errors: PhotonException for a failed call, ObjectDisposedException after Dispose. */
%exception {
  try {
    $action
  } catch (const photon_binding::PhotonError &e) {
    photon_csharp_set_error(e.status(), e.status_name().c_str(), e.what());
    return $null;
  } catch (const std::exception &e) {
    SWIG_CSharpSetPendingException(SWIG_CSharpApplicationException, e.what());
    return $null;
  }
}

%define PHOTON_CLOSED_CHECK(TYPE, WHAT)
%typemap(check, canthrow=1) TYPE *self %{
  if (!$1) {
    photon_csharp_set_closed("photon: the " WHAT " is disposed");
    return $null;
  }
%}
%enddef

/* photon_binding::Bytes <-> byte[], TokenIds <-> int[], Logprobs <-> float[] (logit biases in). */
%define PHOTON_CSHARP_ARRAY(CTYPE, CSTYPE, NAME)
%typemap(ctype) CTYPE, const CTYPE & "void *"
%typemap(imtype) CTYPE, const CTYPE & "global::System.IntPtr"
%typemap(cstype) CTYPE, const CTYPE & "CSTYPE[]"
%typemap(in) const CTYPE & %{ $1 = static_cast<$1_ltype>($input); %}
%typemap(out) CTYPE %{ $result = new CTYPE(std::move($1)); %}
%typemap(csout, excode=SWIGEXCODE) CTYPE {
    global::System.IntPtr native = $imcall;$excode
    try {
      var values = new CSTYPE[$imclassname.photon_csharp_ ## NAME ## _size(native)];
      $imclassname.photon_csharp_ ## NAME ## _copy(native, values);
      return values;
    } finally {
      $imclassname.photon_csharp_ ## NAME ## _free(native);
    }
  }
%enddef
PHOTON_CSHARP_ARRAY(photon_binding::Bytes, byte, bytes)
PHOTON_CSHARP_ARRAY(photon_binding::TokenIds, int, ids)
PHOTON_CSHARP_ARRAY(photon_binding::Logprobs, float, floats)
/* An array argument becomes its native vector as the call's arguments are evaluated, inside the
 * try whose finally frees it (freeing Zero does nothing): when a later argument throws
 * (SetLogitBias(tokens, null)), the vectors made before it are freed too. */
%typemap(csin,
    pre="    var native$csinput = global::System.IntPtr.Zero;",
    post="      $imclassname.photon_csharp_bytes_free(native$csinput);")
    const photon_binding::Bytes &
    "native$csinput = $imclassname.NewBytes($csinput, nameof($csinput))"
%typemap(csin,
    pre="    var native$csinput = global::System.IntPtr.Zero;",
    post="      $imclassname.photon_csharp_ids_free(native$csinput);")
    const photon_binding::TokenIds &
    "native$csinput = $imclassname.NewIds($csinput, nameof($csinput))"
%typemap(csin,
    pre="    var native$csinput = global::System.IntPtr.Zero;",
    post="      $imclassname.photon_csharp_floats_free(native$csinput);")
    const photon_binding::Logprobs &
    "native$csinput = $imclassname.NewFloats($csinput, nameof($csinput))"

/* std::vector<TokenIds> <- IList<int[]> (prefill_batch: one token array per session; only Session
 * takes one, and it imports System.Collections.Generic). */
%typemap(ctype) const std::vector<photon_binding::TokenIds> & "void *"
%typemap(imtype) const std::vector<photon_binding::TokenIds> & "global::System.IntPtr"
%typemap(cstype) const std::vector<photon_binding::TokenIds> & "IList<int[]>"
%typemap(in) const std::vector<photon_binding::TokenIds> & %{ $1 = static_cast<$1_ltype>($input); %}
%typemap(csin,
    pre="    var native$csinput = $imclassname.NewIdLists($csinput, nameof($csinput));",
    post="      $imclassname.photon_csharp_id_lists_free(native$csinput);")
    const std::vector<photon_binding::TokenIds> & "native$csinput"

/* SessionOptions setters chain on the object itself: a new proxy for the returned reference would
 * not keep the options alive. */
%typemap(csout, excode=SWIGEXCODE) photon_binding::SessionOptions & {
    $imcall;$excode
    return this;
  }

/* Names: PascalCase methods and enum members; getters become properties (see cscode below). */
%define PHOTON_FUNCTION_NAMES
%rename("%(camelcase)s", %$isfunction, %$not %$isconstructor, %$not %$isdestructor) "";
%enddef
%rename(Auto) photon_binding::Mode::AUTO;
%rename(HierGen) photon_binding::Mode::HIERGEN;
%rename(RecGen) photon_binding::Mode::RECGEN;
%rename(None) photon_binding::StopReason::NONE;
%rename(Length) photon_binding::StopReason::LENGTH;
%rename(Eos) photon_binding::StopReason::EOS;
%rename(StopString) photon_binding::StopReason::STOP_STRING;
%rename(Callback) photon_binding::StopReason::CALLBACK;
%rename(Cancelled) photon_binding::StopReason::CANCELLED;
%rename(ContextFull) photon_binding::StopReason::CONTEXT_FULL;
%ignore photon_binding::Model::close;
%ignore photon_binding::Model::is_closed;
%ignore photon_binding::Session::close;
%ignore photon_binding::Session::is_closed;

%define PHOTON_CSHARP_GETTER(CLASS, GETTER, NAME)
%rename(Get ## NAME) CLASS::GETTER;
%csmethodmodifiers CLASS::GETTER "internal";
%enddef
PHOTON_CSHARP_GETTER(photon_binding::Model, device, Device)
PHOTON_CSHARP_GETTER(photon_binding::Model, precision, Precision)
PHOTON_CSHARP_GETTER(photon_binding::Model, arch, Arch)
PHOTON_CSHARP_GETTER(photon_binding::Model, levels, Levels)
PHOTON_CSHARP_GETTER(photon_binding::Model, parameter_count, ParameterCount)
PHOTON_CSHARP_GETTER(photon_binding::Model, vocab_size, VocabSize)
PHOTON_CSHARP_GETTER(photon_binding::Model, context_length, ContextLength)
PHOTON_CSHARP_GETTER(photon_binding::Model, bos, Bos)
PHOTON_CSHARP_GETTER(photon_binding::Model, eos, Eos)
PHOTON_CSHARP_GETTER(photon_binding::Model, config_json, ConfigJson)
PHOTON_CSHARP_GETTER(photon_binding::Session, mode, Mode)
PHOTON_CSHARP_GETTER(photon_binding::Session, kv_type, KvType)
PHOTON_CSHARP_GETTER(photon_binding::Session, stop_reason, StopReason)
PHOTON_CSHARP_GETTER(photon_binding::Session, position, Position)

/* Scoring with alternatives: Model.ScoreTop gives ScoredToken lists made from the native result
 * (TopScores, disposed at once). */
%typemap(csclassmodifiers) photon_binding::TopScores "internal class"
%rename(GetTopScores) photon_binding::Model::score_top;
%rename(GetTopScoresWithStride) photon_binding::Model::score_top_with_stride;
%csmethodmodifiers photon_binding::Model::score_top "internal";
%csmethodmodifiers photon_binding::Model::score_top_with_stride "internal";

%typemap(csimports) photon_binding::Model %{
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
%}
%typemap(cscode) photon_binding::Model %{
  // "cpu" or "cuda:N": where the model runs.
  public string Device => GetDevice();
  // "exact", "bf16" or "int8": how the model's products compute.
  public string Precision => GetPrecision();
  public string Arch => GetArch();
  public int Levels => GetLevels();
  public ulong ParameterCount => GetParameterCount();
  public int VocabSize => GetVocabSize();
  public int ContextLength => GetContextLength();
  public int Bos => GetBos();
  public int Eos => GetEos();
  public string ConfigJson => GetConfigJson();

  /// <summary>Teacher-forced scoring with alternatives: a ScoredToken per token, with the
  /// log-probability Score gives it and its position's k most likely ids and their
  /// log-probabilities (1 &lt;= k &lt;= the vocabulary; the first token has none). Longer than the
  /// context: in sliding windows half a context apart.</summary>
  public IReadOnlyList<ScoredToken> ScoreTop(int[] tokens, int k) =>
      ScoredToken.Of(GetTopScores(tokens, k));

  /// <summary>As ScoreTop, with the sliding windows stride tokens apart (1 &lt;= stride &lt; the
  /// context; 0: half the context).</summary>
  public IReadOnlyList<ScoredToken> ScoreTopWithStride(int[] tokens, int k, int stride) =>
      ScoredToken.Of(GetTopScoresWithStride(tokens, k, stride));
%}

/* The callback and pull primitives are reached through Session's C# API: Generate with a
 * Func<Token, bool> and the Tokens enumerable. */
%typemap(csclassmodifiers) photon_binding::TokenListener "internal class"
%typemap(csclassmodifiers) photon_binding::BatchListener "internal class"
%typemap(csclassmodifiers) photon_binding::FinishListener "internal class"
%typemap(csclassmodifiers) std::vector<photon_binding::Session *> "internal class"
%csmethodmodifiers photon_binding::Session::generate(int, TokenListener &) "internal";
%csmethodmodifiers photon_binding::Session::generate_batch "internal";
%csmethodmodifiers photon_binding::Session::prefill_batch "internal";
%csmethodmodifiers photon_binding::Session::next_token "internal";
%csmethodmodifiers photon_binding::Session::last_piece "internal";
%csmethodmodifiers photon_binding::Session::last_logprob "internal";
%csmethodmodifiers photon_binding::Session::last_top_tokens "internal";
%csmethodmodifiers photon_binding::Session::last_top_logprobs "internal";
%csmethodmodifiers photon_binding::TokenListener::top_tokens "internal";
%csmethodmodifiers photon_binding::TokenListener::top_logprobs "internal";
%csmethodmodifiers photon_binding::BatchListener::top_tokens "internal";
%csmethodmodifiers photon_binding::BatchListener::top_logprobs "internal";

%typemap(csimports) photon_binding::Session %{
using System;
using System.Collections.Generic;
using System.Runtime.ExceptionServices;
%}
%typemap(cscode) photon_binding::Session %{
  public Mode Mode => GetMode();
  // "f32", "bf16" or "f16": the storage of the KV caches (SessionOptions.SetKvType; a restored
  // session keeps its saved type).
  public string KvType => GetKvType();
  public StopReason StopReason => GetStopReason();
  public int Position => GetPosition();

  /// <summary>Generates up to maxTokens tokens, passing each to onToken; returns how many were
  /// delivered. onToken returns false to stop; an exception it throws stops generation and is
  /// rethrown here.</summary>
  public int Generate(int maxTokens, Func<Token, bool> onToken) {
    if (onToken == null) throw new ArgumentNullException(nameof(onToken));
    using (var bridge = new TokenBridge(onToken)) {
      int generated = Generate(maxTokens, bridge);
      bridge.Error?.Throw();
      return generated;
    }
  }

  /// <summary>Advances sessions of one model together, each by up to maxTokens tokens, with their
  /// matrix products batched; each produces exactly the tokens Generate would have. onToken (may
  /// be null) receives each token with its session's index in the list and returns false to stop
  /// that session; an exception it throws stops them all and is rethrown here. Returns how many
  /// tokens each session delivered.</summary>
  public static int[] GenerateBatch(IList<Session> sessions, int maxTokens,
                                    Func<int, Token, bool> onToken = null) {
    if (sessions == null) throw new ArgumentNullException(nameof(sessions));
    using (var vector = new SessionVector(sessions)) {
      if (onToken == null) return GenerateBatch(vector, maxTokens);
      using (var bridge = new BatchBridge(onToken)) {
        int[] generated = GenerateBatch(vector, maxTokens, bridge);
        bridge.Error?.Throw();
        return generated;
      }
    }
  }

  /// <summary>Consumes tokens[i] into sessions[i], for sessions of one model, with the prompts of
  /// all of them sharing each matrix product; each session ends as Prefill(tokens[i]) would leave
  /// it. Every session's tokens are checked first: a bad token or a full context throws
  /// PhotonException and leaves all sessions unchanged.</summary>
  public static void PrefillBatch(IList<Session> sessions, IList<int[]> tokens) {
    if (sessions == null) throw new ArgumentNullException(nameof(sessions));
    using (var vector = new SessionVector(sessions)) {
      PrefillBatch(vector, tokens);
    }
  }

  /// <summary>The next tokens (at most maxTokens), pulled one at a time as the enumeration
  /// advances.</summary>
  public IEnumerable<Token> Tokens(int maxTokens) {
    for (int i = 0; i < maxTokens; ++i) {
      int id = NextToken();
      if (id < 0) yield break;
      yield return new Token(id, LastPiece(), LastLogprob(),
                             TopLogprob.Of(LastTopTokens(), LastTopLogprobs));
    }
  }

  // Managed exceptions must not unwind through native frames: keep one and stop generation.
  sealed class TokenBridge : TokenListener {
    readonly Func<Token, bool> onToken;
    internal ExceptionDispatchInfo Error;

    internal TokenBridge(Func<Token, bool> onToken) {
      this.onToken = onToken;
    }

    public override bool OnToken(int token, string piece, float logprob) {
      try {
        return onToken(
            new Token(token, piece, logprob, TopLogprob.Of(TopTokens(), TopLogprobs)));
      } catch (Exception e) {
        Error = ExceptionDispatchInfo.Capture(e);
        return false;
      }
    }
  }

  sealed class BatchBridge : BatchListener {
    readonly Func<int, Token, bool> onToken;
    internal ExceptionDispatchInfo Error;

    internal BatchBridge(Func<int, Token, bool> onToken) {
      this.onToken = onToken;
    }

    public override bool OnToken(int sessionIndex, int token, string piece, float logprob) {
      try {
        return onToken(sessionIndex, new Token(token, piece, logprob,
                                               TopLogprob.Of(TopTokens(), TopLogprobs)));
      } catch (Exception e) {
        Error = ExceptionDispatchInfo.Capture(e);
        return false;
      }
    }
  }
%}

%include "photon_csharp_engine.i"

%include "../photon.i"
