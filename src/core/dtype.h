// Storage dtypes of the model file and their conversion to the f32 compute type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace photon {

enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2 };

inline size_t dtype_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}
const char* dtype_name(DType t);
// Parses "f32" | "f16" | "bf16"; returns false for anything else.
bool dtype_from_name(const std::string& name, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Widens n stored values of type t at src into f32 at dst.
void convert_to_f32(DType t, const void* src, float* dst, size_t n);
// Narrows n f32 values into type t at dst.
void convert_from_f32(DType t, const float* src, void* dst, size_t n);

}  // namespace photon
