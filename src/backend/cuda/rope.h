// Rotary position embedding on the device, rotate-half convention (spec section 2), with the same
// table semantics as cpu::RopeTable: cos/sin of pos * theta_i evaluated in double, then rounded to
// f32, built once per stack call and shared by its layers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace photon::cuda {

// theta_i = rope_theta^(-2i/head_dim) for i in [0, head_dim/2), computed on the host by the same
// expression as cpu::RopeTable::build, so the angles pos * theta_i are bit-identical to the CPU's.
// Upload once per stack shape.
std::vector<double> rope_inv_freq(int head_dim, float theta);

// positions: [n] int64; inv_freq: [half] double; cos, sin: [n, half] f32 -- all on the device.
// The device's double cos/sin are within 2 ulp of double, so the f32 table equals the CPU's
// except where a value lies within that distance of an f32 rounding boundary (then 1 f32 ulp).
void rope_table(const int64_t* positions, int n, const double* inv_freq, int half, float* cos,
                float* sin, cudaStream_t stream);

// x: [n, heads * head_dim] f32 on the device; rotates every head of row r with table row r.
void rope_apply(float* x, int n, int heads, int head_dim, const float* cos, const float* sin,
                cudaStream_t stream);

}  // namespace photon::cuda
