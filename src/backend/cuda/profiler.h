// Where a backend's time goes, op by op, when PHOTON_CUDA_PROFILE is set in the environment:
// each op's host time (from its call to its return: argument checks, staging, launches) and its
// device time (CUDA events around its work on the stream), with the wall time from the first op
// to the last. Printed to stderr when the backend goes away. Wall time that is neither host time
// in ops nor device time is the engine's own host work between ops; host time far above device
// time means launches, not kernels, set the pace. Ops that give their shape are counted per shape
// (their rows rounded up to a power of two), so that a report says which products take the time.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace photon::cuda {

class Profiler {
 public:
  // Null unless PHOTON_CUDA_PROFILE is set (to anything but "0").
  static std::unique_ptr<Profiler> from_environment(std::string backend_name);
  explicit Profiler(std::string backend_name) : name_(std::move(backend_name)) {}
  ~Profiler();  // prints the report; the stream must still exist
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Around one op on `stream`; nested ops count towards the outermost.
  void begin(const char* op, cudaStream_t stream);
  // The outermost op's shape: its rows, then its other dimensions.
  void shape(std::initializer_list<int64_t> dims);
  void end(cudaStream_t stream);

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::string key;
    cudaEvent_t start, stop;
  };
  struct Totals {
    long calls = 0;
    double host_s = 0, device_s = 0;
  };
  cudaEvent_t event();
  // Waits for the recorded events and adds their times to the totals.
  void harvest();

  std::string name_;
  int depth_ = 0;
  std::string key_;
  Clock::time_point op_start_, first_, last_;
  bool started_ = false;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> spare_;
  std::map<std::string, Totals> totals_;
};

}  // namespace photon::cuda
