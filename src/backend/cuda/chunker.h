// Chunkers on the device (spec 3.2). a_u = concat(children's latents) is the row-major
// [M, C * D_{l-1}] view of the children's [M * C, D_{l-1}] rows, so the concat chunker is that
// view itself (gather scattered children first with cuda::embedding on an f32 table), and the
// linear chunker is proj(RMSNorm(a; norm)) + bias.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/buffer.h"
#include "backend/cuda/linear.h"

namespace photon::cuda {

// a: [m, width] f32 with width = C * D_{l-1}; norm: [width] f32; proj: [D_l, width];
// bias: [D_l] f32; out: [m, D_l] f32 -- all on the device. Takes m * width f32 of scratch.
void chunker_linear(Gemm& gemm, const float* a, int m, int width, const float* norm, float eps,
                    const DeviceMatrix& proj, const float* bias, float* out, Arena& scratch,
                    cudaStream_t stream);

}  // namespace photon::cuda
