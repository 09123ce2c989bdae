// y[n, out] (+)= x[n, in] . W[out, in]^T  -- a linear layer over rows (spec section 2), via BLAS.
#pragma once

namespace photon::cpu {

// accumulate: y += x W^T instead of y = x W^T. bias (may be null) is added to every row.
void linear(const float* x, int n, int in, const float* w, int out, const float* bias, float* y,
            bool accumulate = false);

}  // namespace photon::cpu
