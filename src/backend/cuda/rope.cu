#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/rope.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;

// positions: [n]; inv_freq: [half]; cos, sin: [n, half].
__global__ void rope_table_kernel(const int64_t* positions, size_t count, const double* inv_freq,
                                  int half, float* cos_out, float* sin_out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t e = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; e < count;
       e += stride) {
    const double angle = static_cast<double>(positions[e / half]) * inv_freq[e % half];
    double s, c;
    sincos(angle, &s, &c);
    cos_out[e] = static_cast<float>(c);
    sin_out[e] = static_cast<float>(s);
  }
}

// x: [n, heads, 2, half]; cos, sin: [n, half]. One thread per rotated pair.
__global__ void rope_apply_kernel(float* x, size_t pairs, int heads, int half, const float* cos_t,
                                  const float* sin_t) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  const size_t per_row = static_cast<size_t>(heads) * half;
  for (size_t e = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; e < pairs;
       e += stride) {
    const size_t row = e / per_row, i = e % half;
    float* v = x + (e / half) * 2 * half;  // this row's head
    const float c = cos_t[row * half + i], s = sin_t[row * half + i];
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

}  // namespace

std::vector<double> rope_inv_freq(int head_dim, float theta) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
  return inv_freq;
}

void rope_table(const int64_t* positions, int n, const double* inv_freq, int half, float* cos,
                float* sin, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(n) * half;
  if (count == 0) return;
  rope_table_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(positions, count, inv_freq,
                                                                        half, cos, sin);
  check_launch("rope_table_kernel");
}

void rope_apply(float* x, int n, int heads, int head_dim, const float* cos, const float* sin,
                cudaStream_t stream) {
  const int half = head_dim / 2;
  const size_t pairs = static_cast<size_t>(n) * heads * half;
  if (pairs == 0) return;
  rope_apply_kernel<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(x, pairs, heads, half, cos,
                                                                        sin);
  check_launch("rope_apply_kernel");
}

}  // namespace photon::cuda
