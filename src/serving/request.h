// One request of the serving engine (photon_request): what was asked for, what it has delivered,
// and where it stands. The fields under "shared" are read and written by any thread under the
// request's lock; those under "stepping thread" only by the thread that runs the engine's steps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/sampling.h"
#include "engine/runner.h"
#include "engine/session.h"
#include "photon.h"

namespace photon::serving {

using Clock = std::chrono::steady_clock;

// Receives a delivered token on the stepping thread; false stops the request.
using RequestCallback = std::function<bool(const DeliveredToken& token)>;
// Told once that the request finished, after its last token (Request::finish).
using FinishCallback = std::function<void(photon_stop_reason reason, photon_status status)>;

// The settings of a session the engine creates for a request (photon_session_options, resolved
// against the model: AUTO made concrete, context 0 made the model's).
struct SessionSettings {
  Mode mode = Mode::HierGen;
  int context = 0;
  DType kv_type = DType::F32;
  SamplerConfig sampler;
  bool context_shift = false;
};

// What a request continues and consumes; checked by the C layer before it reaches the engine.
struct RequestSpec {
  SessionSettings settings;
  bool sampler_given = false;  // a continued session takes settings.sampler only then
  std::vector<int32_t> prompt;
  std::vector<uint8_t> state;        // a saved session to restore, or empty
  std::unique_ptr<Session> session;  // a live session to continue, or null
  int32_t max_tokens = -1;           // -1: up to the context
  RequestCallback callback;          // empty: tokens are queued for next_token()
  FinishCallback on_finish;          // may be empty
};

enum class RequestState { Waiting, Running, Paused, Finished };

struct RequestStats {
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t pauses = 0;
  Clock::time_point submitted;
  std::optional<Clock::time_point> admitted, first_token, finished, paused_since;
  Clock::duration paused{};
};

class Request {
 public:
  struct Token {
    int32_t token;
    float logprob;
    std::string piece;
    std::vector<TokenLogprob> top;
  };

  explicit Request(RequestSpec spec);
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // ---- any thread ----
  void cancel() { cancel_requested_.store(true); }
  bool cancel_requested() const { return cancel_requested_.load(); }
  // The handle was freed: cancel, and call the callbacks no more once this returns (unless it is
  // called from a callback itself, which then is the last call).
  void release();
  RequestState state() const;
  photon_stop_reason stop_reason() const;
  photon_status status() const;
  // The message of the error that ended the request ("" before it finished); fixed from then on.
  const char* error() const;
  RequestStats stats() const;
  // Waits until finished or the deadline passes (none: forever); true when finished.
  bool wait(std::optional<Clock::time_point> deadline);
  // The next queued token (it stays queued until pop_token()), or null when none came by the
  // deadline; a Token with id -1 once the request has finished and every token was taken.
  const Token* peek_token(std::optional<Clock::time_point> deadline);
  void pop_token();
  bool has_callback() const { return static_cast<bool>(spec_.callback); }
  // The finished request's session, for photon_request_save / _take_session; throws
  // PHOTON_ERR_INVALID_ARGUMENT (naming `who`) while it runs, after an error, or once taken.
  Session& finished_session(std::string_view who);
  std::unique_ptr<Session> take_session(std::string_view who);

  // ---- the stepping thread ----
  RequestSpec& spec() { return spec_; }
  std::unique_ptr<Session> session;   // while running (and after finishing, until taken)
  std::vector<uint8_t> saved;         // while paused: the session's state
  size_t prompt_done = 0;             // prompt tokens consumed (or restored from the prefix cache)
  bool fresh = false;                 // its session holds only its prompt (afresh or cached)
  uint64_t seq = 0;                   // submission order (set by submit, before it is shared)
  uint64_t bytes = 0;                 // memory the session holds, counted in the budget
  uint64_t fixed_bytes = 0;           // of which does not grow (all but the growing caches)
  bool resume_whole_context = false;  // paused with a session of the C API's (caches reserved)
  // Delivers one token (callback or queue); false when the request must stop (the callback said
  // so, or the handle was freed).
  bool deliver(const DeliveredToken& token);
  void set_state(RequestState state);
  void count_prompt(int64_t n);
  void count_reused(int64_t n);
  // Ends the request, then tells on_finish (unless released); its session stays for save/take
  // unless the request failed. Called on the stepping thread, or by the engine's destructor.
  void finish(photon_stop_reason reason, photon_status status = PHOTON_OK, std::string error = {});

 private:
  RequestSpec spec_;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> released_{false};

  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable changed_;
  RequestState state_ = RequestState::Waiting;
  bool told_ = false;  // finished and on_finish returned: what wait() and the puller wait for
  photon_stop_reason stop_reason_ = PHOTON_STOP_NONE;
  photon_status status_ = PHOTON_OK;
  std::string error_;
  RequestStats stats_;
  std::deque<Token> queue_;
  Token end_{-1, 0.0f, {}, {}};
  bool taken_ = false;

  // Runs `call` under callback_mutex_ unless the handle was released; false when it was.
  template <class Call>
  bool call_back(Call&& call);

  // Held while a callback runs, so that release() can wait for it to return.
  std::mutex callback_mutex_;
  std::atomic<std::thread::id> callback_thread_{};
};

}  // namespace photon::serving
