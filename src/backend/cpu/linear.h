// y[n, out] (+)= x[n, in] . W[out, in]^T (+ bias) -- a linear layer over rows (spec section 2),
// with W read in its stored type (f32, bf16 or f16) and f32 arithmetic.
#pragma once

#include <span>

#include "backend/cpu/skinny_gemm.h"
#include "backend/descriptors.h"

namespace photon::cpu {

// Up to kernels.max_rows rows (decoding; with AVX-512 also RecGen's sibling windows and
// prompts, up to 4,096 rows) run the skinny kernels (skinny_gemm.h), whose results do not depend
// on the row count or the threads; more rows run BLAS's GEMM, 16-bit weights widened a slice at a
// time. Either splits the outputs over at most `threads` threads, BLAS itself running
// single-threaded (use_blas_single_threaded). accumulate: y += x W^T instead of y = x W^T. bias
// (may be null) is then added to every row.
void linear(const float* x, int n, const WeightMatrix& w, const float* bias, float* y,
            bool accumulate, const SkinnyKernels& kernels, int threads);

// linear() of one input with several weight matrices of its width, without biases (attention's Q,
// K and V; the FFN's gate and up): each result the same bits as its own linear() call, the skinny
// kernels' work items of all of them in one parallel region.
void linear_group(const float* x, int n, std::span<const Product> products,
                  const SkinnyKernels& kernels, int threads);

// Sets the BLAS library to one thread for the whole process, once: the CPU backend parallelizes
// over output slices itself, within each model's thread budget, which BLAS's single global thread
// count could not honour for several models at once.
void use_blas_single_threaded();

}  // namespace photon::cpu
