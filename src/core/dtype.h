// Storage dtypes of the model file and their conversion to the f32 compute type.
//
// Q8 is a block type: each run of 32 consecutive values of a row is stored in 34 bytes, a bf16
// scale d then 32 int8 q in [-127, 127], and stands for the values d * q (exact in f32: d has 8
// significant bits, q 7). Its arrays hold whole blocks: n values with n a multiple of 32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace photon {

enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, Q8 = 3 };

constexpr int kQ8Block = 32;       // values per Q8 block
constexpr int kQ8BlockBytes = 34;  // its bf16 scale and 32 int8 values

// Bytes of one element of the element types (f32, f16, bf16); not for Q8 (dtype_bytes).
inline size_t dtype_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}
// Bytes of n values of type t; for Q8, n is a multiple of kQ8Block.
inline uint64_t dtype_bytes(DType t, uint64_t n) {
  return t == DType::Q8 ? n / kQ8Block * kQ8BlockBytes : n * dtype_size(t);
}
const char* dtype_name(DType t);
// Parses "f32" | "f16" | "bf16" | "q8"; returns false for anything else.
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

// The index of the first of n stored values of type t that is NaN or infinite, or -1. For Q8, the
// first value of the first block whose scale is (its values d * q are then all NaN or infinite).
int64_t first_non_finite(DType t, const void* data, uint64_t n);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Widens n stored values of type t at src into f32 at dst.
void convert_to_f32(DType t, const void* src, float* dst, size_t n);
// Narrows n f32 values into type t at dst. Q8 quantizes each block of 32 values w: d = the bf16
// rounding of max |w| / 127, q = w / d rounded to nearest even and clamped to [-127, 127] (all
// zero when d is 0), in f32 arithmetic.
void convert_from_f32(DType t, const float* src, void* dst, size_t n);

}  // namespace photon
