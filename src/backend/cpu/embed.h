// Embedding lookup: rows of a table in its stored type, widened to f32.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace photon::cpu {

// out[i, :] = table[ids[i], :] for a table of `dim` columns of `dtype`; out [ids.size(), dim].
void embed(const void* table, DType dtype, int dim, std::span<const int32_t> ids, float* out);

}  // namespace photon::cpu
