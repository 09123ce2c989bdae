// The data_hash of a model file: FNV-1a over the data section read as 64-bit little-endian words,
// then FNV-1a over the trailing (size % 8) bytes. Word-wise FNV is one multiply per 8 bytes
// (several GB/s), so the writer can hash as it streams multi-GiB files; it fingerprints, it does
// not protect.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace photon {

class DataHasher {
 public:
  void update(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0 && pending_ > 0) {  // complete a word split across calls
      word_[pending_++] = *p++;
      --n;
      if (pending_ == 8) {
        mix_word(word_);
        pending_ = 0;
      }
    }
    for (; n >= 8; n -= 8, p += 8) mix_word(p);
    std::memcpy(word_, p, n);
    pending_ = n;
  }

  uint64_t finish() const {
    uint64_t h = hash_;
    for (size_t i = 0; i < pending_; ++i) h = (h ^ word_[i]) * kPrime;
    return h;
  }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ull;
  void mix_word(const uint8_t* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // the file format is little-endian, as is every supported host
    hash_ = (hash_ ^ w) * kPrime;
  }
  uint64_t hash_ = 0xcbf29ce484222325ull;
  uint8_t word_[8] = {};
  size_t pending_ = 0;
};

inline uint64_t hash_data_section(const void* data, size_t n) {
  DataHasher hasher;
  hasher.update(data, n);
  return hasher.finish();
}

}  // namespace photon
