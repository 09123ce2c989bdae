// The C API's handle types and the boundary guard that turns C++ errors into status codes.
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/sampling.h"
#include "engine/model.h"
#include "engine/session.h"
#include "photon.h"
#include "serving/request.h"

struct photon_model {
  std::unique_ptr<photon::Model> model;
  std::string device;  // the backend's name, for photon_model_device
};

struct photon_load_options {
  photon_progress_callback progress = nullptr;
  void* progress_user = nullptr;
  photon::DeviceChoice device;
  int32_t threads = 0;
  bool verify = false;
};

struct photon_session_options {
  photon_mode mode = PHOTON_MODE_AUTO;
  int32_t context_length = 0;
  photon::DType kv_type = photon::DType::F32;
  photon::SamplerConfig sampler;
  bool context_shift = false;
};

struct photon_score_options {
  photon_mode mode = PHOTON_MODE_AUTO;
  size_t prompt_tokens = 1;
  int32_t stride = 0;  // of the sliding windows; 0: half the model's context
};

struct photon_session {
  const photon_model* owner = nullptr;
  std::unique_ptr<photon::Session> session;
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
// What photon_last_top_logprobs gives this thread from now on.
void set_last_top(std::span<const TokenLogprob> top);

// A session's settings from its options, resolved against the model (AUTO made concrete, context
// 0 made the model's); Error PHOTON_ERR_INVALID_ARGUMENT naming `function` for a context beyond
// the model's.
serving::SessionSettings session_settings(const photon_model& model,
                                          const photon_session_options& options,
                                          const char* function);

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
