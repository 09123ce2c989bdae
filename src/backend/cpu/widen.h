// Stored 16-bit values widened to f32 with the widest instructions the processor has, for the
// kernels that read 16-bit data a row at a time (attention over bf16 and f16 KV caches).
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace photon::cpu {

// dst[i] = src[i] as f32 for i in [0, n), exactly; src holds values of `type`.
void widen_to_f32(DType type, const void* src, float* dst, size_t n);

#if defined(PHOTON_X86_KERNELS)
// The F16C conversion (widen_avx2.cpp); only where cpu_has_avx2().
void widen_f16_avx2(const uint16_t* src, float* dst, size_t n);
#endif

}  // namespace photon::cpu
