#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace photon::cpu {

namespace {

// How long an idle helper keeps looking for work before it sleeps: long enough to bridge the
// single-threaded stretches of a decode step (one row's attention, the sampler), short enough to
// leave a shared machine's cycles to others once a step is over. At 100 us the helper slept
// during every layer's attention of a one-session vanilla decode, and the futex wake-ups cost
// about 8% of its tokens per second (docs/performance.md, "The engine over the backend
// interface").
constexpr auto kSpin = std::chrono::milliseconds(2);
// Polls between readings of the clock while spinning.
constexpr unsigned kPollsPerClock = 64;

// Between polls a spinning helper yields the core's execution units (where logical CPUs share a
// core, to the thread doing the step's single-threaded work) and the memory bus.
inline void pause_between_polls() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

struct ThreadPool::Job {
  ItemFn call = nullptr;
  void* context = nullptr;
  long count = 0;
  std::atomic<long> next{0};  // the next item to hand out
  std::atomic<long> done{0};  // items finished
  int threads = 1;            // the caller and the helpers it may take
  int free_slots = 0;         // helpers that may still join (under the pool's mutex)

  void compute(int slot) {
    for (long i; (i = next.fetch_add(1, std::memory_order_relaxed)) < count;) {
      call(context, i, slot);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& helper : helpers_) helper.join();
}

void ThreadPool::start() {
  const int wanted = available_cores() - 1;
  for (int i = 0; i < wanted; ++i) {
    try {
      helpers_.emplace_back([this, i] { work(i); });
    } catch (const std::system_error&) {
      break;  // helpers are optional: calls compute on their own thread anyway
    }
  }
}

std::shared_ptr<ThreadPool::Job> ThreadPool::join(int* slot) {
  for (const std::shared_ptr<Job>& job : open_) {
    if (job->free_slots > 0) {
      *slot = job->threads - job->free_slots--;
      return job;
    }
  }
  return nullptr;
}

void ThreadPool::work(int) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    int slot = 0;
    if (std::shared_ptr<Job> job = join(&slot)) {
      lock.unlock();
      job->compute(slot);
      lock.lock();
      continue;
    }
    const unsigned long seen = posted_.load(std::memory_order_acquire);
    lock.unlock();
    bool posted = false;
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (unsigned polls = 1;; ++polls) {
      posted = posted_.load(std::memory_order_acquire) != seen;
      if (posted) break;
      pause_between_polls();
      if (polls % kPollsPerClock == 0 && std::chrono::steady_clock::now() >= until) break;
    }
    lock.lock();
    if (posted) continue;
    ++sleeping_;
    wake_.wait(lock, [&] { return stopping_ || posted_.load() != seen; });
    --sleeping_;
  }
}

void ThreadPool::run(int threads, long count, ItemFn call, void* context) {
  long helpers = 0;
  if (threads > 1 && count > 1) {
    std::call_once(started_, [this] { start(); });
    helpers = std::min({threads - 1L, count - 1, static_cast<long>(helpers_.size())});
  }
  if (helpers <= 0) {
    for (long i = 0; i < count; ++i) call(context, i, 0);
    return;
  }
  auto job = std::make_shared<Job>();
  job->call = call;
  job->context = context;
  job->count = count;
  job->threads = static_cast<int>(helpers) + 1;
  job->free_slots = static_cast<int>(helpers);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.push_back(job);
    posted_.fetch_add(1, std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) wake_.notify_all();
  job->compute(0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase(open_, job);
  }
  // Every item is handed out: wait only for those a helper is still computing.
  while (job->done.load(std::memory_order_acquire) < count) std::this_thread::yield();
}

int available_cores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace photon::cpu
