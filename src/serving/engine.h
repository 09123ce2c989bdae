// The serving engine (photon_engine): requests submitted from any thread, run with continuous
// batching by steps on one thread at a time (its own worker, or the application's loop). A step
// ends cancelled requests, admits paused and waiting ones (FIFO) within the running cap and the
// memory budget (restoring those whose prompt begins with a saved one from the prefix cache),
// consumes a budget of prompt tokens, and advances every running request by one decode step;
// photon.h documents the rules.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/model.h"
#include "serving/prefix_cache.h"
#include "serving/request.h"

namespace photon::serving {

struct EngineOptions {
  int32_t max_running = 64;
  int32_t max_waiting = 1024;
  uint64_t memory_budget = 0;  // 0: none
  int32_t step_tokens = 512;
  uint64_t prefix_cache = 0;  // bytes of saved prompts; 0: none
};

// The engine's statistics (photon_engine_stat, in its order).
enum class EngineStat {
  Waiting,
  Running,
  Paused,
  Submitted,
  Refused,
  Finished,
  Failed,
  Cancelled,
  PromptTokens,
  ReusedTokens,
  GeneratedTokens,
  Pauses,
  Steps,
  MemoryInUse,
  MemoryPeak,
  TokensPerSecond,
  PrefixHits,
  PrefixBytes,
  Count
};

class Engine {
 public:
  Engine(const Model& model, const EngineOptions& options);
  ~Engine();  // stops the worker and ends every unfinished request as cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Model& model() const { return model_; }

  // Queues a request (Error PHOTON_ERR_BUSY when the queue is full). Any thread.
  std::shared_ptr<Request> submit(RequestSpec spec);
  // Wakes the worker so that it sees a cancellation at once. Any thread.
  void wake();

  void start();
  void stop(bool drain);
  // One step on the calling thread; returns the requests not finished.
  int32_t step();

  double stat(EngineStat stat) const;

 private:
  struct StepGuard;

  int32_t run_step();
  void end_cancelled();
  void admit();
  bool admit_one(Request& r);
  // Whether a fresh request's prompt begins with the whole prompt that a running request is still
  // reading (same settings; in RecGen, is that prompt): it then waits for that one's save in the
  // prefix cache.
  bool awaits_prefix_locked(Request& r);
  // Tokens each running request consumes in the step (its next prompt chunk, within step_tokens
  // in admission order, and a decoded token), by index in running_.
  std::vector<int64_t> plan_step() const;
  // Pauses the newest running requests until the step's cache growth fits the memory budget (a
  // request alone that does not fit fails); the plan follows.
  void make_room(std::vector<int64_t>& plan);
  void pause(Request& r);
  void prefill_prompts(const std::vector<int64_t>& plan);
  void decode();
  void retire();
  void fail_request(Request& r, photon_status status, const std::string& message);
  void end_request(Request& r, photon_stop_reason reason);
  void worker_loop();
  bool has_work_locked() const;
  int32_t unfinished_locked() const;
  uint64_t measure_memory() const;

  // Saves the sessions of the group's requests that have just read their prompts afresh.
  void save_prompts(const std::vector<Request*>& group);

  const Model& model_;
  const EngineOptions options_;
  PrefixCache prefix_cache_;  // stepping thread

  mutable std::mutex mutex_;  // guards what follows
  std::condition_variable work_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::vector<std::shared_ptr<Request>> running_;  // in admission order
  std::deque<std::shared_ptr<Request>> paused_;    // oldest first
  bool stepping_ = false;
  bool worker_running_ = false;
  bool stop_requested_ = false;
  bool stop_drains_ = false;
  std::thread worker_;
  double counters_[static_cast<int>(EngineStat::Count)] = {};
  uint64_t next_seq_ = 0;
  uint64_t memory_in_use_ = 0;
  uint64_t memory_peak_ = 0;
  std::deque<std::pair<Clock::time_point, int64_t>> recent_tokens_;  // per step, last 10 s
};

}  // namespace photon::serving
