#include <algorithm>
#include <cstdint>

#include "backend/cuda/copy_rows.h"
#include "backend/cuda/runtime.h"

namespace photon::cuda {

namespace {

constexpr int kThreads = 256;
constexpr size_t kChunk = size_t{64} << 10;  // bytes of one copy per block; a multiple of 16
constexpr unsigned kMaxChunks = 65535;       // gridDim.y

// grid (n, chunks): block (i, c) copies chunks c, c + gridDim.y, ... of copy i, 16 bytes per
// thread and step when both ends and the length allow it, else 4, else 1.
__global__ void __launch_bounds__(kThreads) copy_kernel(const CopyDescriptor* descriptors) {
  const CopyDescriptor d = descriptors[blockIdx.x];
  const uintptr_t bits = reinterpret_cast<uintptr_t>(d.dst) | reinterpret_cast<uintptr_t>(d.src) |
                         static_cast<uintptr_t>(d.bytes);
  const size_t stride = static_cast<size_t>(gridDim.y) * kChunk;
  for (size_t begin = blockIdx.y * kChunk; begin < d.bytes; begin += stride) {
    const size_t end = min(begin + kChunk, d.bytes);
    if ((bits & 15) == 0) {
      const uint4* src = static_cast<const uint4*>(d.src);
      uint4* dst = static_cast<uint4*>(d.dst);
      for (size_t i = begin / 16 + threadIdx.x; i < end / 16; i += kThreads) dst[i] = src[i];
    } else if ((bits & 3) == 0) {
      const uint32_t* src = static_cast<const uint32_t*>(d.src);
      uint32_t* dst = static_cast<uint32_t*>(d.dst);
      for (size_t i = begin / 4 + threadIdx.x; i < end / 4; i += kThreads) dst[i] = src[i];
    } else {
      const unsigned char* src = static_cast<const unsigned char*>(d.src);
      unsigned char* dst = static_cast<unsigned char*>(d.dst);
      for (size_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
    }
  }
}

}  // namespace

void copy_launch(const CopyDescriptor* descriptors, int n, size_t max_bytes, cudaStream_t stream) {
  if (n <= 0 || max_bytes == 0) return;
  const size_t chunks = std::min<size_t>((max_bytes + kChunk - 1) / kChunk, kMaxChunks);
  copy_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(chunks)), kThreads, 0,
                stream>>>(descriptors);
  check_launch("copy_kernel");
}

}  // namespace photon::cuda
