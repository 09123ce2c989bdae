// photon_engine_* and photon_request_*: the serving engine (src/serving) behind the C boundary.
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "api/api_internal.h"
#include "engine/session_state.h"
#include "serving/engine.h"

using photon::api::guard;
using photon::api::require;
using photon::serving::Clock;

struct photon_engine_options {
  photon::serving::EngineOptions options;
};

struct photon_request_options {
  photon_session_options session;
  bool session_given = false;
  std::vector<int32_t> prompt;
  std::optional<std::string> prompt_text;
  bool add_bos = false;
  std::vector<uint8_t> state;
  photon_session* continued = nullptr;
  int32_t max_tokens = -1;
  photon_token_callback callback = nullptr;
  void* user_data = nullptr;
  photon_request_finish_callback finish_callback = nullptr;
  void* finish_user_data = nullptr;
};

struct photon_engine {
  const photon_model* owner = nullptr;
  std::unique_ptr<photon::serving::Engine> engine;
};

struct photon_request {
  const photon_model* owner = nullptr;
  std::shared_ptr<photon::serving::Request> request;
  // The handle of a session the request took over, given back by photon_request_take_session.
  std::unique_ptr<photon_session> shell;
};

namespace {

void check(bool ok, const char* function, const std::string& what) {
  if (!ok) photon::fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(function) + ": " + what);
}

std::optional<Clock::time_point> deadline(int32_t timeout_ms) {
  if (timeout_ms < 0) return std::nullopt;
  return Clock::now() + std::chrono::milliseconds(timeout_ms);
}

photon::serving::RequestCallback wrap(photon_token_callback callback, void* user_data) {
  if (!callback) return {};
  return [callback, user_data](const photon::DeliveredToken& t) {
    photon::api::set_last_top(t.top);
    return callback(user_data, t.token, t.piece.data(), t.piece.size(), t.logprob) == 0;
  };
}

}  // namespace

namespace photon::api {

serving::SessionSettings session_settings(const photon_model& model,
                                          const photon_session_options& o, const char* function) {
  const ModelConfig& c = model.model->config();
  serving::SessionSettings s;
  s.context = o.context_length == 0 ? c.max_seq_len : o.context_length;
  if (s.context > c.max_seq_len)
    fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(function) + ": context_length " +
                                          std::to_string(s.context) + " exceeds the model's " +
                                          std::to_string(c.max_seq_len));
  s.mode = default_mode(*model.model);
  if (o.mode == PHOTON_MODE_RECGEN)
    s.mode = Mode::RecGen;
  else if (o.mode == PHOTON_MODE_HIERGEN && c.arch == Arch::Photon)
    s.mode = Mode::HierGen;
  s.kv_type = o.kv_type;
  s.sampler = o.sampler;
  s.context_shift = o.context_shift;
  return s;
}

}  // namespace photon::api

extern "C" {

// ---- engine options ----------------------------------------------------------------------------

photon_status photon_engine_options_create(photon_engine_options** out) {
  return guard([&] {
    require(out, "photon_engine_options_create", "out is NULL");
    *out = new photon_engine_options();
  });
}

void photon_engine_options_free(photon_engine_options* options) {
  delete options;
}

photon_status photon_engine_options_set_max_running(photon_engine_options* o, int32_t n) {
  return guard([&] {
    require(o, "photon_engine_options_set_max_running", "options is NULL");
    check(n >= 1, "photon_engine_options_set_max_running",
          "max_running must be >= 1, got " + std::to_string(n));
    o->options.max_running = n;
  });
}

photon_status photon_engine_options_set_max_waiting(photon_engine_options* o, int32_t n) {
  return guard([&] {
    require(o, "photon_engine_options_set_max_waiting", "options is NULL");
    check(n >= 0, "photon_engine_options_set_max_waiting",
          "max_waiting must be >= 0, got " + std::to_string(n));
    o->options.max_waiting = n;
  });
}

photon_status photon_engine_options_set_memory_budget(photon_engine_options* o, uint64_t bytes) {
  return guard([&] {
    require(o, "photon_engine_options_set_memory_budget", "options is NULL");
    o->options.memory_budget = bytes;
  });
}

photon_status photon_engine_options_set_step_tokens(photon_engine_options* o, int32_t n) {
  return guard([&] {
    require(o, "photon_engine_options_set_step_tokens", "options is NULL");
    check(n >= 1, "photon_engine_options_set_step_tokens",
          "step_tokens must be >= 1, got " + std::to_string(n));
    o->options.step_tokens = n;
  });
}

photon_status photon_engine_options_set_prefix_cache(photon_engine_options* o, uint64_t bytes) {
  return guard([&] {
    require(o, "photon_engine_options_set_prefix_cache", "options is NULL");
    o->options.prefix_cache = bytes;
  });
}

// ---- the engine --------------------------------------------------------------------------------

photon_status photon_engine_create(const photon_model* model, const photon_engine_options* options,
                                   photon_engine** out) {
  return guard([&] {
    require(model, "photon_engine_create", "model is NULL");
    require(out, "photon_engine_create", "out is NULL");
    auto handle = std::make_unique<photon_engine>();
    handle->owner = model;
    handle->engine = std::make_unique<photon::serving::Engine>(
        *model->model, options ? options->options : photon::serving::EngineOptions{});
    *out = handle.release();
  });
}

void photon_engine_free(photon_engine* engine) {
  delete engine;
}

photon_status photon_engine_start(photon_engine* engine) {
  return guard([&] {
    require(engine, "photon_engine_start", "engine is NULL");
    engine->engine->start();
  });
}

photon_status photon_engine_stop(photon_engine* engine, photon_engine_stop_mode mode) {
  return guard([&] {
    require(engine, "photon_engine_stop", "engine is NULL");
    const int value = photon::api::enum_value(mode);
    check(
        value == PHOTON_ENGINE_DRAIN || value == PHOTON_ENGINE_CANCEL, "photon_engine_stop",
        "unknown mode " + std::to_string(value) + " (PHOTON_ENGINE_DRAIN or PHOTON_ENGINE_CANCEL)");
    engine->engine->stop(value == PHOTON_ENGINE_DRAIN);
  });
}

photon_status photon_engine_step(photon_engine* engine, int32_t* n_unfinished) {
  return guard([&] {
    require(engine, "photon_engine_step", "engine is NULL");
    const int32_t n = engine->engine->step();
    if (n_unfinished) *n_unfinished = n;
  });
}

photon_status photon_engine_get_stat(const photon_engine* engine, photon_engine_stat stat,
                                     double* value) {
  return guard([&] {
    require(engine, "photon_engine_get_stat", "engine is NULL");
    require(value, "photon_engine_get_stat", "value is NULL");
    const int s = photon::api::enum_value(stat);
    check(s >= 0 && s < static_cast<int>(photon::serving::EngineStat::Count),
          "photon_engine_get_stat", "unknown stat " + std::to_string(s));
    *value = engine->engine->stat(static_cast<photon::serving::EngineStat>(s));
  });
}

// ---- request options ---------------------------------------------------------------------------

photon_status photon_request_options_create(photon_request_options** out) {
  return guard([&] {
    require(out, "photon_request_options_create", "out is NULL");
    *out = new photon_request_options();
  });
}

void photon_request_options_free(photon_request_options* options) {
  delete options;
}

photon_status photon_request_options_set_session_options(photon_request_options* o,
                                                         const photon_session_options* s) {
  return guard([&] {
    require(o, "photon_request_options_set_session_options", "options is NULL");
    require(s, "photon_request_options_set_session_options", "session_options is NULL");
    o->session = *s;
    o->session_given = true;
  });
}

photon_status photon_request_options_set_prompt(photon_request_options* o, const int32_t* tokens,
                                                size_t n_tokens) {
  return guard([&] {
    require(o, "photon_request_options_set_prompt", "options is NULL");
    require(tokens || n_tokens == 0, "photon_request_options_set_prompt", "tokens is NULL");
    o->prompt.assign(tokens, tokens + n_tokens);
    o->prompt_text.reset();
  });
}

photon_status photon_request_options_set_prompt_text(photon_request_options* o, const char* text,
                                                     size_t text_len, int add_bos) {
  return guard([&] {
    require(o, "photon_request_options_set_prompt_text", "options is NULL");
    require(text || text_len == 0, "photon_request_options_set_prompt_text", "text is NULL");
    o->prompt_text = std::string(text ? text : "", text_len);
    o->add_bos = add_bos != 0;
    o->prompt.clear();
  });
}

photon_status photon_request_options_set_state(photon_request_options* o, const void* data,
                                               size_t size) {
  return guard([&] {
    require(o, "photon_request_options_set_state", "options is NULL");
    require(data || size == 0, "photon_request_options_set_state", "data is NULL");
    const auto* bytes = static_cast<const uint8_t*>(data);
    o->state.assign(bytes, bytes + size);
  });
}

photon_status photon_request_options_set_session(photon_request_options* o,
                                                 photon_session* session) {
  return guard([&] {
    require(o, "photon_request_options_set_session", "options is NULL");
    o->continued = session;
  });
}

photon_status photon_request_options_set_max_tokens(photon_request_options* o, int32_t n) {
  return guard([&] {
    require(o, "photon_request_options_set_max_tokens", "options is NULL");
    check(n >= -1, "photon_request_options_set_max_tokens",
          "max_tokens must be >= 0, or -1 for no limit; got " + std::to_string(n));
    o->max_tokens = n;
  });
}

photon_status photon_request_options_set_callback(photon_request_options* o,
                                                  photon_token_callback callback, void* user_data) {
  return guard([&] {
    require(o, "photon_request_options_set_callback", "options is NULL");
    o->callback = callback;
    o->user_data = user_data;
  });
}

photon_status photon_request_options_set_finish_callback(photon_request_options* o,
                                                         photon_request_finish_callback callback,
                                                         void* user_data) {
  return guard([&] {
    require(o, "photon_request_options_set_finish_callback", "options is NULL");
    o->finish_callback = callback;
    o->finish_user_data = user_data;
  });
}

// ---- requests ----------------------------------------------------------------------------------

photon_status photon_engine_submit(photon_engine* engine, const photon_request_options* options,
                                   photon_request** out) {
  return guard([&] {
    const char* function = "photon_engine_submit";
    require(engine, function, "engine is NULL");
    require(options, function, "options is NULL");
    require(out, function, "out is NULL");
    const photon_request_options& o = *options;
    const photon_model& model = *engine->owner;
    check(!(o.continued && !o.state.empty()), function,
          "the options give both a state and a session to continue; give one");
    if (o.continued) {
      check(o.continued->owner == engine->owner, function,
            "the session to continue belongs to another model than the engine");
      check(o.continued->session != nullptr, function,
            "the session to continue is held by another request");
    }
    photon::serving::RequestSpec spec;
    const photon_session_options defaults;
    spec.settings =
        photon::api::session_settings(model, o.session_given ? o.session : defaults, function);
    spec.sampler_given = o.session_given;
    spec.prompt =
        o.prompt_text ? model.model->tokenizer().encode(*o.prompt_text, o.add_bos) : o.prompt;
    const int32_t vocab = model.model->config().vocab_size;
    for (size_t i = 0; i < spec.prompt.size(); ++i)
      if (spec.prompt[i] < 0 || spec.prompt[i] >= vocab)
        photon::fail(PHOTON_ERR_BAD_TOKEN,
                     std::string(function) + ": prompt token " + std::to_string(spec.prompt[i]) +
                         " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                         std::to_string(vocab) + ")");
    check(o.continued || !o.state.empty() || !spec.prompt.empty(), function,
          "the request has no prompt, state or session");
    spec.state = o.state;
    spec.max_tokens = o.max_tokens;
    spec.callback = wrap(o.callback, o.user_data);
    if (o.finish_callback)
      spec.on_finish = [callback = o.finish_callback, user_data = o.finish_user_data](
                           photon_stop_reason reason, photon_status status) {
        callback(user_data, reason, status);
      };
    auto handle = std::make_unique<photon_request>();
    handle->owner = engine->owner;
    if (o.continued) spec.session = std::move(o.continued->session);
    try {
      handle->request = engine->engine->submit(std::move(spec));
    } catch (...) {
      // A refused request takes nothing over.
      if (o.continued && spec.session) o.continued->session = std::move(spec.session);
      throw;
    }
    if (o.continued) handle->shell.reset(o.continued);
    *out = handle.release();
  });
}

void photon_request_cancel(photon_request* request) {
  if (!request) return;
  request->request->cancel();
}

void photon_request_free(photon_request* request) {
  if (!request) return;
  request->request->release();
  delete request;
}

photon_request_state photon_request_get_state(const photon_request* request) {
  if (!request) return PHOTON_REQUEST_FINISHED;
  return static_cast<photon_request_state>(request->request->state());
}

photon_stop_reason photon_request_stop_reason(const photon_request* request) {
  return request ? request->request->stop_reason() : PHOTON_STOP_NONE;
}

photon_status photon_request_status(const photon_request* request) {
  return request ? request->request->status() : PHOTON_ERR_INVALID_ARGUMENT;
}

const char* photon_request_error(const photon_request* request) {
  return request ? request->request->error() : "";
}

photon_status photon_request_wait(photon_request* request, int32_t timeout_ms) {
  return guard([&] {
    require(request, "photon_request_wait", "request is NULL");
    if (!request->request->wait(deadline(timeout_ms)))
      photon::fail(PHOTON_ERR_TIMEOUT, "photon_request_wait: the request has not finished after " +
                                           std::to_string(timeout_ms) + " ms");
  });
}

photon_status photon_request_next_token(photon_request* request, int32_t timeout_ms, int32_t* token,
                                        char* piece, size_t piece_capacity, size_t* piece_len,
                                        float* logprob) {
  return guard([&] {
    const char* function = "photon_request_next_token";
    require(request, function, "request is NULL");
    require(token, function, "token is NULL");
    require(piece_len, function, "piece_len is NULL");
    photon::serving::Request& r = *request->request;
    check(!r.has_callback(), function, "the request delivers its tokens through its callback");
    const photon::serving::Request::Token* next = r.peek_token(deadline(timeout_ms));
    if (!next)
      photon::fail(PHOTON_ERR_TIMEOUT, std::string(function) + ": no token within " +
                                           std::to_string(timeout_ms) + " ms");
    *piece_len = next->piece.size();
    if (piece_capacity < next->piece.size() + 1 && (piece || piece_capacity > 0))
      photon::fail(PHOTON_ERR_BUFFER_TOO_SMALL, std::string(function) + ": the piece needs " +
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
    r.pop_token();
  });
}

photon_status photon_request_get_stat(const photon_request* request, photon_request_stat stat,
                                      double* value) {
  return guard([&] {
    require(request, "photon_request_get_stat", "request is NULL");
    require(value, "photon_request_get_stat", "value is NULL");
    const photon::serving::RequestStats s = request->request->stats();
    const Clock::time_point now = Clock::now();
    const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    switch (photon::api::enum_value(stat)) {
      case PHOTON_REQUEST_PROMPT_TOKENS: *value = static_cast<double>(s.prompt_tokens); break;
      case PHOTON_REQUEST_REUSED_TOKENS: *value = static_cast<double>(s.reused_tokens); break;
      case PHOTON_REQUEST_GENERATED_TOKENS: *value = static_cast<double>(s.generated_tokens); break;
      case PHOTON_REQUEST_QUEUE_SECONDS:
        *value = s.admitted ? seconds(*s.admitted - s.submitted) : nan;
        break;
      case PHOTON_REQUEST_FIRST_TOKEN_SECONDS:
        *value = s.first_token ? seconds(*s.first_token - s.submitted) : nan;
        break;
      case PHOTON_REQUEST_DECODE_SECONDS:
        *value = s.first_token ? seconds((s.finished ? *s.finished : now) - *s.first_token) : nan;
        break;
      case PHOTON_REQUEST_PAUSED_SECONDS:
        *value = seconds(s.paused + (s.paused_since ? now - *s.paused_since : Clock::duration{}));
        break;
      case PHOTON_REQUEST_PAUSES: *value = static_cast<double>(s.pauses); break;
      default:
        photon::fail(PHOTON_ERR_INVALID_ARGUMENT,
                     "photon_request_get_stat: unknown stat " +
                         std::to_string(photon::api::enum_value(stat)));
    }
  });
}

photon_status photon_request_save(photon_request* request, void* buffer, size_t capacity,
                                  size_t* size) {
  return guard([&] {
    require(request, "photon_request_save", "request is NULL");
    require(size, "photon_request_save", "size is NULL");
    photon::Session& session = request->request->finished_session("photon_request_save");
    const std::vector<uint8_t> blob = photon::save_session(session, "photon_request_save");
    *size = blob.size();
    if (capacity < blob.size() || !buffer)
      photon::fail(PHOTON_ERR_BUFFER_TOO_SMALL,
                   "photon_request_save: the state needs " + std::to_string(blob.size()) +
                       " bytes, the buffer holds " + std::to_string(capacity));
    std::memcpy(buffer, blob.data(), blob.size());
  });
}

photon_status photon_request_take_session(photon_request* request, photon_session** out) {
  return guard([&] {
    require(request, "photon_request_take_session", "request is NULL");
    require(out, "photon_request_take_session", "out is NULL");
    // Allocated first, so that nothing can fail once the session was taken.
    auto fresh = request->shell ? nullptr : std::make_unique<photon_session>();
    std::unique_ptr<photon::Session> session =
        request->request->take_session("photon_request_take_session");
    std::unique_ptr<photon_session> shell = fresh ? std::move(fresh) : std::move(request->shell);
    shell->owner = request->owner;
    shell->session = std::move(session);
    *out = shell.release();
  });
}

}  // extern "C"
