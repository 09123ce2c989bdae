// Linear layers on the device through cuBLASLt: y[n, out] (+)= x[n, in] . W[out, in]^T (+ bias)
// (spec section 2).
//
// Precision: activations and outputs are f32; every product accumulates in f32.
// - bf16 (or f16) weights: x is rounded to the weight's type (nearest even) for the product, so
//   both operands are 16-bit and the tensor cores run at full rate. Relative error against an f32
//   product of the same weights: about 2^-9 per activation, ~1e-3 on a row (bf16).
// - f32 weights: TF32 tensor-core products (10-bit mantissas, f32 accumulation), ~3e-4 relative;
//   or, for a Gemm made with tf32 = false, plain f32 products (CUDA cores, exact to rounding).
// The bias is added in f32 by the GEMM's epilogue.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "backend/cuda/buffer.h"
#include "core/dtype.h"

namespace photon::cuda {

// A weight matrix [rows = out, cols = in], row-major, in device memory.
struct DeviceMatrix {
  const void* data = nullptr;
  DType dtype = DType::BF16;
  int rows = 0;
  int cols = 0;
};

// A cuBLASLt handle, its workspace and one plan (descriptors and the heuristic's algorithm) per
// distinct problem, chosen once and reused. Not thread-safe; use one Gemm per stream.
class Gemm {
 public:
  explicit Gemm(size_t workspace_bytes = size_t{32} << 20, bool tf32 = true);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x: [n, w.cols] f32; y: [n, w.rows] f32; bias: [w.rows] f32 or null -- all on the device.
  // accumulate adds the product to y. 16-bit weights take n * w.cols * 2 bytes of scratch for the
  // rounded activations, returned before this returns.
  void linear(const float* x, int n, const DeviceMatrix& w, const float* bias, float* y,
              bool accumulate, Arena& scratch, cudaStream_t stream);

  // Distinct problems planned so far (tests and benchmarks).
  size_t plans() const { return plans_.size(); }

 private:
  struct PlanKey {
    int n, in, out;
    DType dtype;
    bool accumulate, bias;
    uint32_t align_a, align_b, align_c;  // the operands' pointer alignments, up to 256 bytes
    auto operator<=>(const PlanKey&) const = default;
  };
  struct Plan;

  Plan& plan_for(const PlanKey& key);

  bool tf32_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace photon::cuda
