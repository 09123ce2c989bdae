#include "format/npz.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "core/dtype.h"
#include "core/error.h"

namespace photon {

static_assert(std::endian::native == std::endian::little,
              "float32 arrays are read straight into memory");

namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr size_t kEndRecordSize = 22;
constexpr size_t kMaxCommentSize = 0xffff;
// Deflate cannot expand data by more than 1032:1; a member claiming more is lying about its size.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr size_t kMaxNpyHeader = 1 << 20;

uint16_t le16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint64_t le64(const uint8_t* p) {
  return uint64_t{le32(p)} | uint64_t{le32(p + 4)} << 32;
}

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(PHOTON_ERR_IO, "cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(PHOTON_ERR_IO, path + ": not a readable regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
      void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int map_errno = errno;
      ::close(fd);
      if (map == MAP_FAILED)
        fail(PHOTON_ERR_IO, "cannot map " + path + ": " + std::strerror(map_errno));
      data_ = static_cast<const uint8_t*>(map);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

struct Member {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_offset = 0;
};

// Every read of the archive goes through here, so no claimed offset can reach outside the file.
class Archive {
 public:
  Archive(const std::string& path, const MappedFile& file) : path_(path), file_(file) {}

  [[noreturn]] void fail_archive(photon_status status, const std::string& what) const {
    fail(status, path_ + ": " + what);
  }
  const uint8_t* at(uint64_t offset, uint64_t n, const char* what) const {
    if (offset > file_.size() || n > file_.size() - offset)
      fail_archive(PHOTON_ERR_TRUNCATED, std::string(what) + " lies past the end of the file");
    return file_.data() + offset;
  }

  std::vector<Member> members() const {
    const uint64_t end = find_end_record();
    const uint8_t* record = at(end, kEndRecordSize, "the end of central directory record");
    uint64_t count = le16(record + 10);
    uint64_t cd_size = le32(record + 12);
    uint64_t cd_offset = le32(record + 16);
    // Saturated fields mean the real values are in the ZIP64 record the locator points to.
    if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
      const uint8_t* locator = at(end - std::min<uint64_t>(end, 20), 20, "the ZIP64 locator");
      if (end < 20 || le32(locator) != kZip64LocatorSignature)
        fail_archive(PHOTON_ERR_CORRUPT, "missing ZIP64 end of central directory locator");
      const uint64_t zip64_end = le64(locator + 8);
      const uint8_t* r = at(zip64_end, 56, "the ZIP64 end of central directory record");
      if (le32(r) != kZip64EndSignature)
        fail_archive(PHOTON_ERR_CORRUPT, "bad ZIP64 end of central directory record");
      count = le64(r + 32);
      cd_size = le64(r + 40);
      cd_offset = le64(r + 48);
    }
    const uint8_t* cd = at(cd_offset, cd_size, "the central directory");
    std::vector<Member> out;
    uint64_t pos = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if (cd_size - pos < 46)
        fail_archive(PHOTON_ERR_CORRUPT, "the central directory is cut short");
      const uint8_t* h = cd + pos;
      if (le32(h) != kCentralHeaderSignature)
        fail_archive(PHOTON_ERR_CORRUPT, "bad central directory entry " + std::to_string(i));
      const uint64_t name_len = le16(h + 28), extra_len = le16(h + 30), comment_len = le16(h + 32);
      if (cd_size - pos - 46 < name_len + extra_len + comment_len)
        fail_archive(PHOTON_ERR_CORRUPT, "the central directory is cut short");
      Member m;
      m.name.assign(reinterpret_cast<const char*>(h + 46), name_len);
      m.flags = le16(h + 8);
      m.method = le16(h + 10);
      m.crc = le32(h + 16);
      m.compressed_size = le32(h + 20);
      m.size = le32(h + 24);
      m.local_offset = le32(h + 42);
      read_zip64_extra(h + 46 + name_len, extra_len, &m);
      out.push_back(std::move(m));
      pos += 46 + name_len + extra_len + comment_len;
    }
    return out;
  }

  // The member's stored bytes, located through its local header.
  const uint8_t* member_data(const Member& m) const {
    const uint8_t* local = at(m.local_offset, 30, "a local file header");
    if (le32(local) != kLocalHeaderSignature)
      fail_archive(PHOTON_ERR_CORRUPT, "bad local file header for '" + m.name + "'");
    const uint64_t start = m.local_offset + 30 + le16(local + 26) + le16(local + 28);
    return at(start, m.compressed_size, ("the data of member '" + m.name + "'").c_str());
  }

 private:
  uint64_t find_end_record() const {
    if (file_.size() < kEndRecordSize)
      fail_archive(PHOTON_ERR_TRUNCATED, "too short to be a zip archive");
    const uint64_t last = file_.size() - kEndRecordSize;
    const uint64_t first = last > kMaxCommentSize ? last - kMaxCommentSize : 0;
    for (uint64_t pos = last + 1; pos-- > first;)
      if (le32(file_.data() + pos) == kEndSignature) return pos;
    fail_archive(PHOTON_ERR_CORRUPT, "not a zip archive (no end of central directory record)");
  }

  // A ZIP64 extra field holds, in this order, the 64-bit values of exactly those fields whose
  // 32-bit slot in the header is saturated.
  void read_zip64_extra(const uint8_t* extra, uint64_t len, Member* m) const {
    uint64_t* fields[] = {&m->size, &m->compressed_size, &m->local_offset};
    for (uint64_t pos = 0; pos + 4 <= len;) {
      const uint16_t id = le16(extra + pos), size = le16(extra + pos + 2);
      if (pos + 4 + size > len)
        fail_archive(PHOTON_ERR_CORRUPT, "bad extra field of '" + m->name + "'");
      if (id == kZip64ExtraId) {
        uint64_t used = 0;
        for (uint64_t* field : fields) {
          if (*field != 0xffffffffu) continue;
          if (used + 8 > size)
            fail_archive(PHOTON_ERR_CORRUPT, "short ZIP64 extra field of '" + m->name + "'");
          *field = le64(extra + pos + 4 + used);
          used += 8;
        }
      }
      pos += 4 + size;
    }
  }

  const std::string& path_;
  const MappedFile& file_;
};

// Sequential reads of one member's uncompressed bytes, inflating on the fly and checking the CRC.
class MemberReader {
 public:
  MemberReader(const uint8_t* data, const Member& m, const std::string& where)
      : data_(data), member_(m), where_(where) {
    if (m.method == 8) {
      if (inflateInit2(&z_, -15) != Z_OK)
        fail(PHOTON_ERR_OUT_OF_MEMORY, where_ + ": inflateInit failed");
      inflating_ = true;
    }
  }
  ~MemberReader() {
    if (inflating_) inflateEnd(&z_);
  }
  MemberReader(const MemberReader&) = delete;
  MemberReader& operator=(const MemberReader&) = delete;

  void read(void* dst, size_t n) {
    if (n > member_.size - produced_)
      fail(PHOTON_ERR_TRUNCATED, where_ + ": the member ends before its array does");
    if (inflating_)
      inflate_into(static_cast<uint8_t*>(dst), n);
    else
      std::memcpy(dst, data_ + produced_, n);
    for (size_t done = 0; done < n;) {
      const size_t part = std::min<size_t>(n - done, UINT_MAX);
      crc_ = crc32_z(crc_, static_cast<const uint8_t*>(dst) + done, part);
      done += part;
    }
    produced_ += n;
  }

  // Called once the array is complete: the member must hold nothing more, and match its CRC.
  void finish() {
    if (produced_ != member_.size)
      fail(PHOTON_ERR_CORRUPT, where_ + ": " + std::to_string(member_.size - produced_) +
                                   " bytes follow the array data");
    if (inflating_) {
      uint8_t extra;
      z_.next_out = &extra;
      z_.avail_out = 1;
      feed();
      if (inflate(&z_, Z_FINISH) != Z_STREAM_END || z_.avail_out != 1)
        fail(PHOTON_ERR_CORRUPT, where_ + ": the deflate stream does not end with the array");
    }
    if (crc_ != member_.crc) fail(PHOTON_ERR_CORRUPT, where_ + ": CRC-32 mismatch");
  }

 private:
  void feed() {
    if (z_.avail_in == 0 && consumed_ < member_.compressed_size) {
      const uint64_t part = std::min<uint64_t>(member_.compressed_size - consumed_, UINT_MAX);
      z_.next_in = const_cast<Bytef*>(data_ + consumed_);
      z_.avail_in = static_cast<uInt>(part);
      consumed_ += part;
    }
  }
  void inflate_into(uint8_t* dst, size_t n) {
    while (n > 0) {
      const size_t part = std::min<size_t>(n, UINT_MAX);
      z_.next_out = dst;
      z_.avail_out = static_cast<uInt>(part);
      while (z_.avail_out > 0) {
        feed();
        const int status = inflate(&z_, Z_NO_FLUSH);
        if (status == Z_STREAM_END && z_.avail_out > 0)
          fail(PHOTON_ERR_TRUNCATED, where_ + ": the deflate stream ends before the array does");
        if (status == Z_BUF_ERROR && z_.avail_in == 0)
          fail(PHOTON_ERR_TRUNCATED, where_ + ": the compressed data ends early");
        if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR)
          fail(PHOTON_ERR_CORRUPT, where_ + ": invalid deflate data" +
                                       (z_.msg ? std::string(" (") + z_.msg + ")" : ""));
      }
      dst += part;
      n -= part;
    }
  }

  const uint8_t* data_;
  const Member& member_;
  const std::string& where_;
  z_stream z_{};
  bool inflating_ = false;
  uint64_t consumed_ = 0;  // compressed bytes handed to zlib
  uint64_t produced_ = 0;  // uncompressed bytes returned
  uLong crc_ = crc32(0, nullptr, 0);
};

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// The Python dict literal of a .npy header, e.g. {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 4), }: just the subset NumPy writes.
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (!consume('}')) {
      const std::string key = string();
      expect(':');
      if (key == "descr") {
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == '[')
          fail(PHOTON_ERR_UNSUPPORTED,
               where_ + " has a structured dtype; only '<f4' and '<f2' are supported");
        h.descr = string();
        seen_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        seen_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        seen_shape = true;
      } else {
        malformed("unknown key '" + key + "'");
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    if (!seen_descr || !seen_order || !seen_shape) malformed("a key is missing");
    return h;
  }

 private:
  [[noreturn]] void malformed(const std::string& what) const {
    fail(PHOTON_ERR_CORRUPT, where_ + ": malformed .npy header (" + what + ")");
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) malformed(std::string("expected '") + c + "'");
  }
  std::string string() {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) malformed("expected a string");
    const char quote = s_[pos_++];
    const size_t end = s_.find(quote, pos_);
    if (end == std::string::npos) malformed("unterminated string");
    std::string out = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (s_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return value;
      }
    malformed("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> out;
    expect('(');
    while (!consume(')')) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') malformed("expected a dimension");
      int64_t d = 0;
      for (; pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; ++pos_)
        if (__builtin_mul_overflow(d, int64_t{10}, &d) ||
            __builtin_add_overflow(d, s_[pos_] - '0', &d))
          fail(PHOTON_ERR_SIZE_OVERFLOW, where_ + ": a dimension overflows 64 bits");
      out.push_back(d);
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return out;
  }

  const std::string& s_;
  const std::string& where_;
  size_t pos_ = 0;
};

// The values of an array stored in Fortran (column-major) order, in row-major order: element
// (i0, ..., ik) sits at i0 + d0 * (i1 + d1 * (...)) in `data`.
std::vector<float> to_row_major(const std::vector<float>& data, const std::vector<int64_t>& shape,
                                const std::string& where) {
  if (shape.size() < 2 || data.empty()) return data;
  const size_t rank = shape.size();
  std::vector<uint64_t> stride(rank);  // of each axis in `data`
  uint64_t step = 1;
  for (size_t axis = 0; axis < rank; ++axis) {
    stride[axis] = step;
    step *= static_cast<uint64_t>(shape[axis]);
  }
  std::vector<float> out;
  try {
    out.resize(data.size());
  } catch (const std::bad_alloc&) {
    fail(PHOTON_ERR_OUT_OF_MEMORY, where + ": cannot allocate " + std::to_string(data.size()) +
                                       " floats to reorder a Fortran-order array");
  }
  std::vector<int64_t> index(rank, 0);
  uint64_t from = 0;
  for (float& value : out) {
    value = data[from];
    for (size_t axis = rank; axis-- > 0;) {  // the last axis moves fastest in row-major order
      if (++index[axis] < shape[axis]) {
        from += stride[axis];
        break;
      }
      from -= stride[axis] * static_cast<uint64_t>(shape[axis] - 1);
      index[axis] = 0;
    }
  }
  return out;
}

NpyArray read_npy(MemberReader& reader, const Member& m, const std::string& where) {
  uint8_t magic[8];
  if (m.size < sizeof magic) fail(PHOTON_ERR_TRUNCATED, where + ": too short for a .npy header");
  reader.read(magic, sizeof magic);
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0)
    fail(PHOTON_ERR_CORRUPT, where + ": not a .npy array");
  const int major = magic[6];
  if (major < 1 || major > 3)
    fail(PHOTON_ERR_UNSUPPORTED, where + ": .npy format version " + std::to_string(major) + "." +
                                     std::to_string(magic[7]) + " is not supported");
  uint8_t length_bytes[4] = {};
  reader.read(length_bytes, major == 1 ? 2 : 4);
  const uint64_t header_len = major == 1 ? le16(length_bytes) : le32(length_bytes);
  if (header_len > kMaxNpyHeader)
    fail(PHOTON_ERR_CORRUPT,
         where + ": implausible .npy header length " + std::to_string(header_len));
  std::string text(header_len, '\0');
  reader.read(text.data(), header_len);
  const NpyHeader header = NpyHeaderParser(text, where).parse();

  DType dtype;
  if (header.descr == "<f4")
    dtype = DType::F32;
  else if (header.descr == "<f2")
    dtype = DType::F16;
  else
    fail(PHOTON_ERR_UNSUPPORTED, where + " has dtype '" + header.descr +
                                     "'; only little-endian float32 ('<f4') and float16 ('<f2') "
                                     "are supported");

  uint64_t count = 1, bytes = 0, total = 0;
  for (int64_t d : header.shape)
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count))
      fail(PHOTON_ERR_SIZE_OVERFLOW, where + ": the element count overflows 64 bits");
  const uint64_t prefix = (major == 1 ? 10 : 12) + header_len;
  if (__builtin_mul_overflow(count, dtype_size(dtype), &bytes) ||
      __builtin_add_overflow(prefix, bytes, &total))
    fail(PHOTON_ERR_SIZE_OVERFLOW, where + ": the array size overflows 64 bits");
  if (total > m.size)
    fail(PHOTON_ERR_TRUNCATED, where + ": holds " + std::to_string(m.size - prefix) +
                                   " data bytes, its shape needs " + std::to_string(bytes));
  if (total < m.size)
    fail(PHOTON_ERR_CORRUPT, where + ": holds " + std::to_string(m.size - prefix) +
                                 " data bytes, its shape needs only " + std::to_string(bytes));

  NpyArray array;
  array.shape = header.shape;
  try {
    array.data.resize(count);
  } catch (const std::bad_alloc&) {
    fail(PHOTON_ERR_OUT_OF_MEMORY,
         where + ": cannot allocate " + std::to_string(count) + " floats");
  }
  if (dtype == DType::F32) {
    reader.read(array.data.data(), bytes);
  } else {
    constexpr size_t kChunk = 1 << 16;
    std::vector<uint16_t> staging(std::min<uint64_t>(count, kChunk));
    for (uint64_t done = 0; done < count; done += kChunk) {
      const size_t n = std::min<uint64_t>(count - done, kChunk);
      reader.read(staging.data(), n * 2);
      convert_to_f32(DType::F16, staging.data(), array.data.data() + done, n);
    }
  }
  reader.finish();
  if (header.fortran_order) array.data = to_row_major(array.data, array.shape, where);
  return array;
}

}  // namespace

std::map<std::string, NpyArray> read_npz(const std::string& path) {
  const MappedFile file(path);
  const Archive archive(path, file);
  std::map<std::string, NpyArray> arrays;
  for (const Member& m : archive.members()) {
    const std::string suffix = ".npy";
    if (m.name.size() <= suffix.size() ||
        m.name.compare(m.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      fail(PHOTON_ERR_UNSUPPORTED, path + ": member '" + m.name + "' is not a .npy array");
    const std::string name = m.name.substr(0, m.name.size() - suffix.size());
    const std::string where = path + ": array '" + name + "'";
    if (m.flags & 1) fail(PHOTON_ERR_UNSUPPORTED, where + " is encrypted");
    if (m.method == 0 && m.compressed_size != m.size)
      fail(PHOTON_ERR_CORRUPT,
           where + ": a stored member's compressed and uncompressed sizes differ");
    if (m.method == 8 && m.size / kMaxDeflateRatio > m.compressed_size + 1)
      fail(PHOTON_ERR_CORRUPT, where + ": claims an impossible compression ratio");
    if (m.method != 0 && m.method != 8)
      fail(PHOTON_ERR_UNSUPPORTED, where + " uses compression method " + std::to_string(m.method) +
                                       "; only stored (0) and deflated (8) are supported");
    if (arrays.count(name) != 0) fail(PHOTON_ERR_CORRUPT, where + " appears more than once");
    MemberReader reader(archive.member_data(m), m, where);
    arrays[name] = read_npy(reader, m, where);
  }
  return arrays;
}

}  // namespace photon
