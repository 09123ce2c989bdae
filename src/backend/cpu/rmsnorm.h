// RMSNorm over rows: y = x / sqrt(mean(x^2) + eps) * w   (spec section 2).
#pragma once

namespace photon::cpu {

// x, y: [n, d] (may alias); w: [d]. At most `threads` threads.
void rmsnorm(const float* x, const float* w, float* y, int n, int d, float eps, int threads = 1);

}  // namespace photon::cpu
