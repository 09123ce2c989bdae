// Device memory: an owning buffer, a bump arena for per-step scratch, and host <-> device copies.
// Steady decoding takes its scratch from an Arena, so a step calls cudaMalloc never and can be
// captured into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace photon::cuda {

// "1.50 GiB", "12.00 MiB" or "300 bytes", for messages.
std::string describe_bytes(size_t bytes);

// cudaMalloc'd memory, freed on destruction. Fails with PHOTON_ERR_OUT_OF_MEMORY naming `what`
// and the size when the device cannot hold it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, std::string_view what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// One DeviceBuffer handed out front to back in 256-byte aligned pieces. Pieces are returned all
// at once (reset, or rewind to a mark). Work is issued on one stream, so a piece returned while a
// kernel still reads it is only reused by work queued after that kernel.
class Arena {
 public:
  static constexpr size_t kAlignment = 256;

  Arena() = default;
  Arena(size_t bytes, std::string_view name);

  // Fails with PHOTON_ERR_OUT_OF_MEMORY naming the arena and `what` when the arena is full.
  void* take_bytes(size_t bytes, std::string_view what);
  template <class T>
  T* take(size_t count, std::string_view what) {
    return static_cast<T*>(take_bytes(count * sizeof(T), what));
  }

  size_t mark() const { return used_; }
  void rewind(size_t mark) { used_ = mark; }
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
  std::string name_;
  size_t used_ = 0, peak_ = 0;
};

// Returns an arena to its mark at the end of a scope.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& arena) : arena_(arena), mark_(arena.mark()) {}
  ~ArenaScope() { arena_.rewind(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& arena_;
  size_t mark_;
};

// Queues a host -> device copy on the stream. A pageable `src` may be reused once this returns.
void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// Device -> host; returns when the data has arrived (it waits for the stream).
void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream);

template <class T>
void copy_to_device(T* dst, std::span<const T> src, cudaStream_t stream) {
  copy_to_device(static_cast<void*>(dst), src.data(), src.size_bytes(), stream);
}
template <class T>
void copy_to_host(std::span<T> dst, const T* src, cudaStream_t stream) {
  copy_to_host(dst.data(), static_cast<const void*>(src), dst.size_bytes(), stream);
}

// Copies host data into fresh arena memory (descriptors and small per-step tables).
template <class T>
T* stage(Arena& arena, std::span<const T> src, std::string_view what, cudaStream_t stream) {
  T* dst = arena.take<T>(src.size(), what);
  copy_to_device(dst, src, stream);
  return dst;
}

}  // namespace photon::cuda
