#include "cpu/gemm.h"

#include <cblas.h>

namespace photon::cpu {

void linear(const float* x, int n, int in, const float* w, int out, const float* bias, float* y,
            bool accumulate) {
  if (n <= 0 || out <= 0) return;
  const float beta = accumulate ? 1.0f : 0.0f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, beta, y, out);
  if (bias) {
    for (int r = 0; r < n; ++r) {
      float* row = y + static_cast<long>(r) * out;
      for (int o = 0; o < out; ++o) row[o] += bias[o];
    }
  }
}

}  // namespace photon::cpu
