#include "backend/cpu/embed.h"

namespace photon::cpu {

void embed(const void* table, DType dtype, int dim, std::span<const int32_t> ids, float* out) {
  const size_t row_bytes = dtype_bytes(dtype, static_cast<uint64_t>(dim));
  for (size_t i = 0; i < ids.size(); ++i)
    convert_to_f32(dtype, static_cast<const char*>(table) + static_cast<size_t>(ids[i]) * row_bytes,
                   out + i * dim, dim);
}

}  // namespace photon::cpu
