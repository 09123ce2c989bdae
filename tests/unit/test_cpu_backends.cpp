// The per-op test (test_backend_ops.cpp) for the CPU backend's kernel sets that this build has:
// the portable set is the oracle, checked against double precision; AVX2 and AVX-512 give its
// bits on every op but the products, which agree with it to within f32 rounding
// (backend/cpu/skinny_gemm.h), and AVX-512 gives AVX2's bits on every op. At int8 precision the
// q8 products give the portable set's bits as well (the portable set at int8 is checked against
// double precision in test_precision.cpp). A set this processor lacks skips, saying so.
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_ops.h"

namespace photon::testing {
namespace {

using cpu::CpuKernels;

std::function<std::unique_ptr<Backend>()> cpu_with(CpuKernels kernels,
                                                   Precision precision = Precision::Exact) {
  return [kernels, precision] { return std::make_unique<cpu::CpuBackend>(0, kernels, precision); };
}

bool product(Op op) {
  return op == Op::Linear || op == Op::LinearGroup;
}

Tolerance against_portable(Op op, DType, int64_t) {
  return product(op) ? Tolerance{Tolerance::Kind::Rounding} : Tolerance{Tolerance::Kind::Bits};
}

Tolerance int8_against_portable(Op op, DType dtype, int64_t rows) {
  return dtype == DType::Q8 ? Tolerance{Tolerance::Kind::Bits} : against_portable(op, dtype, rows);
}

Tolerance same_bits(Op, DType, int64_t) {
  return {Tolerance::Kind::Bits};
}

std::vector<BackendUnderTest> cpu_backends() {
  return {
      {.label = "cpu_portable", .make = cpu_with(CpuKernels::Portable), .oracle = true},
      {.label = "cpu_avx2", .make = cpu_with(CpuKernels::Avx2), .tolerance = against_portable},
      {.label = "cpu_avx512",
       .make = cpu_with(CpuKernels::Avx512),
       .tolerance = against_portable,
       .twin_label = "cpu avx2",
       .twin = cpu_with(CpuKernels::Avx2),
       .twin_tolerance = same_bits},
      {.label = "cpu_avx2_int8",
       .make = cpu_with(CpuKernels::Avx2, Precision::Int8),
       .precision = Precision::Int8,
       .tolerance = int8_against_portable},
      {.label = "cpu_avx512_int8",
       .make = cpu_with(CpuKernels::Avx512, Precision::Int8),
       .precision = Precision::Int8,
       .tolerance = int8_against_portable,
       .twin_label = "cpu avx2 at int8",
       .twin = cpu_with(CpuKernels::Avx2, Precision::Int8),
       .twin_tolerance = same_bits},
  };
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::ValuesIn(cpu_backends()), backend_label);

}  // namespace photon::testing
