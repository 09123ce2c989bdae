#include "core/dtype.h"

#include <algorithm>
#include <cmath>

namespace photon {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8: return "q8";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  if (name == "f32")
    *out = DType::F32;
  else if (name == "f16")
    *out = DType::F16;
  else if (name == "bf16")
    *out = DType::BF16;
  else if (name == "q8")
    *out = DType::Q8;
  else
    return false;
  return true;
}

namespace {

// Without branches, so that loops over arrays (f16 KV caches, f16 weights) vectorize: the
// exponent and mantissa shifted into place read as an f32 2^112 too small (the biases are 15 and
// 127), which one multiplication corrects exactly, subnormals included; infinities and NaNs take
// the f32 exponent instead. Local, so that the loops inline it (an exported function of a shared
// library may be interposed, and is called instead).
inline float widen_half(uint16_t h) {
  const uint32_t magnitude = static_cast<uint32_t>(h & 0x7fffu) << 13;
  float value;
  std::memcpy(&value, &magnitude, 4);
  value *= 0x1p112f;
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t special = magnitude >= 0x0f800000u ? ~0u : 0u;
  bits = (bits & ~special) | ((magnitude | 0x7f800000u) & special);
  bits |= static_cast<uint32_t>(h & 0x8000u) << 16;
  std::memcpy(&value, &bits, 4);
  return value;
}

void widen_q8(const uint8_t* src, float* dst, size_t n) {
  for (size_t b = 0; b < n / kQ8Block; ++b, src += kQ8BlockBytes, dst += kQ8Block) {
    uint16_t scale;
    std::memcpy(&scale, src, 2);
    const float d = bf16_to_f32(scale);
    const int8_t* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int i = 0; i < kQ8Block; ++i) dst[i] = d * static_cast<float>(q[i]);
  }
}

void quantize_q8(const float* src, uint8_t* dst, size_t n) {
  for (size_t b = 0; b < n / kQ8Block; ++b, src += kQ8Block, dst += kQ8BlockBytes) {
    float largest = 0.0f;
    for (int i = 0; i < kQ8Block; ++i) largest = std::fmax(largest, std::fabs(src[i]));
    const uint16_t scale = f32_to_bf16(largest / 127.0f);
    std::memcpy(dst, &scale, 2);
    const float d = bf16_to_f32(scale);
    int8_t* q = reinterpret_cast<int8_t*>(dst + 2);
    for (int i = 0; i < kQ8Block; ++i)
      q[i] = d == 0.0f
                 ? 0
                 : static_cast<int8_t>(std::clamp(std::nearbyint(src[i] / d), -127.0f, 127.0f));
  }
}

}  // namespace

float f16_to_f32(uint16_t h) {
  return widen_half(h);
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    // Scale so that the f16 subnormal step (2^-24) becomes 1, then round to nearest even.
    const float scaled = std::fabs(f) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t m = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias 127->15 and round to even
  return static_cast<uint16_t>(sign | (m >> 13));
}

namespace {

// The first of n values `stride` bytes apart whose exponent bits are all ones, or -1.
template <typename Bits>
int64_t first_with_exponent(const void* data, uint64_t n, uint64_t stride, Bits exponent) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (uint64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, bytes + i * stride, sizeof(Bits));
    if ((bits & exponent) == exponent) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

int64_t first_non_finite(DType t, const void* data, uint64_t n) {
  switch (t) {
    case DType::F32: return first_with_exponent<uint32_t>(data, n, 4, 0x7f800000u);
    case DType::F16: return first_with_exponent<uint16_t>(data, n, 2, 0x7c00);
    case DType::BF16: return first_with_exponent<uint16_t>(data, n, 2, 0x7f80);
    case DType::Q8: {
      const int64_t block =
          first_with_exponent<uint16_t>(data, n / kQ8Block, kQ8BlockBytes, 0x7f80);
      return block < 0 ? -1 : block * kQ8Block;
    }
  }
  return -1;
}

void convert_to_f32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = widen_half(s[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q8: widen_q8(static_cast<const uint8_t*>(src), dst, n); return;
  }
}

void convert_from_f32(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::Q8: quantize_q8(src, static_cast<uint8_t*>(dst), n); return;
  }
}

}  // namespace photon
