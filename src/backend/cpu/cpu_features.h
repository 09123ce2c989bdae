// What the processor offers the CPU backend's kernels, asked once at run time, so that one build
// runs everywhere and uses the widest instructions each machine has.
#pragma once

namespace photon::cpu {

// AVX2, FMA and F16C, with the operating system saving the 256-bit registers.
bool cpu_has_avx2();

// AVX-512F besides the above, with the operating system saving the 512-bit and mask registers.
bool cpu_has_avx512();

}  // namespace photon::cpu
