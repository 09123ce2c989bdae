// Reading NumPy .npz archives (zip, stored or deflated members) of float32 / float16 arrays.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace photon {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // widened to f32, row-major (Fortran-order arrays are reordered)
};

// Reads every array of the archive, keyed by name without the ".npy" suffix. Throws Error
// (PHOTON_ERR_IO, _CORRUPT, _TRUNCATED, _SIZE_OVERFLOW, _UNSUPPORTED) naming the file and member.
std::map<std::string, NpyArray> read_npz(const std::string& path);

}  // namespace photon
