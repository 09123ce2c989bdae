#include "backend/cpu/linear.h"

#include <cblas.h>

namespace photon::cpu {

namespace {
constexpr int kGemvRows = 4;
}

void linear(const float* x, int n, int in, const float* w, int out, const float* bias, float* y,
            bool accumulate) {
  if (n <= 0 || out <= 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  if (n <= kGemvRows) {
    // Decoding applies each weight matrix to a handful of rows. GEMM would pack all of W for
    // them (as costly as the product itself); GEMV streams W once per row from cache instead.
    for (int r = 0; r < n; ++r)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x + static_cast<long>(r) * in,
                  1, beta, y + static_cast<long>(r) * out, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, beta, y,
                out);
  }
  if (bias) {
    for (int r = 0; r < n; ++r) {
      float* row = y + static_cast<long>(r) * out;
      for (int o = 0; o < out; ++o) row[o] += bias[o];
    }
  }
}

}  // namespace photon::cpu
