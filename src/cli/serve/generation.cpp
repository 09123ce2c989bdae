#include "serve/generation.h"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <utility>
#include <vector>

#include "last_top_logprobs.h"

namespace photon::serve {

namespace net = boost::asio;

Generation::Generation(net::io_context& io) : io_(io) {}

Generation::~Generation() {
  // Waits for a callback in progress on the stepping thread, which holds the lock only briefly.
  photon_request_free(request_);
}

photon_status Generation::submit(photon_engine* engine, photon_request_options* options,
                                 std::shared_ptr<GenerationObserver> observer) {
  photon_status status = photon_request_options_set_callback(options, &Generation::on_token, this);
  if (status == PHOTON_OK)
    status = photon_request_options_set_finish_callback(options, &Generation::on_finish, this);
  if (status == PHOTON_OK) status = photon_engine_submit(engine, options, &request_);
  if (status == PHOTON_OK) observer_ = std::move(observer);
  return status;
}

int Generation::on_token(void* user, int32_t token, const char* piece, size_t piece_len,
                         float logprob) {
  auto* self = static_cast<Generation*>(user);
  bool wake = false;
  try {
    std::vector<std::pair<int32_t, float>> top = cli::last_top_logprobs();
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->pending_.push_back({token, logprob, std::string(piece, piece_len), std::move(top)});
    wake = !self->wake_posted_;
    self->wake_posted_ = true;
  } catch (...) {
    return 1;  // out of memory: end this request rather than throw through the C API
  }
  if (wake) {
    try {
      self->post([](Generation& g) { g.deliver(); });
    } catch (...) {
      return 1;
    }
  }
  return self->stop_.load() ? 1 : 0;
}

void Generation::on_finish(void* user, photon_stop_reason, photon_status) {
  auto* self = static_cast<Generation*>(user);
  try {
    // Behind any token wake-up posted before it: the last tokens are handed over first.
    self->post([](Generation& g) {
      if (g.end_)
        g.end_(g);
      else
        g.finish();
    });
  } catch (...) {
    // Out of memory: the request's reply cannot end; nothing else here can throw.
  }
}

void Generation::post(void (*what)(Generation&)) {
  net::post(io_, [weak = weak_from_this(), what] {
    if (auto generation = weak.lock()) what(*generation);
  });
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

void GenerationTracker::add(std::shared_ptr<Generation> generation) {
  generation->on_end([this](Generation& g) { ended(g); });
  active_.push_back(std::move(generation));
}

void GenerationTracker::ended(Generation& generation) {
  const auto it = std::find_if(active_.begin(), active_.end(),
                               [&](const auto& g) { return g.get() == &generation; });
  if (it == active_.end()) return;
  // Held here while the observer is told: it may add generations (a retry) or drop its own.
  const std::shared_ptr<Generation> ending = std::move(*it);
  active_.erase(it);
  ending->finish();
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
