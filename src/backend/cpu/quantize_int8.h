// The activations of int8 precision: each row of x[n, in] (in a multiple of 32) cut into blocks of
// 32 columns, each block stored as a scale d = max |x| / 127 and 32 integers q = round(x / d)
// (nearest, ties to even; within [-127, 127]), so that x ~ d q. A block whose max |x| / 127 is 0
// in f32 (zeros, or values below 127 x 2^-149) has d = 0 and q = 0; a block holding NaN or an
// infinity has d = NaN, so that its products are NaN as in f32.
#pragma once

#include <cstdint>

namespace photon::cpu {

// q[n, in], d[n, in / 32].
void quantize_int8(const float* x, long n, int in, int8_t* q, float* d);

}  // namespace photon::cpu
