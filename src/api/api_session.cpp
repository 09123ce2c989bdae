// photon_session_*: options, prefill, streaming generation, cancellation and introspection.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "api/api_internal.h"
#include "engine/decode.h"

using photon::api::copy_out;
using photon::api::guard;
using photon::api::require;

namespace {

void check_range(bool ok, const char* function, const std::string& what) {
  if (!ok) photon::fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(function) + ": " + what);
}

// Arguments of a decoding call: present, of one model, each once.
void check_sessions(std::span<photon_session* const> sessions, const char* function) {
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (!sessions[i])
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT,
                   std::string(function) + ": session " + std::to_string(i) + " is NULL");
    if (sessions[i]->owner != sessions[0]->owner)
      photon::fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(function) + ": session " +
                                                    std::to_string(i) +
                                                    " belongs to another model than session 0");
    for (size_t j = 0; j < i; ++j)
      if (sessions[j] == sessions[i])
        photon::fail(PHOTON_ERR_INVALID_ARGUMENT,
                     std::string(function) + ": session " + std::to_string(i) + " appears twice");
  }
}

}  // namespace

extern "C" {

photon_status photon_session_options_create(photon_session_options** out) {
  return guard([&] {
    require(out, "photon_session_options_create", "out is NULL");
    *out = new photon_session_options();
  });
}

void photon_session_options_free(photon_session_options* options) {
  delete options;
}

photon_status photon_session_options_set_mode(photon_session_options* o, photon_mode mode) {
  return guard([&] {
    require(o, "photon_session_options_set_mode", "options is NULL");
    const int value = photon::api::enum_value(mode);
    check_range(
        value == PHOTON_MODE_AUTO || value == PHOTON_MODE_HIERGEN || value == PHOTON_MODE_RECGEN,
        "photon_session_options_set_mode", "unknown mode " + std::to_string(value));
    o->mode = mode;
  });
}

photon_status photon_session_options_set_context_length(photon_session_options* o, int32_t n) {
  return guard([&] {
    require(o, "photon_session_options_set_context_length", "options is NULL");
    check_range(n >= 0, "photon_session_options_set_context_length",
                "context_length must be >= 0, got " + std::to_string(n));
    o->context_length = n;
  });
}

photon_status photon_session_options_set_kv_type(photon_session_options* o, photon_dtype kv_type) {
  return guard([&] {
    require(o, "photon_session_options_set_kv_type", "options is NULL");
    const int value = photon::api::enum_value(kv_type);
    check_range(
        value == PHOTON_DTYPE_F32 || value == PHOTON_DTYPE_F16 || value == PHOTON_DTYPE_BF16,
        "photon_session_options_set_kv_type",
        "unknown kv_type " + std::to_string(value) +
            " (PHOTON_DTYPE_F32, PHOTON_DTYPE_F16 or PHOTON_DTYPE_BF16)");
    o->kv_type = static_cast<photon::DType>(value);
  });
}

photon_status photon_session_options_set_seed(photon_session_options* o, uint64_t seed) {
  return guard([&] {
    require(o, "photon_session_options_set_seed", "options is NULL");
    o->sampler.seed = seed;
  });
}

photon_status photon_session_options_set_temperature(photon_session_options* o, float t) {
  return guard([&] {
    require(o, "photon_session_options_set_temperature", "options is NULL");
    check_range(std::isfinite(t) && t >= 0.0f, "photon_session_options_set_temperature",
                "temperature must be finite and >= 0, got " + std::to_string(t));
    o->sampler.temperature = t;
  });
}

photon_status photon_session_options_set_top_k(photon_session_options* o, int32_t k) {
  return guard([&] {
    require(o, "photon_session_options_set_top_k", "options is NULL");
    check_range(k >= 0, "photon_session_options_set_top_k",
                "top_k must be >= 0, got " + std::to_string(k));
    o->sampler.top_k = k;
  });
}

photon_status photon_session_options_set_top_p(photon_session_options* o, float p) {
  return guard([&] {
    require(o, "photon_session_options_set_top_p", "options is NULL");
    check_range(p > 0.0f && p <= 1.0f, "photon_session_options_set_top_p",
                "top_p must be in (0, 1], got " + std::to_string(p));
    o->sampler.top_p = p;
  });
}

photon_status photon_session_options_set_min_p(photon_session_options* o, float p) {
  return guard([&] {
    require(o, "photon_session_options_set_min_p", "options is NULL");
    check_range(p >= 0.0f && p < 1.0f, "photon_session_options_set_min_p",
                "min_p must be in [0, 1), got " + std::to_string(p));
    o->sampler.min_p = p;
  });
}

photon_status photon_session_options_set_repetition_penalty(photon_session_options* o,
                                                            float penalty, int32_t last_n) {
  return guard([&] {
    require(o, "photon_session_options_set_repetition_penalty", "options is NULL");
    check_range(std::isfinite(penalty) && penalty >= 1.0f,
                "photon_session_options_set_repetition_penalty",
                "penalty must be finite and >= 1, got " + std::to_string(penalty));
    check_range(last_n >= 0, "photon_session_options_set_repetition_penalty",
                "last_n must be >= 0, got " + std::to_string(last_n));
    o->sampler.repetition_penalty = penalty;
    o->sampler.repetition_last_n = last_n;
  });
}

photon_status photon_session_options_set_presence_penalty(photon_session_options* o,
                                                          float presence) {
  return guard([&] {
    require(o, "photon_session_options_set_presence_penalty", "options is NULL");
    check_range(std::isfinite(presence), "photon_session_options_set_presence_penalty",
                "presence must be finite, got " + std::to_string(presence));
    o->sampler.presence_penalty = presence;
  });
}

photon_status photon_session_options_set_frequency_penalty(photon_session_options* o,
                                                           float frequency) {
  return guard([&] {
    require(o, "photon_session_options_set_frequency_penalty", "options is NULL");
    check_range(std::isfinite(frequency), "photon_session_options_set_frequency_penalty",
                "frequency must be finite, got " + std::to_string(frequency));
    o->sampler.frequency_penalty = frequency;
  });
}

photon_status photon_session_options_set_logit_bias(photon_session_options* o,
                                                    const int32_t* tokens, const float* biases,
                                                    size_t count) {
  constexpr const char* kWho = "photon_session_options_set_logit_bias";
  return guard([&] {
    require(o, kWho, "options is NULL");
    require(count == 0 || (tokens && biases), kWho, "tokens or biases is NULL");
    std::vector<photon::LogitBias> entries(count);
    for (size_t i = 0; i < count; ++i) {
      check_range(
          tokens[i] >= 0, kWho,
          "tokens[" + std::to_string(i) + "] is " + std::to_string(tokens[i]) + ", not a token id");
      check_range(
          std::isfinite(biases[i]), kWho,
          "biases[" + std::to_string(i) + "] must be finite, got " + std::to_string(biases[i]));
      entries[i] = {tokens[i], biases[i]};
    }
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.token < b.token; });
    for (size_t i = 1; i < count; ++i)
      check_range(entries[i].token != entries[i - 1].token, kWho,
                  "token " + std::to_string(entries[i].token) + " is given more than once");
    o->sampler.logit_bias = std::move(entries);
  });
}

photon_status photon_session_options_set_top_logprobs(photon_session_options* o, int32_t k) {
  return guard([&] {
    require(o, "photon_session_options_set_top_logprobs", "options is NULL");
    check_range(
        k >= 0 && k <= photon::kMaxTopLogprobs, "photon_session_options_set_top_logprobs",
        "k must be 0 to " + std::to_string(photon::kMaxTopLogprobs) + ", got " + std::to_string(k));
    o->sampler.top_logprobs = k;
  });
}

photon_status photon_session_options_set_ignore_eos(photon_session_options* o, int ignore_eos) {
  return guard([&] {
    require(o, "photon_session_options_set_ignore_eos", "options is NULL");
    o->sampler.ignore_eos = ignore_eos != 0;
  });
}

photon_status photon_session_options_add_stop_string(photon_session_options* o, const char* stop) {
  return guard([&] {
    require(o, "photon_session_options_add_stop_string", "options is NULL");
    require(stop && *stop, "photon_session_options_add_stop_string", "stop is NULL or empty");
    const size_t length = std::strlen(stop);
    check_range(length <= photon::Stream::kMaxStopString, "photon_session_options_add_stop_string",
                "stop is " + std::to_string(length) + " bytes long, more than the " +
                    std::to_string(photon::Stream::kMaxStopString) + " a stop string may have");
    o->sampler.stop_strings.emplace_back(stop);
  });
}

photon_status photon_session_options_set_context_shift(photon_session_options* o,
                                                       int context_shift) {
  return guard([&] {
    require(o, "photon_session_options_set_context_shift", "options is NULL");
    o->context_shift = context_shift != 0;
  });
}

photon_status photon_session_create(const photon_model* model,
                                    const photon_session_options* options, photon_session** out) {
  return guard([&] {
    require(model, "photon_session_create", "model is NULL");
    require(out, "photon_session_create", "out is NULL");
    const photon_session_options defaults;
    const photon_session_options& o = options ? *options : defaults;
    const photon::serving::SessionSettings s =
        photon::api::session_settings(*model, o, "photon_session_create");
    auto handle = std::make_unique<photon_session>();
    handle->owner = model;
    handle->session =
        photon::Session::create(*model->model, s.mode, s.context, s.sampler, s.kv_type);
    handle->session->reserve_context();
    handle->session->context_shift = s.context_shift;
    *out = handle.release();
  });
}

void photon_session_free(photon_session* session) {
  delete session;
}

photon_mode photon_session_mode(const photon_session* session) {
  if (!session) return PHOTON_MODE_AUTO;
  switch (session->session->mode) {
    case photon::Mode::RecGen: return PHOTON_MODE_RECGEN;
    case photon::Mode::HierGen: return PHOTON_MODE_HIERGEN;
    case photon::Mode::Vanilla: return PHOTON_MODE_HIERGEN;
  }
  return PHOTON_MODE_AUTO;
}

photon_dtype photon_session_kv_type(const photon_session* session) {
  return session ? static_cast<photon_dtype>(session->session->kv_type) : PHOTON_DTYPE_F32;
}

photon_status photon_session_prefill(photon_session* session, const int32_t* tokens,
                                     size_t n_tokens) {
  return guard([&] {
    require(session, "photon_session_prefill", "session is NULL");
    require(tokens || n_tokens == 0, "photon_session_prefill", "tokens is NULL");
    session->session->prefill({tokens, n_tokens}, "photon_session_prefill");
  });
}

photon_status photon_session_prefill_logprobs(photon_session* session, const int32_t* tokens,
                                              size_t n_tokens, float* logprobs) {
  return guard([&] {
    const char* function = "photon_session_prefill_logprobs";
    require(session, function, "session is NULL");
    require(tokens || n_tokens == 0, function, "tokens is NULL");
    require(logprobs || n_tokens == 0, function, "logprobs is NULL");
    session->session->prefill({tokens, n_tokens}, function, logprobs);
  });
}

photon_status photon_session_prefill_batch(photon_session* const* sessions, size_t n_sessions,
                                           const int32_t* const* tokens, const size_t* n_tokens) {
  return guard([&] {
    const char* function = "photon_session_prefill_batch";
    require(sessions || n_sessions == 0, function, "sessions is NULL");
    require(tokens || n_sessions == 0, function, "tokens is NULL");
    require(n_tokens || n_sessions == 0, function, "n_tokens is NULL");
    check_sessions({sessions, n_sessions}, function);
    std::vector<photon::Session*> engine_sessions;
    std::vector<std::span<const int32_t>> spans;
    for (size_t i = 0; i < n_sessions; ++i) {
      if (!tokens[i] && n_tokens[i] > 0)
        photon::fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(function) + ": tokens of session " +
                                                      std::to_string(i) + " is NULL");
      engine_sessions.push_back(sessions[i]->session.get());
      spans.emplace_back(tokens[i], n_tokens[i]);
    }
    photon::prefill_batch(engine_sessions, spans, function);
  });
}

photon_status photon_session_generate(photon_session* session, int32_t max_tokens,
                                      photon_token_callback callback, void* user_data,
                                      int32_t* n_generated) {
  return guard([&] {
    require(session, "photon_session_generate", "session is NULL");
    require(max_tokens >= 0, "photon_session_generate", "max_tokens is negative");
    photon::TokenSink sink;
    if (callback)
      sink = [&](const photon::DeliveredToken& t) {
        photon::api::set_last_top(t.top);
        return callback(user_data, t.token, t.piece.data(), t.piece.size(), t.logprob) == 0;
      };
    photon::Session* s = session->session.get();
    const std::vector<int32_t> n =
        photon::generate({&s, 1}, max_tokens, {&sink, 1}, "photon_session_generate", false);
    if (n_generated) *n_generated = n[0];
  });
}

photon_status photon_session_generate_batch(photon_session* const* sessions, size_t n_sessions,
                                            int32_t max_tokens, photon_batch_callback callback,
                                            void* user_data, int32_t* n_generated) {
  return guard([&] {
    const char* function = "photon_session_generate_batch";
    require(sessions || n_sessions == 0, function, "sessions is NULL");
    require(max_tokens >= 0, function, "max_tokens is negative");
    check_sessions({sessions, n_sessions}, function);
    std::vector<photon::Session*> engine_sessions;
    std::vector<photon::TokenSink> sinks(n_sessions);
    for (size_t i = 0; i < n_sessions; ++i) {
      engine_sessions.push_back(sessions[i]->session.get());
      if (callback)
        sinks[i] = [&, i](const photon::DeliveredToken& t) {
          photon::api::set_last_top(t.top);
          return callback(user_data, i, t.token, t.piece.data(), t.piece.size(), t.logprob) == 0;
        };
    }
    const std::vector<int32_t> n =
        photon::generate(engine_sessions, max_tokens, sinks, function, true);
    if (n_generated)
      for (size_t i = 0; i < n.size(); ++i) n_generated[i] = n[i];
  });
}

photon_status photon_session_next_token(photon_session* session, int32_t* token, char* piece,
                                        size_t piece_capacity, size_t* piece_len, float* logprob) {
  return guard([&] {
    require(session, "photon_session_next_token", "session is NULL");
    require(token, "photon_session_next_token", "token is NULL");
    require(piece_len, "photon_session_next_token", "piece_len is NULL");
    photon::Session& s = *session->session;
    const photon::Stream::Held* next = photon::next_token(s, "photon_session_next_token");
    if (!next) {  // stopped
      *token = -1;
      *piece_len = 0;
      if (piece && piece_capacity > 0) piece[0] = '\0';
      return;
    }
    *piece_len = next->piece.size();
    if (piece_capacity < next->piece.size() + 1 && (piece || piece_capacity > 0))
      photon::fail(PHOTON_ERR_BUFFER_TOO_SMALL, "photon_session_next_token: the piece needs " +
                                                    std::to_string(next->piece.size() + 1) +
                                                    " bytes, the buffer holds " +
                                                    std::to_string(piece_capacity));
    if (piece) {
      next->piece.copy(piece, next->piece.size());
      piece[next->piece.size()] = '\0';
    }
    *token = next->token;
    if (logprob) *logprob = next->logprob;
    photon::api::set_last_top(next->top);
    photon::take_next(s);
  });
}

photon_status photon_session_get_options(const photon_session* session,
                                         photon_session_options** out) {
  return guard([&] {
    require(session, "photon_session_get_options", "session is NULL");
    require(out, "photon_session_get_options", "out is NULL");
    auto o = std::make_unique<photon_session_options>();
    o->mode = photon_session_mode(session);
    o->context_length = session->session->context;
    o->kv_type = session->session->kv_type;
    o->sampler = session->session->sampler;
    o->context_shift = session->session->context_shift;
    *out = o.release();
  });
}

photon_status photon_session_set_sampler(photon_session* session,
                                         const photon_session_options* options) {
  return guard([&] {
    require(session, "photon_session_set_sampler", "session is NULL");
    require(options, "photon_session_set_sampler", "options is NULL");
    session->session->set_sampler(options->sampler, "photon_session_set_sampler");
    session->session->context_shift = options->context_shift;
  });
}

photon_stop_reason photon_session_stop_reason(const photon_session* session) {
  return session ? session->session->stream.stop_reason : PHOTON_STOP_NONE;
}

void photon_session_cancel(photon_session* session) {
  if (session) session->session->cancel_requested.store(true);
}

int32_t photon_session_position(const photon_session* session) {
  return session ? static_cast<int32_t>(session->session->history.size()) : 0;
}

photon_status photon_session_tokens(const photon_session* session, int32_t* tokens, size_t capacity,
                                    size_t* n_tokens) {
  return guard([&] {
    require(session, "photon_session_tokens", "session is NULL");
    require(n_tokens, "photon_session_tokens", "n_tokens is NULL");
    const std::vector<int32_t>& h = session->session->history;
    *n_tokens = h.size();
    copy_out("photon_session_tokens", h.data(), h.size(), tokens, capacity);
  });
}

photon_status photon_session_kv_bytes(const photon_session* session, int32_t level,
                                      uint64_t* encoder_bytes, uint64_t* window_bytes) {
  return guard([&] {
    require(session, "photon_session_kv_bytes", "session is NULL");
    const photon::KvBytes b = session->session->kv_bytes(level, "photon_session_kv_bytes");
    if (encoder_bytes) *encoder_bytes = b.encoder;
    if (window_bytes) *window_bytes = b.window;
  });
}

}  // extern "C"
