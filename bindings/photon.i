/* photon.i -- the interface every language binding is generated from (SWIG 4).
 *
 * Each language's file (java/photon_java.i, csharp/photon_csharp.i, go/internal/native/
 * native.swigcxx, python/photon_python.i) declares its %module, its typemaps for Bytes (byte
 * arrays), TokenIds (token id arrays), Logprobs (float arrays) and std::vector<TokenIds> (a
 * batch's token arrays: Go's TokenIdsVector, an array of arrays elsewhere), its exception
 * handling and its naming, defines PHOTON_CLOSED_CHECK and PHOTON_FUNCTION_NAMES, and then
 * includes this file.
 *
 * Whitelist: SWIG reads only photon_binding.hpp, a small C++ layer over include/photon.h. Its
 * classes (Model, Session, SessionOptions, TokenListener, BatchListener, the Mode / StopReason
 * enums, all in the namespace photon_binding), TopScores (Model::score_top's result, which each
 * language turns into its own list) and SessionVector (the sessions of a batch) are the whole
 * surface; nothing of photon.h is wrapped directly. The serving engine adds Engine,
 * EngineOptions, Request, RequestOptions, the RequestState enum and the RequestStats / EngineStats
 * snapshots (read-only).
 */

%{
#include "photon_binding.hpp"
%}

%include <stdint.i>
%include <std_string.i>
%include <std_vector.i>

/* The sessions of a batch. */
namespace photon_binding {
class Session;
}
%template(SessionVector) std::vector<photon_binding::Session *>;

/* The language's naming rule for photon's functions, declared here so that it does not rename
 * the std::vector methods above. */
PHOTON_FUNCTION_NAMES

/* Managed code implements the token and finish callbacks. */
%feature("director") photon_binding::TokenListener;
%feature("director") photon_binding::BatchListener;
%feature("director") photon_binding::FinishListener;

/* restore() creates the session the caller then owns. */
%newobject photon_binding::Session::restore;
%newobject photon_binding::Session::restore_file;

/* submit() and take_session() create the request and the session the caller then owns. */
%newobject photon_binding::Engine::submit;
%newobject photon_binding::Request::take_session;
/* Requests come from Engine::submit only, statistics from stats(), scores with alternatives from
 * Model::score_top. */
%nodefaultctor photon_binding::Request;
%nodefaultctor photon_binding::RequestStats;
%nodefaultctor photon_binding::EngineStats;
%nodefaultctor photon_binding::TopScores;

/* A method called on an object that was closed (its native part deleted) raises the language's
 * use-after-close error instead of dereferencing NULL. */
PHOTON_CLOSED_CHECK(photon_binding::Model, "model")
PHOTON_CLOSED_CHECK(photon_binding::Session, "session")
PHOTON_CLOSED_CHECK(photon_binding::SessionOptions, "session options")
PHOTON_CLOSED_CHECK(photon_binding::EngineOptions, "engine options")
PHOTON_CLOSED_CHECK(photon_binding::RequestOptions, "request options")
/* Engine and Request are closed through their own close(), which other threads' calls may overlap
 * (a request is typically cancelled or closed while another thread waits on it): each language's
 * close / Dispose calls it, and only the collector deletes the native object. */

/* The only variables are the fields of the statistics snapshots: read-only. */
%immutable;
%include "photon_binding.hpp"
%mutable;
