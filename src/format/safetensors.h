// Reading safetensors files: an 8-byte little-endian header length N, N bytes of JSON naming each
// tensor's dtype, shape and byte range, then the raw little-endian data. The file is mapped and
// its header verified as strictly as a model file's: every range, size and name is checked, with
// overflow-safe arithmetic, before any tensor is read, and every failure names the file (and the
// tensor, where one is at fault).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace photon {

// Largest header accepted (the limit of the safetensors reference implementation).
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of the tensor's first byte, from the start of the file
  uint64_t size = 0;    // bytes
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Maps and verifies `path`. Throws Error: PHOTON_ERR_IO (cannot open or map), _TRUNCATED (the
  // header length runs past the end), _CORRUPT (header not JSON, not an object, unknown or missing
  // fields, duplicate keys, overlapping or unused data), _SIZE_OVERFLOW, _TENSOR_SHAPE (size
  // disagrees with shape and dtype), _TENSOR_BOUNDS (range outside the data), _UNSUPPORTED (a
  // dtype other than F32, F16, BF16).
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data order
  const SafetensorsTensor* find(const std::string& name) const;
  // The header's optional "__metadata__" (string to string).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Widens one of this file's tensors to f32 at dst (elements() values). Each part of the mapping
  // is handed back to the operating system once read, so that reading a whole checkpoint keeps
  // only dst resident, not the file.
  void read_f32(const SafetensorsTensor& tensor, float* dst) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

}  // namespace photon
