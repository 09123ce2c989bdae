// Scratch tensors in backend memory, grown on demand and reused, so that steady decoding allocates
// nothing. Each part of the engine owns the scratch it writes, as a struct of named tensors
// (StackScratch, LevelScratch, ...) that holds its callees' structs, and hands each callee its own:
// a callee can reach no tensor of its caller.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace photon {

class Scratch {
 public:
  // An f32 [rows, cols] tensor, its contents undefined, valid until the next get().
  Tensor get(Backend& backend, int64_t rows, int64_t cols) {
    const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(cols) * sizeof(float);
    if (!buffer_ || buffer_->bytes() < bytes) {
      buffer_.reset();  // the old contents are not needed: free before asking for more
      buffer_ = backend.allocate(bytes, "scratch");
    }
    return {buffer_.get(), 0, rows, cols, DType::F32};
  }

 private:
  std::unique_ptr<Buffer> buffer_;
};

}  // namespace photon
