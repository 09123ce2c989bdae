#include "backend/cuda/chunker.h"

#include "backend/cuda/rmsnorm.h"
#include "core/error.h"

namespace photon::cuda {

void chunker_linear(Gemm& gemm, const float* a, int m, int width, const float* norm, float eps,
                    const DeviceMatrix& proj, const float* bias, float* out, Arena& scratch,
                    cudaStream_t stream) {
  if (m <= 0) return;
  check(proj.cols == width, PHOTON_ERR_INTERNAL,
        "cuda::chunker_linear: the projection's width differs from the chunk's");
  ArenaScope scope(scratch);
  float* normed = scratch.take<float>(static_cast<size_t>(m) * width, "chunker norm");
  rmsnorm(a, norm, normed, m, width, eps, stream);
  gemm.linear(normed, m, proj, bias, out, /*accumulate=*/false, scratch, stream);
}

}  // namespace photon::cuda
