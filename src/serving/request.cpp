#include "serving/request.h"

#include <utility>

#include "core/error.h"

namespace photon::serving {

Request::Request(RequestSpec spec) : spec_(std::move(spec)) {
  stats_.submitted = Clock::now();
}

void Request::release() {
  cancel();
  released_.store(true);
  // A callback in progress on another thread finishes first; from the callback itself, the flag
  // alone keeps it from being called again.
  if (callback_thread_.load() != std::this_thread::get_id())
    std::lock_guard<std::mutex> wait_for_callback(callback_mutex_);
}

RequestState Request::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

photon_stop_reason Request::stop_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_reason_;
}

photon_status Request::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

const char* Request::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_ == RequestState::Finished ? error_.c_str() : "";
}

RequestStats Request::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

bool Request::wait(std::optional<Clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto done = [&] { return told_; };
  if (!deadline) {
    changed_.wait(lock, done);
    return true;
  }
  return changed_.wait_until(lock, *deadline, done);
}

const Request::Token* Request::peek_token(std::optional<Clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto ready = [&] { return !queue_.empty() || told_; };
  if (!deadline)
    changed_.wait(lock, ready);
  else if (!changed_.wait_until(lock, *deadline, ready))
    return nullptr;
  return queue_.empty() ? &end_ : &queue_.front();
}

void Request::pop_token() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!queue_.empty()) queue_.pop_front();
}

Session& Request::finished_session(std::string_view who) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string w(who);
  if (state_ != RequestState::Finished)
    fail(PHOTON_ERR_INVALID_ARGUMENT, w + ": the request has not finished");
  if (taken_) fail(PHOTON_ERR_INVALID_ARGUMENT, w + ": the request's session was taken");
  if (!session)
    fail(PHOTON_ERR_INVALID_ARGUMENT,
         w + ": the request ended by an error (" + error_ + ") and has no session");
  return *session;
}

std::unique_ptr<Session> Request::take_session(std::string_view who) {
  finished_session(who);
  std::lock_guard<std::mutex> lock(mutex_);
  taken_ = true;
  return std::move(session);
}

template <class Call>
bool Request::call_back(Call&& call) {
  std::lock_guard<std::mutex> calling(callback_mutex_);
  if (released_.load()) return false;
  callback_thread_.store(std::this_thread::get_id());
  try {
    call();
  } catch (...) {
    callback_thread_.store(std::thread::id());
    throw;
  }
  callback_thread_.store(std::thread::id());
  return true;
}

bool Request::deliver(const DeliveredToken& token) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.generated_tokens++ == 0) stats_.first_token = Clock::now();
    if (!spec_.callback) {
      queue_.push_back({token.token,
                        token.logprob,
                        std::string(token.piece),
                        {token.top.begin(), token.top.end()}});
      changed_.notify_all();
      return true;
    }
  }
  bool go_on = false;
  return call_back([&] { go_on = spec_.callback(token); }) && go_on && !released_.load();
}

void Request::set_state(RequestState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point now = Clock::now();
  if (state_ == RequestState::Paused && stats_.paused_since) {
    stats_.paused += now - *stats_.paused_since;
    stats_.paused_since.reset();
  }
  if (state == RequestState::Running && !stats_.admitted) stats_.admitted = now;
  if (state == RequestState::Paused) {
    stats_.paused_since = now;
    ++stats_.pauses;
  }
  state_ = state;
  changed_.notify_all();
}

void Request::count_prompt(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.prompt_tokens += n;
}

void Request::count_reused(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reused_tokens += n;
}

void Request::finish(photon_stop_reason reason, photon_status status, std::string error) {
  if (status != PHOTON_OK) session.reset();
  saved.clear();
  saved.shrink_to_fit();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Clock::time_point now = Clock::now();
    if (stats_.paused_since) {
      stats_.paused += now - *stats_.paused_since;
      stats_.paused_since.reset();
    }
    stats_.finished = now;
    stop_reason_ = reason;
    status_ = status;
    error_ = std::move(error);
    state_ = RequestState::Finished;
  }
  if (spec_.on_finish) call_back([&] { spec_.on_finish(reason, status); });
  // Waiters wake after on_finish has returned, so that a request waited for and then freed has
  // been told its end.
  std::lock_guard<std::mutex> lock(mutex_);
  told_ = true;
  changed_.notify_all();
}

}  // namespace photon::serving
