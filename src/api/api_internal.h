// The C API's handle types and the boundary guard that turns C++ errors into status codes.
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "engine/decode.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "photon.h"
#include "tokenizer/tokenizer.h"

struct photon_model {
  std::unique_ptr<photon::Model> model;
};

struct photon_load_options {
  photon_progress_callback progress = nullptr;
  void* progress_user = nullptr;
};

struct photon_session_options {
  photon_mode mode = PHOTON_MODE_AUTO;
  int32_t context_length = 0;
  photon::SamplerConfig sampler;
};

struct photon_session {
  const photon_model* owner = nullptr;
  std::unique_ptr<photon::Session> session;
  photon::SamplerConfig sampler;
  photon::DecodeState decode;
  photon_stop_reason stop_reason = PHOTON_STOP_NONE;
  // A token the pull API delivered whose text did not fit the caller's buffer: returned again.
  int32_t held_token = -1;
  float held_logprob = 0.0f;
  std::string held_piece;
  // Set when a prefill or decode failed inside the engine (e.g. out of memory in the middle of a
  // step), which may leave the caches half-updated: every later call then fails with this status.
  photon_status broken = PHOTON_OK;
};

struct photon_write_options {
  photon::DType dtype = photon::DType::F32;
  std::string tokenizer_path;
  uint64_t seed = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
  photon_progress_callback progress = nullptr;
  void* progress_user = nullptr;
};

namespace photon::api {

void set_last_error(const std::string& message);

// Runs body, mapping every exception to a status and the thread's last-error message.
template <typename Body>
photon_status guard(Body&& body) noexcept {
  try {
    body();
    return PHOTON_OK;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return PHOTON_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return PHOTON_ERR_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return PHOTON_ERR_INTERNAL;
  }
}

// The value of an enum argument from C, which may be any int: reading a value outside the enum's
// range as the enum type is undefined behaviour in C++, so its bytes are read as an int instead.
template <typename Enum>
int enum_value(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int v;
  std::memcpy(&v, &value, sizeof v);
  return v;
}

inline void require(bool ok, const char* function, const char* what) {
  if (!ok) fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(function) + ": " + what);
}

inline void require_usable(const photon_session* session, const char* function) {
  if (session->broken != PHOTON_OK)
    fail(session->broken, std::string(function) + ": an earlier call failed inside this session (" +
                              photon_status_name(session->broken) +
                              ") and left it unusable; free it");
}

// Runs body, a step that changes the sessions' caches; if it fails (other than by cancellation,
// which stops between consistent steps), the sessions are marked unusable.
template <typename Body>
void changing_sessions(std::span<photon_session* const> sessions, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (e.status() != PHOTON_ERR_CANCELLED)
      for (photon_session* s : sessions) s->broken = e.status();
    throw;
  } catch (const std::bad_alloc&) {
    for (photon_session* s : sessions) s->broken = PHOTON_ERR_OUT_OF_MEMORY;
    throw;
  } catch (...) {
    for (photon_session* s : sessions) s->broken = PHOTON_ERR_INTERNAL;
    throw;
  }
}

// Copies n items into a caller buffer, or reports the needed size with PHOTON_ERR_BUFFER_TOO_SMALL.
template <typename T>
void copy_out(const char* function, const T* src, size_t n, T* dst, size_t capacity) {
  if (capacity < n || (n > 0 && dst == nullptr))
    fail(PHOTON_ERR_BUFFER_TOO_SMALL, std::string(function) + ": the buffer holds " +
                                          std::to_string(capacity) + " but " + std::to_string(n) +
                                          " are needed");
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}

}  // namespace photon::api
