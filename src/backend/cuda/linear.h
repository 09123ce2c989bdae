// Linear layers on the device through cuBLASLt: y[n, out] (+)= x[n, in] . W[out, in]^T (+ bias)
// (spec section 2).
//
// Precision: activations and outputs are f32; every product accumulates in f32.
// - bf16 (or f16) weights at Precision::Bf16: x is rounded to bf16 once (round_activations.h) and
//   one tensor-core GEMM multiplies it, as PyTorch and the serving engines do; half the
//   tensor-core work of the exact path and no partial products.
// - bf16 (or f16) weights at Precision::Exact: x is split into two 16-bit terms, x = hi + lo
//   (split_activations.h), and one tensor-core GEMM multiplies the stacked rows [hi; lo], whose
//   halves are summed. The weights are read once, so decode (bound by reading weights) costs the
//   same as one 16-bit product, and prompts twice the tensor-core work. From 256 rows, where the
//   tensor cores bound the product, two GEMMs (hi, then lo accumulating) write y directly instead.
//   The activations keep about 17 bits, so the result matches an f32 product of the same weights
//   (the CPU engine's) to ~1e-5 relative, where rounding x to bf16 gives ~1e-3 per row and up to
//   ~0.1 in the log-probabilities of small random models.
// - f32 weights (kept only by a backend with exact_f32; others convert them to bf16 at upload):
//   plain f32 products (CUDA cores, exact to rounding).
// The bias is added in f32 by the GEMM's epilogue.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <span>

#include "backend/backend.h"
#include "backend/cuda/buffer.h"
#include "backend/descriptors.h"
#include "core/dtype.h"

namespace photon::cuda {

// A cuBLASLt handle, its workspace and one plan (descriptors and the heuristic's algorithm) per
// distinct problem, chosen once and reused. Not thread-safe; use one Gemm per stream.
class Gemm {
 public:
  Gemm(size_t workspace_bytes, Precision precision);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // x: [n, w.in] f32; y: [n, w.out] f32; bias: [w.out] f32 or null -- all on the device (w in
  // device memory). accumulate adds the product to y. 16-bit weights take scratch_bytes(n, w) of
  // scratch in up to two pieces, returned before this returns.
  void linear(const float* x, int n, const WeightMatrix& w, const float* bias, float* y,
              bool accumulate, Arena& scratch, cudaStream_t stream);
  size_t scratch_bytes(int n, const WeightMatrix& w) const;
  // linear() of one input with several weight matrices of its width, without biases (attention's
  // Q, K, V; the FFN's gate, up): 16-bit weights of one type round or split x once for all of
  // them.
  void linear_group(const float* x, int n, std::span<const Product> products, Arena& scratch,
                    cudaStream_t stream);
  size_t scratch_bytes(int n, std::span<const Product> products) const;

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
  // linear_group with `bias` added to the products' outputs (only ever one product's).
  void products(const float* x, int n, std::span<const Product> products, const float* bias,
                Arena& scratch, cudaStream_t stream);
  // y[n, w.out] (+)= operand[n, w.in] . w^T (+ bias) in one cuBLASLt call; operand in w's type.
  void product(const void* operand, int n, const WeightMatrix& w, const float* bias, float* y,
               bool accumulate, cudaStream_t stream);

  const Precision precision_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace photon::cuda
