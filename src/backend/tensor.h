// Buffers a backend owns and the tensor views the model logic passes to its ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/error.h"

namespace photon {

class Backend;

// Memory of one backend. Only that backend reads or writes it (base() is host memory on the CPU,
// device memory on a GPU).
class Buffer {
 public:
  Buffer(const Backend* owner, void* base, size_t bytes)
      : owner_(owner), base_(base), bytes_(bytes) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const Backend* owner() const { return owner_; }
  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  const Backend* owner_;
  void* base_;
  size_t bytes_;
};

// A row-major [rows, cols] view of `dtype` elements at `offset` bytes into a buffer.
struct Tensor {
  const Buffer* buffer = nullptr;
  size_t offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::F32;

  size_t row_bytes() const { return dtype_bytes(dtype, static_cast<uint64_t>(cols)); }
  size_t bytes() const { return static_cast<size_t>(rows) * row_bytes(); }
  // Rows [first, first + n).
  Tensor slice(int64_t first, int64_t n) const {
    if (first < 0 || n < 0 || first + n > rows)
      fail(PHOTON_ERR_INTERNAL, "tensor: rows [" + std::to_string(first) + ", " +
                                    std::to_string(first + n) + ") of " + std::to_string(rows));
    return {buffer, offset + static_cast<size_t>(first) * row_bytes(), n, cols, dtype};
  }
  Tensor row(int64_t r) const { return slice(r, 1); }
  // The same elements as [new_rows, new_cols].
  Tensor view(int64_t new_rows, int64_t new_cols) const {
    if (new_rows * new_cols != rows * cols)
      fail(PHOTON_ERR_INTERNAL, "tensor: cannot view " + std::to_string(rows) + "x" +
                                    std::to_string(cols) + " as " + std::to_string(new_rows) + "x" +
                                    std::to_string(new_cols));
    return {buffer, offset, new_rows, new_cols, dtype};
  }
};

// A tensor that owns its buffer.
class Matrix {
 public:
  Matrix() = default;
  Matrix(std::unique_ptr<Buffer> buffer, int64_t rows, int64_t cols, DType dtype)
      : buffer_(std::move(buffer)), tensor_{buffer_.get(), 0, rows, cols, dtype} {}

  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }
  int64_t rows() const { return tensor_.rows; }
  int64_t cols() const { return tensor_.cols; }
  Tensor slice(int64_t first, int64_t n) const { return tensor_.slice(first, n); }
  Tensor row(int64_t r) const { return tensor_.row(r); }

 private:
  std::unique_ptr<Buffer> buffer_;
  Tensor tensor_;
};

}  // namespace photon
