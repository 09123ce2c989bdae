// A request running in the engine, seen from the server's network thread.
//
// Tokens reach the network thread without ever making the engine's stepping thread wait for it:
// the request's token callback (on the stepping thread) appends the token to the generation's
// list under a short lock and, when the list was empty, posts one wake-up to the io_context; the
// network thread then takes the whole list. A request ends inside an engine step without a
// callback, so the GenerationTracker notices the end: while requests run, it reads the engine's
// count of finished requests every couple of milliseconds and, when the count moved, looks at
// which of its requests finished.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
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

  // Submits `options` (its callback is set here) with `observer` to be told. PHOTON_OK, or the
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

 private:
  static int on_token(void* user, int32_t token, const char* piece, size_t piece_len,
                      float logprob);

  boost::asio::io_context& io_;
  photon_request* request_ = nullptr;
  std::shared_ptr<GenerationObserver> observer_;
  std::atomic<bool> stop_{false};

  std::mutex mutex_;  // guards what follows (the stepping thread appends, the network takes)
  std::vector<GeneratedToken> pending_;
  bool wake_posted_ = false;
};

// Watches the running generations of one engine for their end (network thread only).
class GenerationTracker {
 public:
  GenerationTracker(boost::asio::io_context& io, photon_engine* engine);
  ~GenerationTracker();
  GenerationTracker(const GenerationTracker&) = delete;
  GenerationTracker& operator=(const GenerationTracker&) = delete;

  void add(std::shared_ptr<Generation> generation);
  size_t active() const { return active_.size(); }
  // Shutdown: requests not admitted yet are cancelled, running ones stop at their next token.
  void stop_soon();
  void cancel_all();

 private:
  struct Timer;
  void schedule();
  void poll();

  photon_engine* engine_;
  std::unique_ptr<Timer> timer_;
  bool scheduled_ = false;
  double finished_seen_ = -1;
  std::vector<std::shared_ptr<Generation>> active_;
};

}  // namespace photon::serve
