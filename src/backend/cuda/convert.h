// Storage-type conversion on the device: f32 <-> bf16 / f16, rounding to nearest even like
// photon::convert_from_f32. Used for GEMM operands and bf16 KV caches.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"

namespace photon::cuda {

// src: [n] f32; dst: [n] of type `to`. Both on the device.
void convert_from_f32(DType to, const float* src, void* dst, size_t n, cudaStream_t stream);
// src: [n] of type `from`; dst: [n] f32. Both on the device.
void convert_to_f32(DType from, const void* src, float* dst, size_t n, cudaStream_t stream);

}  // namespace photon::cuda
