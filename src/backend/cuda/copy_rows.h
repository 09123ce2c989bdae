// Many device-to-device copies in one launch: the backend's copy_rows (window outputs into the
// next level's rows, lanes into the LM head's rows, cached states into batches), which would
// otherwise be one cudaMemcpyAsync each.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace photon::cuda {

struct CopyDescriptor {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// descriptors: [n] on the device; none may overlap another's destination (the caller checks and
// falls back to ordered copies). max_bytes: the largest copy, which sizes the grid.
void copy_launch(const CopyDescriptor* descriptors, int n, size_t max_bytes, cudaStream_t stream);

}  // namespace photon::cuda
