#include "backend/cuda/common.cuh"
#include "backend/cuda/embedding.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 128;

// One block per output row. table: [rows, dim]; ids: [n]; out: [n, dim].
template <class T>
__global__ void embedding_kernel(const T* table, int rows, int dim, const int32_t* ids,
                                 float* out) {
  const int id = ids[blockIdx.x];
  float* o = out + static_cast<size_t>(blockIdx.x) * dim;
  if (id < 0 || id >= rows) {
    for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = __int_as_float(0x7fc00000);
    return;
  }
  const T* src = table + static_cast<size_t>(id) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = to_float(src[i]);
}

template <class T>
void launch(const void* table, int rows, int dim, const int32_t* ids, int n, float* out,
            cudaStream_t stream) {
  embedding_kernel<<<n, kThreads, 0, stream>>>(static_cast<const T*>(table), rows, dim, ids, out);
  check_launch("embedding_kernel");
}

}  // namespace

void embedding(const void* table, DType dtype, int rows, int dim, const int32_t* ids, int n,
               float* out, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  switch (dtype) {
    case DType::F32: return launch<float>(table, rows, dim, ids, n, out, stream);
    case DType::BF16: return launch<__nv_bfloat16>(table, rows, dim, ids, n, out, stream);
    case DType::F16: return launch<__half>(table, rows, dim, ids, n, out, stream);
    case DType::Q8: q8_unsupported("embedding_kernel");
  }
}

}  // namespace photon::cuda
