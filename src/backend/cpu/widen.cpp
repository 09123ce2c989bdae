#include "backend/cpu/widen.h"

#include "backend/cpu/cpu_features.h"

namespace photon::cpu {

void widen_to_f32(DType type, const void* src, float* dst, size_t n) {
#if defined(PHOTON_X86_KERNELS)
  // Baseline x86-64 widens f16 with integer arithmetic, slower than reading an f32 cache; F16C
  // converts 8 values in one instruction.
  static const bool f16c = cpu_has_avx2();
  if (type == DType::F16 && f16c) return widen_f16_avx2(static_cast<const uint16_t*>(src), dst, n);
#endif
  convert_to_f32(type, src, dst, n);
}

}  // namespace photon::cpu
