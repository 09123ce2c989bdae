#include "backend/cpu/cpu_features.h"

#if defined(PHOTON_X86_KERNELS)
#include <cpuid.h>
#endif

namespace photon::cpu {

namespace {

#if defined(PHOTON_X86_KERNELS)
bool detect_avx2() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  // XCR0 bits 1 and 2: the OS saves the SSE and AVX register state on context switches.
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);
}
#endif

}  // namespace

bool cpu_has_avx2() {
#if defined(PHOTON_X86_KERNELS)
  static const bool has = detect_avx2();
  return has;
#else
  return false;
#endif
}

}  // namespace photon::cpu
