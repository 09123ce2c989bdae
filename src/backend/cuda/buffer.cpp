#include "backend/cuda/buffer.h"

#include <cstdio>
#include <utility>

#include "backend/cuda/runtime.h"

namespace photon::cuda {

std::string describe_bytes(size_t bytes) {
  char text[64];
  if (bytes >= (size_t{1} << 30))
    std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (size_t{1} << 20))
    std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(text, sizeof text, "%zu bytes", bytes);
  return text;
}

DeviceBuffer::DeviceBuffer(size_t bytes, std::string_view what) : bytes_(bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMalloc(&data_, bytes),
             "cudaMalloc of " + describe_bytes(bytes) + " for " + std::string(what));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Arena::Arena(size_t bytes, std::string_view name)
    : buffer_(bytes, "arena " + std::string(name)), name_(name) {}

void* Arena::take_bytes(size_t bytes, std::string_view what) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes || rounded > capacity() - used_)
    fail(PHOTON_ERR_OUT_OF_MEMORY, "device arena '" + name_ + "' (" + describe_bytes(capacity()) +
                                       ", " + describe_bytes(used_) + " in use) cannot hold " +
                                       describe_bytes(bytes) + " more for " + std::string(what));
  void* piece = static_cast<char*>(buffer_.data()) + used_;
  used_ += rounded;
  return piece;
}

}  // namespace photon::cuda
