#include "backend/cuda/profiler.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace photon::cuda {

namespace {

// Events pending before the profiler waits for them (a synchronization every this many ops).
constexpr size_t kHarvestEvery = 4096;

}  // namespace

std::unique_ptr<Profiler> Profiler::from_environment(std::string backend_name) {
  const char* value = std::getenv("PHOTON_CUDA_PROFILE");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "0") == 0) return nullptr;
  return std::make_unique<Profiler>(std::move(backend_name));
}

cudaEvent_t Profiler::event() {
  if (!spare_.empty()) {
    cudaEvent_t e = spare_.back();
    spare_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

void Profiler::begin(const char* op, cudaStream_t stream) {
  if (depth_++ > 0) return;
  key_ = op;
  op_start_ = Clock::now();
  if (!started_) first_ = op_start_, started_ = true;
  cudaEvent_t start = event();
  if (start != nullptr) cudaEventRecord(start, stream);
  pending_.push_back({{}, start, nullptr});
}

void Profiler::shape(std::initializer_list<int64_t> dims) {
  if (depth_ != 1 || dims.size() == 0) return;
  int64_t rows = 1;
  while (rows < *dims.begin()) rows *= 2;
  key_.append(" <=").append(std::to_string(rows));
  for (const int64_t* d = dims.begin() + 1; d != dims.end(); ++d)
    key_.append("x").append(std::to_string(*d));
}

void Profiler::end(cudaStream_t stream) {
  if (--depth_ > 0) return;
  Pending& p = pending_.back();
  p.key = key_;
  p.stop = event();
  if (p.stop != nullptr) cudaEventRecord(p.stop, stream);
  last_ = Clock::now();
  Totals& totals = totals_[key_];
  totals.host_s += std::chrono::duration<double>(last_ - op_start_).count();
  ++totals.calls;
  if (pending_.size() >= kHarvestEvery) harvest();
}

void Profiler::harvest() {
  for (Pending& p : pending_) {
    float ms = 0;
    if (p.start != nullptr && p.stop != nullptr && cudaEventSynchronize(p.stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      totals_[p.key].device_s += ms / 1e3;
    }
    for (cudaEvent_t e : {p.start, p.stop})
      if (e != nullptr) spare_.push_back(e);
  }
  pending_.clear();
  cudaGetLastError();
}

Profiler::~Profiler() {
  harvest();
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  cudaGetLastError();
  if (!started_) return;
  Totals all;
  for (const auto& [op, t] : totals_) {
    all.calls += t.calls;
    all.host_s += t.host_s;
    all.device_s += t.device_s;
  }
  const double wall = std::chrono::duration<double>(last_ - first_).count();
  std::fprintf(stderr,
               "photon cuda profile (%s): %ld ops in %.3f s of wall time; host time in ops "
               "%.3f s, device time %.3f s\n%-40s %10s %12s %12s %14s\n",
               name_.c_str(), all.calls, wall, all.host_s, all.device_s, "op", "calls", "host s",
               "device s", "device us/call");
  for (const auto& [op, t] : totals_) {
    std::fprintf(stderr, "%-40s %10ld %12.3f %12.3f %14.1f\n", op.c_str(), t.calls, t.host_s,
                 t.device_s, t.calls ? t.device_s * 1e6 / static_cast<double>(t.calls) : 0.0);
  }
}

}  // namespace photon::cuda
