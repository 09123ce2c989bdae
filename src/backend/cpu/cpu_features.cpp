#include "backend/cpu/cpu_features.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

#if defined(PHOTON_X86_KERNELS)
#include <cpuid.h>
#endif

namespace photon::cpu {

namespace {

#if defined(PHOTON_X86_KERNELS)
// XCR0: which register states the operating system saves on context switches.
unsigned xcr0() {
  unsigned low = 0, high = 0;
  __asm__("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return low;
}

bool detect_avx2() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  // Bits 1 and 2: SSE and AVX state.
  if ((xcr0() & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);
}

bool detect_avx512() {
  if (!detect_avx2()) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 16))) return false;
  // Bits 5 to 7: the mask registers and both halves of the 512-bit register file.
  return (xcr0() & 0xE6u) == 0xE6u;
}

bool detect_avx512_vnni() {
  if (!detect_avx512()) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  // EBX bit 30: AVX512-BW, bit 31: AVX512-VL; ECX bit 11: AVX512-VNNI.
  return (b & (1u << 30)) && (b & (1u << 31)) && (c & (1u << 11));
}

bool detect_avx512_bf16() {
  if (!detect_avx512()) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool bw_vl = (b & (1u << 30)) && (b & (1u << 31));
  // Leaf 7 subleaf 1, EAX bit 5: AVX512-BF16.
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return bw_vl && (a & (1u << 5));
}

bool detect_amd() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  // The vendor string "AuthenticAMD" in EBX, EDX, ECX.
  return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
}
#else
// Builds without the x86 kernels have nothing to choose.
bool detect_avx2() {
  return false;
}
bool detect_avx512() {
  return false;
}
bool detect_avx512_vnni() {
  return false;
}
bool detect_avx512_bf16() {
  return false;
}
bool detect_amd() {
  return false;
}
#endif

}  // namespace

bool cpu_has_avx2() {
  static const bool has = detect_avx2();
  return has;
}

bool cpu_has_avx512() {
  static const bool has = detect_avx512();
  return has;
}

bool cpu_has_avx512_vnni() {
  static const bool has = detect_avx512_vnni();
  return has;
}

bool cpu_has_avx512_bf16() {
  static const bool has = detect_avx512_bf16();
  return has;
}

bool cpu_has_fast_bf16_dot() {
  static const bool has = cpu_has_avx512_bf16() && detect_amd();
  return has;
}

const char* cpu_kernels_name(CpuKernels kernels) {
  switch (kernels) {
    case CpuKernels::Portable: return "portable";
    case CpuKernels::Avx2: return "avx2";
    case CpuKernels::Avx512: return "avx512";
  }
  return "?";
}

bool cpu_kernels_available(CpuKernels kernels) {
  switch (kernels) {
    case CpuKernels::Portable: return true;
    case CpuKernels::Avx2: return cpu_has_avx2();
    case CpuKernels::Avx512: return cpu_has_avx512();
  }
  return false;
}

CpuKernels default_cpu_kernels() {
  static const CpuKernels chosen = [] {
    // $PHOTON_CPU_KERNELS caps the choice, to compare kernels in one build or to rule one out.
    const char* cap = std::getenv("PHOTON_CPU_KERNELS");
    const std::string widest = cap ? cap : "";
    if (widest != "portable" && widest != "avx2" && cpu_has_avx512()) return CpuKernels::Avx512;
    if (widest != "portable" && cpu_has_avx2()) return CpuKernels::Avx2;
    return CpuKernels::Portable;
  }();
  return chosen;
}

const SkinnyKernels& kernel_functions(CpuKernels kernels) {
  if (!cpu_kernels_available(kernels))
    fail(PHOTON_ERR_UNSUPPORTED,
         std::string("cpu kernels ") + cpu_kernels_name(kernels) +
             (kernels == CpuKernels::Avx512 ? ": this processor (or build) has no AVX-512F"
                                            : ": this processor (or build) has no AVX2, FMA and "
                                              "F16C"));
#if defined(PHOTON_X86_KERNELS)
  if (kernels == CpuKernels::Avx512) return kSkinnyAvx512;
  if (kernels == CpuKernels::Avx2) return kSkinnyAvx2;
#endif
  return kSkinnyPortable;
}

}  // namespace photon::cpu
