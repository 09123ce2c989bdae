// What the processor offers the CPU backend's kernels, asked once at run time, so that one build
// runs everywhere and uses the widest instructions each machine has; and the kernel sets built on
// it, one of which each CPU backend computes with.
#pragma once

#include "backend/cpu/skinny_gemm.h"

namespace photon::cpu {

// AVX2, FMA and F16C, with the operating system saving the 256-bit registers.
bool cpu_has_avx2();

// AVX-512F besides the above, with the operating system saving the 512-bit and mask registers.
bool cpu_has_avx512();

// AVX512-VNNI, -VL and -BW besides AVX-512F: the int8 dot products of 256-bit vectors.
bool cpu_has_avx512_vnni();

// AVX512-BF16, -VL and -BW besides AVX-512F: the bf16 dot products of 512-bit vectors.
bool cpu_has_avx512_bf16();

// AVX512-BF16 on a processor that issues vdpbf16ps as often as f32 multiply-adds, so that its two
// products per lane double a product's arithmetic: AMD's (Zen 4 and 5). Intel's Xeons issue it
// once every two cycles against two f32 multiply-adds a cycle (an Emerald Rapids: 1.35 against 5.4
// G instructions/s, one thread, twelve independent sums), which halves the arithmetic instead.
bool cpu_has_fast_bf16_dot();

// The vector kernel sets of the CPU backend, narrowest first: plain C++ (any CPU), AVX2 + FMA +
// F16C, AVX-512F. Every set gives the same bits on every op except the skinny products, where the
// portable set's separate multiplies and adds agree with the others' fused ones to within f32
// rounding (skinny_gemm.h).
enum class CpuKernels { Portable, Avx2, Avx512 };

// "portable", "avx2", "avx512".
const char* cpu_kernels_name(CpuKernels kernels);

// Whether this build has the set and this processor runs it (the portable set: always).
bool cpu_kernels_available(CpuKernels kernels);

// The widest available set, at most $PHOTON_CPU_KERNELS ("avx2" or "portable"; photon.h), read
// once per process: what make_cpu_backend gives every model.
CpuKernels default_cpu_kernels();

// The set's functions; PHOTON_ERR_UNSUPPORTED, naming what is missing, where it is not available.
const SkinnyKernels& kernel_functions(CpuKernels kernels);

}  // namespace photon::cpu
