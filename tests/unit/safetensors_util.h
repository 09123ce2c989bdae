// safetensors files built byte by byte, for the reader's and the converter's tests and the fuzz
// seeds: valid ones from tensors, and raw ones from any header text.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace photon::test {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16" (or any text, for damaged files)
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// values stored as dtype "F32", "F16" or "BF16".
inline StTensor st_tensor(const std::string& name, const std::string& dtype,
                          std::vector<int64_t> shape, const std::vector<float>& values) {
  const DType t = dtype == "F32" ? DType::F32 : dtype == "F16" ? DType::F16 : DType::BF16;
  StTensor out{name, dtype, std::move(shape), std::vector<uint8_t>(values.size() * dtype_size(t))};
  if (!values.empty()) convert_from_f32(t, values.data(), out.data.data(), values.size());
  return out;
}

// The length, then `header` as given, then `data_bytes` bytes of data (value i is i % 251).
inline std::vector<uint8_t> st_raw(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> 8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i % 251));
  return out;
}

// A valid file: the tensors one after another in the order given, the header padded with
// `padding` spaces (an odd number puts the data at an odd offset).
inline std::vector<uint8_t> st_file(const std::vector<StTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata = {},
                                    size_t padding = 0) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::vector<uint8_t> out = st_raw(header.dump() + std::string(padding, ' '), 0);
  for (const StTensor& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

}  // namespace photon::test
