// Version, status names, the per-thread last error and the alternatives of the last token.
#include <algorithm>
#include <string>
#include <vector>

#include "api/api_internal.h"

namespace photon::api {

namespace {
thread_local std::string last_error;
thread_local std::vector<TokenLogprob> last_top;
}  // namespace

void set_last_error(const std::string& message) {
  last_error = message;
}

void set_last_top(std::span<const TokenLogprob> top) {
  last_top.assign(top.begin(), top.end());
}

}  // namespace photon::api

extern "C" {

const char* photon_version(void) {
  return PHOTON_VERSION_STRING;
}

uint32_t photon_version_number(void) {
  return PHOTON_VERSION_NUMBER;
}

const char* photon_last_error(void) {
  return photon::api::last_error.c_str();
}

photon_status photon_last_top_logprobs(int32_t* tokens, float* logprobs, size_t capacity,
                                       size_t* n) {
  return photon::api::guard([&] {
    const char* function = "photon_last_top_logprobs";
    photon::api::require(n, function, "n is NULL");
    photon::api::require(capacity == 0 || (tokens && logprobs), function,
                         "tokens or logprobs is NULL");
    const std::vector<photon::TokenLogprob>& top = photon::api::last_top;
    *n = top.size();
    for (size_t i = 0; i < std::min(capacity, top.size()); ++i) {
      tokens[i] = top[i].token;
      logprobs[i] = top[i].logprob;
    }
  });
}

const char* photon_status_name(photon_status status) {
  switch (photon::api::enum_value(status)) {
#define PHOTON_STATUS_CASE(name) \
  case name: return #name;
    PHOTON_STATUS_CASE(PHOTON_OK)
    PHOTON_STATUS_CASE(PHOTON_ERR_INVALID_ARGUMENT)
    PHOTON_STATUS_CASE(PHOTON_ERR_OUT_OF_MEMORY)
    PHOTON_STATUS_CASE(PHOTON_ERR_IO)
    PHOTON_STATUS_CASE(PHOTON_ERR_CANCELLED)
    PHOTON_STATUS_CASE(PHOTON_ERR_BUFFER_TOO_SMALL)
    PHOTON_STATUS_CASE(PHOTON_ERR_BAD_IDENTIFIER)
    PHOTON_STATUS_CASE(PHOTON_ERR_UNSUPPORTED_VERSION)
    PHOTON_STATUS_CASE(PHOTON_ERR_TRUNCATED)
    PHOTON_STATUS_CASE(PHOTON_ERR_CORRUPT)
    PHOTON_STATUS_CASE(PHOTON_ERR_SIZE_OVERFLOW)
    PHOTON_STATUS_CASE(PHOTON_ERR_TENSOR_BOUNDS)
    PHOTON_STATUS_CASE(PHOTON_ERR_TENSOR_SHAPE)
    PHOTON_STATUS_CASE(PHOTON_ERR_TENSOR_SET)
    PHOTON_STATUS_CASE(PHOTON_ERR_BAD_CONFIG)
    PHOTON_STATUS_CASE(PHOTON_ERR_TOKENIZER)
    PHOTON_STATUS_CASE(PHOTON_ERR_BAD_TOKEN)
    PHOTON_STATUS_CASE(PHOTON_ERR_CONTEXT_FULL)
    PHOTON_STATUS_CASE(PHOTON_ERR_UNSUPPORTED)
    PHOTON_STATUS_CASE(PHOTON_ERR_WRONG_MODEL)
    PHOTON_STATUS_CASE(PHOTON_ERR_DEVICE)
    PHOTON_STATUS_CASE(PHOTON_ERR_BUSY)
    PHOTON_STATUS_CASE(PHOTON_ERR_TIMEOUT)
    PHOTON_STATUS_CASE(PHOTON_ERR_NOT_FINITE)
    PHOTON_STATUS_CASE(PHOTON_ERR_INTERNAL)
#undef PHOTON_STATUS_CASE
  }
  return "PHOTON_ERR_UNKNOWN";
}

}  // extern "C"
