// SHA-256 (FIPS 180-4), for provenance: a converted model records the digest of the configuration
// it came from, which anyone can recompute with `sha256sum config.json`.
#pragma once

#include <string>

namespace photon {

// The digest of `bytes` as 64 lowercase hex digits.
std::string sha256_hex(const std::string& bytes);

}  // namespace photon
