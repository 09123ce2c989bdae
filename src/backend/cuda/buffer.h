// Device memory: an owning buffer, and a bump arena for per-step scratch. Steady decoding takes its
// scratch from an Arena, so a step never calls cudaMalloc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
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

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// One DeviceBuffer handed out front to back in 256-byte aligned pieces. Pieces are returned
// together, by rewinding to a mark. Work is issued on one stream, so a piece returned while a
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
  size_t capacity() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
  std::string name_;
  size_t used_ = 0;
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

}  // namespace photon::cuda
