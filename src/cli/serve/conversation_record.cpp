#include "serve/conversation_record.h"

#include <cstring>

namespace photon::serve {
namespace {

constexpr char kMagic[8] = {'P', 'H', 'C', 'O', 'N', 'V', '0', '1'};

uint64_t fnv1a(const uint8_t* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// Appends into a buffer sized in advance.
class Writer {
 public:
  explicit Writer(size_t size) : out(size) {}
  void bytes(const void* p, size_t n) {
    if (n) std::memcpy(out.data() + at_, p, n);
    at_ += n;
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  void u32(uint32_t v) { bytes(&v, sizeof v); }
  std::vector<uint8_t> out;

 private:
  size_t at_ = 0;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool bytes(void* dst, size_t n) {
    if (n > n_ - at_) return false;
    if (n) std::memcpy(dst, p_ + at_, n);
    at_ += n;
    return true;
  }
  bool u64(uint64_t& v) { return bytes(&v, sizeof v); }
  bool u32(uint32_t& v) { return bytes(&v, sizeof v); }
  // A length that the rest of the record can hold, of elements of `size` bytes.
  bool count(uint64_t& v, size_t size) { return u64(v) && v <= (n_ - at_) / size; }
  size_t at() const { return at_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_conversation(uint64_t version, const Conversation& c) {
  Writer w(sizeof kMagic + 8 + 4 + 8 + c.text.size() + 8 + c.tokens.size() * sizeof(int32_t) + 8 +
           c.state.size() + 8);
  w.bytes(kMagic, sizeof kMagic);
  w.u64(version);
  w.u32(c.has_text ? 1u : 0u);
  w.u64(c.text.size());
  w.bytes(c.text.data(), c.text.size());
  w.u64(c.tokens.size());
  w.bytes(c.tokens.data(), c.tokens.size() * sizeof(int32_t));
  w.u64(c.state.size());
  w.bytes(c.state.data(), c.state.size());
  w.u64(fnv1a(w.out.data(), w.out.size() - 8));
  return std::move(w.out);
}

std::optional<Conversation> decode_conversation(const std::vector<uint8_t>& record) {
  if (record.size() < sizeof kMagic + 8 || std::memcmp(record.data(), kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  const size_t body = record.size() - 8;
  uint64_t checksum = 0;
  std::memcpy(&checksum, record.data() + body, 8);
  if (checksum != fnv1a(record.data(), body)) return std::nullopt;
  Reader r(record.data() + sizeof kMagic, body - sizeof kMagic);
  Conversation c;
  uint32_t flags = 0;
  uint64_t n = 0;
  if (!r.u64(c.version) || !r.u32(flags) || !r.count(n, 1)) return std::nullopt;
  c.has_text = (flags & 1u) != 0;
  c.text.resize(n);
  if (!r.bytes(c.text.data(), n) || !r.count(n, sizeof(int32_t))) return std::nullopt;
  c.tokens.resize(n);
  if (!r.bytes(c.tokens.data(), n * sizeof(int32_t)) || !r.count(n, 1)) return std::nullopt;
  c.state.resize(n);
  if (!r.bytes(c.state.data(), n) || r.at() != body - sizeof kMagic) return std::nullopt;
  return c;
}

std::optional<uint64_t> record_version(const uint8_t* head, size_t size) {
  uint64_t version = 0;
  if (size < sizeof kMagic + sizeof version || std::memcmp(head, kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  std::memcpy(&version, head + sizeof kMagic, sizeof version);
  return version;
}

}  // namespace photon::serve
