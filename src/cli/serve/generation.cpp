#include "serve/generation.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace photon::serve {

namespace net = boost::asio;

namespace {
// How often the tracker looks for finished requests while some run: a request's reply ends at
// most this much after its last engine step.
constexpr auto kPollInterval = std::chrono::milliseconds(2);
}  // namespace

Generation::Generation(net::io_context& io) : io_(io) {}

Generation::~Generation() {
  // Waits for a callback in progress on the stepping thread, which holds the lock only briefly.
  photon_request_free(request_);
}

photon_status Generation::submit(photon_engine* engine, photon_request_options* options,
                                 std::shared_ptr<GenerationObserver> observer) {
  photon_status status = photon_request_options_set_callback(options, &Generation::on_token, this);
  if (status == PHOTON_OK) status = photon_engine_submit(engine, options, &request_);
  if (status == PHOTON_OK) observer_ = std::move(observer);
  return status;
}

int Generation::on_token(void* user, int32_t token, const char* piece, size_t piece_len,
                         float logprob) {
  auto* self = static_cast<Generation*>(user);
  bool wake = false;
  try {
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->pending_.push_back({token, logprob, std::string(piece, piece_len)});
    wake = !self->wake_posted_;
    self->wake_posted_ = true;
  } catch (...) {
    return 1;  // out of memory: end this request rather than throw through the C API
  }
  if (wake) {
    net::post(self->io_, [weak = self->weak_from_this()] {
      if (auto generation = weak.lock()) generation->deliver();
    });
  }
  return self->stop_.load() ? 1 : 0;
}

void Generation::deliver() {
  std::vector<GeneratedToken> tokens;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens.swap(pending_);
    wake_posted_ = false;
  }
  if (!tokens.empty() && observer_) observer_->on_tokens(tokens);
}

void Generation::finish() {
  deliver();
  // The observer may hold this generation: letting it go here breaks that cycle.
  std::shared_ptr<GenerationObserver> observer = std::move(observer_);
  observer_.reset();
  if (observer) observer->on_finished();
}

struct GenerationTracker::Timer {
  explicit Timer(net::io_context& io) : timer(io) {}
  net::steady_timer timer;
};

GenerationTracker::GenerationTracker(net::io_context& io, photon_engine* engine)
    : engine_(engine), timer_(std::make_unique<Timer>(io)) {}

GenerationTracker::~GenerationTracker() = default;

void GenerationTracker::add(std::shared_ptr<Generation> generation) {
  active_.push_back(std::move(generation));
  finished_seen_ = -1;  // look at the new request on the next poll, whatever the count says
  schedule();
}

void GenerationTracker::schedule() {
  if (scheduled_ || active_.empty()) return;
  scheduled_ = true;
  timer_->timer.expires_after(kPollInterval);
  timer_->timer.async_wait([this](const boost::system::error_code& ec) {
    scheduled_ = false;
    if (!ec) poll();
  });
}

void GenerationTracker::poll() {
  double finished = 0;
  photon_engine_get_stat(engine_, PHOTON_ENGINE_FINISHED, &finished);
  if (finished != finished_seen_) {
    finished_seen_ = finished;
    std::vector<std::shared_ptr<Generation>> ended;
    const auto running = std::stable_partition(active_.begin(), active_.end(), [](const auto& g) {
      return photon_request_get_state(g->request()) != PHOTON_REQUEST_FINISHED;
    });
    ended.assign(std::make_move_iterator(running), std::make_move_iterator(active_.end()));
    active_.erase(running, active_.end());
    // Observers may add generations (a retry) while being told: `ended` is apart from active_.
    for (auto& g : ended) g->finish();
  }
  schedule();
}

void GenerationTracker::stop_soon() {
  for (auto& g : active_) {
    if (photon_request_get_state(g->request()) == PHOTON_REQUEST_WAITING)
      g->cancel();
    else
      g->stop_soon();
  }
}

void GenerationTracker::cancel_all() {
  for (auto& g : active_) g->cancel();
}

}  // namespace photon::serve
