// The host address of a CPU tensor: the CPU backend's buffers are host memory (its own
// allocations, and views of the model file's mapping).
#pragma once

#include "backend/tensor.h"

namespace photon::cpu {

// The tensor's first element; null for a tensor without a buffer (one of no bytes).
template <class T = float>
T* host(const Tensor& t) {
  if (t.buffer == nullptr) return nullptr;
  return reinterpret_cast<T*>(static_cast<char*>(t.buffer->base()) + t.offset);
}

}  // namespace photon::cpu
