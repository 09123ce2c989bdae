// The per-op test (tests/unit/test_backend_ops.cpp) for the CUDA backend, made as a model makes
// it and held through the Backend interface, against the CPU backend with portable kernels at the
// same precision, within the bounds of docs/cuda.md: f32 arithmetic (norms, RoPE, SwiGLU,
// attention) within 1e-5 relative; products of 16-bit weights (two-term activations at exact
// precision, the input rounded to bf16 at bf16 precision, as the CPU rounds it) within 3e-5; f32
// weights, stored as bf16, within 1e-2 (and exactly their bf16 rounding where they are read back
// or gathered; vectors stay f32), or, kept in f32 (exact_f32), within 1e-5; copies, gathers of
// 16-bit tables and KV appends exact; sampled tokens equal. Without a device every test skips,
// saying why.
#include <vector>

#include "backend_ops.h"
#include "gpu_test.h"

namespace photon::testing {
namespace {

using Kind = Tolerance::Kind;

Tolerance against_cpu(bool exact_f32, Op op, DType dtype, int64_t rows) {
  const bool bf16_stored = dtype == DType::F32 && !exact_f32;
  switch (op) {
    case Op::Weight: return {bf16_stored && rows > 1 ? Kind::Bf16 : Kind::Bits};
    case Op::Embed: return {bf16_stored ? Kind::Bf16 : Kind::Bits};
    case Op::Transfer:
    case Op::CopyRows:
    case Op::KvAppend: return {Kind::Bits};
    case Op::Linear:
    case Op::LinearGroup:
      return {Kind::Relative, bf16_stored ? 1e-2 : dtype == DType::F32 ? 1e-5 : 3e-5};
    case Op::RopeTable: return {Kind::Absolute, 1.2e-7};
    case Op::Sample:
    case Op::Logprobs: return {Kind::Relative, 2e-6};
    case Op::Rmsnorm:
    case Op::Rope:
    case Op::Swiglu:
    case Op::Attention: return {Kind::Relative, 1e-5};
  }
  return {Kind::Bits};
}

BackendUnderTest cuda(bool exact_f32, Precision precision) {
  std::string label = exact_f32 ? "cuda_exact_f32" : "cuda";
  if (precision == Precision::Bf16) label += "_bf16";
  return {
      .label = label,
      .make = [exact_f32, precision] { return gpu_test::cuda_backend(exact_f32, precision); },
      .precision = precision,
      .weight_types = {DType::F32, DType::BF16, DType::F16},
      .tolerance = [exact_f32](Op op, DType dtype,
                               int64_t rows) { return against_cpu(exact_f32, op, dtype, rows); }};
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps,
                         ::testing::Values(cuda(false, Precision::Exact),
                                           cuda(true, Precision::Exact),
                                           cuda(false, Precision::Bf16)),
                         backend_label);

}  // namespace photon::testing
