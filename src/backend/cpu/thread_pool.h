// The helper threads of the CPU backend, one pool for the process, started on the first parallel
// call. A parallel call runs on its calling thread and takes up to threads - 1 helpers that are
// free; items are handed out one at a time, and the call waits only for items a helper is
// computing, never for a helper to turn up. On a machine shared with other work (or with more
// callers than cores) a helper the OS has not scheduled costs nothing but its help, where a
// fork-join region (OpenMP) would wait at its barrier for every thread of the team, spinning.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace photon::cpu {

class ThreadPool {
 public:
  // One item: call(context, item, slot). slot is unique among the threads of one call, in
  // [0, threads): 0 is the caller.
  using ItemFn = void (*)(void* context, long item, int slot);

  static ThreadPool& instance();
  ~ThreadPool();

  // Computes items [0, count) on the calling thread and up to threads - 1 helpers. call must not
  // throw.
  void run(int threads, long count, ItemFn call, void* context);

 private:
  struct Job;
  ThreadPool() = default;
  void start();
  void work(int index);
  std::shared_ptr<Job> join(int* slot);

  std::once_flag started_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<Job>> open_;  // jobs with items left to hand out
  std::atomic<unsigned long> posted_{0};    // jobs posted so far (helpers watch it while spinning)
  int sleeping_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> helpers_;
};

// Processors this process may run on (its affinity mask), at least 1.
int available_cores();

}  // namespace photon::cpu
