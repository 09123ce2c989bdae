// Row gather on the device: token embeddings (spec 3.2 / 4) from f32, f16 or bf16 tables, and the
// gather of f32 latents into a chunker's concat layout (an f32 "table" of child states).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace photon::cuda {

// table: [rows, dim] of `dtype`; ids: [n] int32; out: [n, dim] f32 -- all on the device.
// out[i] = table[ids[i]] widened to f32. An id outside [0, rows) gives a row of NaN (the host
// validates ids before they reach the device; NaN keeps a slip visible instead of reading
// out of bounds).
void embedding(const void* table, DType dtype, int rows, int dim, const int32_t* ids, int n,
               float* out, cudaStream_t stream);

}  // namespace photon::cuda
