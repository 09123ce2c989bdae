// Linear layers on the device through cuBLASLt: y[n, out] (+)= x[n, in] . W[out, in]^T (+ bias)
// (spec section 2).
//
// Precision: activations and outputs are f32; every product accumulates in f32.
// - bf16 (or f16) weights: x is split into two 16-bit terms, x = hi + lo (split_activations.h), and
//   one tensor-core GEMM multiplies the stacked rows [hi; lo], whose halves are summed. The weights
//   are read once, so decode (bound by reading weights) costs the same as one 16-bit product, and
//   prompts twice the tensor-core work. From 256 rows, where the tensor cores bound the product,
//   two GEMMs (hi, then lo accumulating) write y directly instead. The activations keep about 17
//   bits, so the result matches an f32 product of the same weights (the CPU engine's) to ~1e-5
//   relative, where rounding x to bf16 alone gave ~1e-3 per row and ~0.1 in whole-model
//   log-probabilities.
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
#include <span>

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

// One product of Gemm::linear_group: y[n, w.rows] (+)= x . w^T (+ bias); y, bias f32.
struct GemmProduct {
  DeviceMatrix w;
  const float* bias = nullptr;
  float* y = nullptr;
  bool accumulate = false;
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
  // accumulate adds the product to y. 16-bit weights take scratch_bytes(n, w) of scratch in two
  // pieces, returned before this returns.
  void linear(const float* x, int n, const DeviceMatrix& w, const float* bias, float* y,
              bool accumulate, Arena& scratch, cudaStream_t stream);
  static size_t scratch_bytes(int n, const DeviceMatrix& w);
  // linear() of one input with several weight matrices of its width and type (attention's Q, K,
  // V; the FFN's gate, up): 16-bit weights split x into its two terms once for all of them.
  void linear_group(const float* x, int n, std::span<const GemmProduct> products, Arena& scratch,
                    cudaStream_t stream);
  static size_t scratch_bytes(int n, std::span<const GemmProduct> products);

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
  // y[n, w.rows] (+)= operand[n, w.cols] . w^T (+ bias) in one cuBLASLt call; operand in w's type.
  void product(const void* operand, int n, const DeviceMatrix& w, const float* bias, float* y,
               bool accumulate, cudaStream_t stream);

  bool tf32_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace photon::cuda
