// Scratch tensors of one runner in backend memory, grown on demand and reused, so that steady
// decoding allocates nothing. A slot's tensor stays valid until the same slot is asked for again.
#pragma once

#include <array>
#include <memory>

#include "backend/backend.h"

namespace photon {

enum class Slot {
  // stack_forward
  Normed,
  Query,
  Key,
  Value,
  Attended,
  Gate,
  Up,
  Rope,
  // encode_units and run_windows
  Rows,
  Chunk,
  Cond,
  // the callers of those: prefill, steps, plans, lanes, scoring
  Embedded,
  LatentA,
  LatentB,
  Pending,
  Hidden,
  Logits,
  Count
};

class Workspace {
 public:
  explicit Workspace(Backend& backend) : backend_(&backend) {}

  // An f32 [rows, cols] tensor, its contents undefined.
  Tensor get(Slot slot, int64_t rows, int64_t cols) {
    std::unique_ptr<Buffer>& buffer = buffers_[static_cast<size_t>(slot)];
    const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols) * sizeof(float);
    if (!buffer || buffer->bytes() < bytes) {
      buffer.reset();  // the old contents are not needed: free before asking for more
      buffer = backend_->allocate(bytes, "scratch");
    }
    return {buffer.get(), 0, rows, cols, DType::F32};
  }
  Backend& backend() const { return *backend_; }

 private:
  Backend* backend_;
  std::array<std::unique_ptr<Buffer>, static_cast<size_t>(Slot::Count)> buffers_;
};

}  // namespace photon
