// A request running in the engine, seen from the server's network thread.
//
// Tokens reach the network thread without ever making the engine's stepping thread wait for it:
// the request's token callback (on the stepping thread) appends the token to the generation's
// list under a short lock and, when the list was empty, posts one wake-up to the io_context; the
// network thread then takes the whole list. The request's finish callback (on the stepping thread,
// after its last token) posts its end the same way, behind the tokens, and the GenerationTracker
// hands the last tokens over and lets the generation go.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "photon.h"

namespace boost::asio {
class io_context;
}

namespace photon::serve {

struct GeneratedToken {
  int32_t id;
  float logprob;
  std::string piece;
  std::vector<std::pair<int32_t, float>> top;  // the alternatives, when the request asks for them
};

class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  // Tokens delivered since the last call, in order (network thread).
  virtual void on_tokens(std::vector<GeneratedToken>& tokens) = 0;
  // The request has finished, and every token was handed over (network thread).
  virtual void on_finished() = 0;
};

class Generation : public std::enable_shared_from_this<Generation> {
 public:
  explicit Generation(boost::asio::io_context& io);
  ~Generation();  // frees the request, cancelling it if it runs
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Submits `options` (its callbacks are set here) with `observer` to be told. PHOTON_OK, or the
  // failure's status with the message in photon_last_error().
  photon_status submit(photon_engine* engine, photon_request_options* options,
                       std::shared_ptr<GenerationObserver> observer);

  photon_request* request() const { return request_; }
  void cancel() { photon_request_cancel(request_); }
  // The request stops at its next token (PHOTON_STOP_CALLBACK), keeping its session: for a
  // shutdown that lets running conversations be saved.
  void stop_soon() { stop_.store(true); }

  // Network thread: hands over the delivered tokens.
  void deliver();
  // Network thread: hands over the last tokens and tells the observer that the request finished,
  // then lets the observer go.
  void finish();
  // Network thread: what to do once the request has finished (the tracker's), instead of finish().
  void on_end(std::function<void(Generation&)> end) { end_ = std::move(end); }

 private:
  static int on_token(void* user, int32_t token, const char* piece, size_t piece_len,
                      float logprob);
  static void on_finish(void* user, photon_stop_reason reason, photon_status status);
  // Posts `what` to the network thread, holding this generation only weakly.
  void post(void (*what)(Generation&));

  boost::asio::io_context& io_;
  photon_request* request_ = nullptr;
  std::shared_ptr<GenerationObserver> observer_;
  std::function<void(Generation&)> end_;
  std::atomic<bool> stop_{false};

  std::mutex mutex_;  // guards what follows (the stepping thread appends, the network takes)
  std::vector<GeneratedToken> pending_;
  bool wake_posted_ = false;
};

// The running generations of one engine, each until its end (network thread only).
class GenerationTracker {
 public:
  GenerationTracker() = default;
  GenerationTracker(const GenerationTracker&) = delete;
  GenerationTracker& operator=(const GenerationTracker&) = delete;

  void add(std::shared_ptr<Generation> generation);
  size_t active() const { return active_.size(); }
  // Shutdown: requests not admitted yet are cancelled, running ones stop at their next token.
  void stop_soon();
  void cancel_all();

 private:
  void ended(Generation& generation);

  std::vector<std::shared_ptr<Generation>> active_;
};

}  // namespace photon::serve
