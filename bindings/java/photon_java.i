/* photon_java.i -- the Java binding: package com.photon, loaded from its jar by NativeLoader. */
%module(directors="1") PhotonNative

/* Included before the typemaps below replace some of its own. */
%include <std_string.i>
/* Mode and StopReason as Java enums. */
%include <enums.swg>

%pragma(java) moduleclassmodifiers="final class"
%pragma(java) jniclassclassmodifiers="final class"
%pragma(java) jniclasscode=%{
  static {
    NativeLoader.load();
  }
%}

%{
#include "photon_binding.hpp"

/* Java strings cross as real UTF-8 (String.getBytes / new String(bytes, UTF_8)): JNI's own
 * "modified UTF-8" differs for NUL and for characters outside the BMP. */
struct PhotonJavaStrings {
  jclass string_class;  /* global references, made once */
  jobject utf8;
  jmethodID from_bytes;
  jmethodID to_bytes;
};

/* nullptr, with a Java exception pending, if the JVM lacks what every JVM has. */
static const PhotonJavaStrings *photon_java_strings(JNIEnv *jenv) {
  static const PhotonJavaStrings strings = [jenv] {
    PhotonJavaStrings found{};
    jclass string_class = jenv->FindClass("java/lang/String");
    jclass charsets = string_class ? jenv->FindClass("java/nio/charset/StandardCharsets") : nullptr;
    jfieldID utf8 = nullptr;
    if (charsets) utf8 = jenv->GetStaticFieldID(charsets, "UTF_8", "Ljava/nio/charset/Charset;");
    if (utf8) {
      found.from_bytes =
          jenv->GetMethodID(string_class, "<init>", "([BLjava/nio/charset/Charset;)V");
    }
    if (found.from_bytes) {
      found.to_bytes =
          jenv->GetMethodID(string_class, "getBytes", "(Ljava/nio/charset/Charset;)[B");
    }
    if (found.to_bytes) {
      jobject charset = jenv->GetStaticObjectField(charsets, utf8);
      found.string_class = static_cast<jclass>(jenv->NewGlobalRef(string_class));
      found.utf8 = jenv->NewGlobalRef(charset);
      jenv->DeleteLocalRef(charset);
    }
    jenv->DeleteLocalRef(charsets);
    jenv->DeleteLocalRef(string_class);
    return found;
  }();
  return strings.utf8 ? &strings : nullptr;
}

static jstring photon_java_string(JNIEnv *jenv, const std::string &text) {
  const PhotonJavaStrings *strings = photon_java_strings(jenv);
  jbyteArray bytes = strings ? jenv->NewByteArray(static_cast<jsize>(text.size())) : nullptr;
  if (!bytes) return nullptr;
  jenv->SetByteArrayRegion(bytes, 0, static_cast<jsize>(text.size()),
                           reinterpret_cast<const jbyte *>(text.data()));
  jobject result =
      jenv->NewObject(strings->string_class, strings->from_bytes, bytes, strings->utf8);
  jenv->DeleteLocalRef(bytes);
  return static_cast<jstring>(result);
}

/* False (with a Java exception pending) on failure. */
static bool photon_java_utf8(JNIEnv *jenv, jstring text, std::string &out) {
  if (!text) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "null string");
    return false;
  }
  const PhotonJavaStrings *strings = photon_java_strings(jenv);
  jbyteArray bytes = strings ? static_cast<jbyteArray>(
                                   jenv->CallObjectMethod(text, strings->to_bytes, strings->utf8))
                             : nullptr;
  if (!bytes) return false;
  out.resize(static_cast<size_t>(jenv->GetArrayLength(bytes)));
  jenv->GetByteArrayRegion(bytes, 0, static_cast<jsize>(out.size()),
                           reinterpret_cast<jbyte *>(&out[0]));
  jenv->DeleteLocalRef(bytes);
  return true;
}

/* Raises com.photon.PhotonException(status, statusName, message), or its subclass
 * BusyException for PHOTON_ERR_BUSY. */
static void photon_java_throw(JNIEnv *jenv, const photon_binding::PhotonError &error) {
  jclass cls = jenv->FindClass(error.status() == PHOTON_ERR_BUSY ? "com/photon/BusyException"
                                                                 : "com/photon/PhotonException");
  if (!cls) return;  /* NoClassDefFoundError is pending */
  jmethodID init = jenv->GetMethodID(cls, "<init>", "(ILjava/lang/String;Ljava/lang/String;)V");
  jstring name = photon_java_string(jenv, error.status_name());
  jstring message = photon_java_string(jenv, error.what());
  if (init && name && message) {
    jobject exception =
        jenv->NewObject(cls, init, static_cast<jint>(error.status()), name, message);
    if (exception) jenv->Throw(static_cast<jthrowable>(exception));
  }
}
%}

/* Errors: PhotonException for a failed call; an exception thrown by a TokenCallback reaches the
 * caller of generate() as itself. */
%exception {
  try {
    $action
  } catch (const photon_binding::PhotonError &e) {
    photon_java_throw(jenv, e);
    return $null;
  } catch (Swig::DirectorException &e) {
    e.throwException(jenv);
    return $null;
  } catch (const std::exception &e) {
    SWIG_JavaThrowException(jenv, SWIG_JavaRuntimeException, e.what());
    return $null;
  }
}

%define PHOTON_CLOSED_CHECK(TYPE, WHAT)
%typemap(check) TYPE *self %{
  if (!$1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalStateException, "photon: the " WHAT " is closed");
    return $null;
  }
%}
/* close() releases the native object now (AutoCloseable); the finalizer is the fallback.
 * SWIG's delete() becomes private, so close() is the one way to release. */
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

  /** Releases the native object; later calls throw IllegalStateException. Idempotent. */
  @Override
  public void close() {
    delete();
  }
%}
%enddef

/* std::string as UTF-8 both ways. */
%typemap(in) std::string %{
  if (!photon_java_utf8(jenv, $input, $1)) return $null;
%}
%typemap(in) const std::string & ($*1_ltype text) %{
  if (!photon_java_utf8(jenv, $input, text)) return $null;
  $1 = &text;
%}
%typemap(out) std::string %{ $result = photon_java_string(jenv, $1); %}
%typemap(directorin, descriptor="Ljava/lang/String;") const std::string & %{
  $input = photon_java_string(jenv, $1);
  Swig::LocalRefGuard $1_refguard(jenv, $input);
%}

/* 64-bit unsigned values (seed, parameter count) as long: Java has no unsigned types. */
%apply long long { std::uint64_t };

/* photon_binding::Bytes <-> byte[], TokenIds <-> int[], Logprobs -> float[]. */
%define PHOTON_JAVA_ARRAY(CTYPE, JNITYPE, JTYPE, ELEMENT, NEW, GET, SET)
%typemap(jni) CTYPE, const CTYPE & "JNITYPE"
%typemap(jtype) CTYPE, const CTYPE & "JTYPE"
%typemap(jstype) CTYPE, const CTYPE & "JTYPE"
%typemap(javain) const CTYPE & "$javainput"
%typemap(javaout) CTYPE {
    return $jnicall;
  }
%typemap(in) const CTYPE & ($*1_ltype values) %{
  if (!$input) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "null array");
    return $null;
  }
  values.resize(static_cast<size_t>(jenv->GetArrayLength($input)));
  jenv->GET($input, 0, static_cast<jsize>(values.size()),
            reinterpret_cast<ELEMENT *>(values.data()));
  $1 = &values;
%}
%typemap(out) CTYPE %{
  $result = jenv->NEW(static_cast<jsize>($1.size()));
  if ($result) {
    jenv->SET($result, 0, static_cast<jsize>($1.size()),
              reinterpret_cast<const ELEMENT *>($1.data()));
  }
%}
%enddef
PHOTON_JAVA_ARRAY(photon_binding::Bytes, jbyteArray, byte[], jbyte, NewByteArray,
                  GetByteArrayRegion, SetByteArrayRegion)
PHOTON_JAVA_ARRAY(photon_binding::TokenIds, jintArray, int[], jint, NewIntArray, GetIntArrayRegion,
                  SetIntArrayRegion)
PHOTON_JAVA_ARRAY(photon_binding::Logprobs, jfloatArray, float[], jfloat, NewFloatArray,
                  GetFloatArrayRegion, SetFloatArrayRegion)

/* std::vector<photon_binding::TokenIds> <- int[][] (prefill_batch: one token array per session). */
%typemap(jni) const std::vector<photon_binding::TokenIds> & "jobjectArray"
%typemap(jtype) const std::vector<photon_binding::TokenIds> & "int[][]"
%typemap(jstype) const std::vector<photon_binding::TokenIds> & "int[][]"
%typemap(javain) const std::vector<photon_binding::TokenIds> & "$javainput"
%typemap(in) const std::vector<photon_binding::TokenIds> &
    (std::vector<photon_binding::TokenIds> lists) %{
  if (!$input) {
    SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "null array");
    return $null;
  }
  lists.resize(static_cast<size_t>(jenv->GetArrayLength($input)));
  for (size_t i = 0; i < lists.size(); ++i) {
    jintArray ids =
        static_cast<jintArray>(jenv->GetObjectArrayElement($input, static_cast<jsize>(i)));
    if (!ids) {
      SWIG_JavaThrowException(jenv, SWIG_JavaNullPointerException, "null token array");
      return $null;
    }
    lists[i].resize(static_cast<size_t>(jenv->GetArrayLength(ids)));
    jenv->GetIntArrayRegion(ids, 0, static_cast<jsize>(lists[i].size()),
                            reinterpret_cast<jint *>(lists[i].data()));
    jenv->DeleteLocalRef(ids);
  }
  $1 = &lists;
%}

/* SessionOptions setters chain on the object itself: a new proxy for the returned reference would
 * not keep the options alive. */
%typemap(javaout) photon_binding::SessionOptions & {
    $jnicall;
    return this;
  }

/* Names: lowerCamelCase methods, UPPER_CASE enum constants (as declared). */
%define PHOTON_FUNCTION_NAMES
%rename("%(lowercamelcase)s", %$isfunction, %$not %$isconstructor, %$not %$isdestructor) "";
%enddef
%ignore photon_binding::Model::close;
%ignore photon_binding::Model::is_closed;
%ignore photon_binding::Session::close;
%ignore photon_binding::Session::is_closed;

/* Scoring with alternatives: Model.scoreTop gives ScoredToken lists made from the native result
 * (TopScores, freed at once). */
%typemap(javaclassmodifiers) photon_binding::TopScores "final class"
%rename(topScores) photon_binding::Model::score_top;
%rename(topScoresWithStride) photon_binding::Model::score_top_with_stride;
%javamethodmodifiers photon_binding::Model::score_top "";
%javamethodmodifiers photon_binding::Model::score_top_with_stride "";
%typemap(javaimports) photon_binding::Model %{
import java.util.List;
%}
%typemap(javacode) photon_binding::Model %{
  /**
   * Teacher-forced scoring with alternatives: a ScoredToken per token, with the log-probability
   * score() gives it and its position's k most likely ids and their log-probabilities
   * (1 <= k <= the vocabulary; the first token has none). Longer than the context: in sliding
   * windows half a context apart.
   */
  public List<ScoredToken> scoreTop(int[] tokens, int k) {
    return ScoredToken.listOf(topScores(tokens, k));
  }

  /**
   * As scoreTop, with the sliding windows stride tokens apart (1 <= stride < the context; 0: half
   * the context).
   */
  public List<ScoredToken> scoreTopWithStride(int[] tokens, int k, int stride) {
    return ScoredToken.listOf(topScoresWithStride(tokens, k, stride));
  }
%}

/* The callback and pull primitives are reached through Session's Java API (generate with a
 * TokenCallback, tokens(), stream()). */
%typemap(javaclassmodifiers) photon_binding::TokenListener "abstract class"
%typemap(javaclassmodifiers) photon_binding::BatchListener "abstract class"
%typemap(javaclassmodifiers) photon_binding::FinishListener "abstract class"
%typemap(javaclassmodifiers) std::vector<photon_binding::Session *> "final class"
%javamethodmodifiers photon_binding::Session::generate(int, TokenListener &) "";
%javamethodmodifiers photon_binding::Session::generate_batch "";
%javamethodmodifiers photon_binding::Session::prefill_batch "";
%javamethodmodifiers photon_binding::Session::next_token "";
%javamethodmodifiers photon_binding::Session::last_piece "";
%javamethodmodifiers photon_binding::Session::last_logprob "";
%javamethodmodifiers photon_binding::Session::last_top_tokens "";
%javamethodmodifiers photon_binding::Session::last_top_logprobs "";
%javamethodmodifiers photon_binding::TokenListener::top_tokens "";
%javamethodmodifiers photon_binding::TokenListener::top_logprobs "";
%javamethodmodifiers photon_binding::BatchListener::top_tokens "";
%javamethodmodifiers photon_binding::BatchListener::top_logprobs "";

%typemap(javaimports) photon_binding::Session %{
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
%}
%typemap(javacode) photon_binding::Session %{
  /**
   * Generates up to maxTokens tokens, passing each to callback; returns how many were delivered.
   * The callback returns false to stop; an exception it throws stops generation and is rethrown
   * here.
   */
  public int generate(int maxTokens, TokenCallback callback) {
    TokenListener listener = new TokenListener() {
      @Override
      public boolean onToken(int token, String piece, float logprob) {
        return callback.onToken(new Token(
            token, piece, logprob, TopLogprob.listOf(topTokens(), this::topLogprobs)));
      }
    };
    try {
      return generate(maxTokens, listener);
    } finally {
      listener.delete();
    }
  }

  /**
   * Advances sessions of one model together, each by up to maxTokens tokens, with their matrix
   * products batched; each produces exactly the tokens generate() would have. callback (may be
   * null) receives each token with its session's index in the list and returns false to stop
   * that session; an exception it throws stops them all and is rethrown here. Returns how many
   * tokens each session delivered.
   */
  public static int[] generateBatch(List<Session> sessions, int maxTokens, BatchCallback callback) {
    SessionVector vector = new SessionVector(sessions);
    BatchListener listener = callback == null ? null : new BatchListener() {
      @Override
      public boolean onToken(int sessionIndex, int token, String piece, float logprob) {
        return callback.onToken(sessionIndex, new Token(token, piece, logprob,
            TopLogprob.listOf(topTokens(), this::topLogprobs)));
      }
    };
    try {
      return listener == null ? generateBatch(vector, maxTokens)
                              : generateBatch(vector, maxTokens, listener);
    } finally {
      if (listener != null) listener.delete();
      vector.delete();
    }
  }

  /**
   * Consumes tokens.get(i) into sessions.get(i), for sessions of one model, with the prompts of
   * all of them sharing each matrix product; each session ends as prefill(tokens.get(i)) would
   * leave it. Every session's tokens are checked first: a bad token or a full context throws
   * PhotonException and leaves all sessions unchanged.
   */
  public static void prefillBatch(List<Session> sessions, List<int[]> tokens) {
    SessionVector vector = new SessionVector(sessions);
    try {
      prefillBatch(vector, tokens.toArray(new int[0][]));
    } finally {
      vector.delete();
    }
  }

  /** The next tokens, pulled one at a time as the iteration advances (at most maxTokens). */
  public Iterable<Token> tokens(int maxTokens) {
    return () -> new Iterator<Token>() {
      private int remaining = maxTokens;
      private Token next;
      private boolean done;

      @Override
      public boolean hasNext() {
        if (next == null && !done) {
          int id = remaining > 0 ? nextToken() : -1;
          if (id < 0) {
            done = true;
          } else {
            --remaining;
            next = new Token(id, lastPiece(), lastLogprob(),
                TopLogprob.listOf(lastTopTokens(), Session.this::lastTopLogprobs));
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

  /** As tokens(maxTokens), as a sequential Stream. */
  public Stream<Token> stream(int maxTokens) {
    return StreamSupport.stream(tokens(maxTokens).spliterator(), false);
  }
%}

%include "photon_java_engine.i"

%include "../photon.i"
