#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "format/file_errors.h"
#include "format/model_schema.h"

namespace photon {

namespace {

using nlohmann::json;

// Longest tensor name accepted: real names are tens of bytes; a longer one is damage, and would
// only flood the messages that quote it.
constexpr size_t kMaxNameBytes = 4096;
// root object > tensor entry > shape or data_offsets array.
constexpr int kMaxDepth = 3;
// Tensors are widened this many source bytes at a time; the pages behind are then released.
constexpr size_t kReadChunk = size_t{8} << 20;

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// A string from the file, quoted in a message: control bytes escaped, at most 64 bytes.
std::string shown(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

bool dtype_from_safetensors(const std::string& name, DType* out) {
  if (name == "F32")
    *out = DType::F32;
  else if (name == "F16")
    *out = DType::F16;
  else if (name == "BF16")
    *out = DType::BF16;
  else
    return false;
  return true;
}

// Parses the header, refusing duplicate keys (which a JSON parser would silently resolve to the
// last one) and nesting deeper than a header has.
json parse_header(const char* text, size_t size, const FileErrors& errors) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  int depth = 0;
  std::string entry;  // the tensor whose entry is being parsed
  auto callback = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (++depth > kMaxDepth)
          errors.fail(PHOTON_ERR_CORRUPT, "the header nests deeper than a safetensors header (" +
                                              std::to_string(kMaxDepth) + " levels)");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        --depth;
        if (event == json::parse_event_t::object_end) keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (keys.size() == 1) {
          if (!keys.back().insert(key).second)
            errors.fail(PHOTON_ERR_TENSOR_SET, "the header names '" + shown(key) + "' twice");
          entry = key;
        } else if (!keys.back().insert(key).second) {
          errors.fail(PHOTON_ERR_CORRUPT, "the entry of '" + shown(entry) + "' has the field '" +
                                              shown(key) + "' twice");
        }
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(text, text + size, callback);
  } catch (const json::exception& e) {
    errors.fail(PHOTON_ERR_CORRUPT, std::string("the header is not valid JSON: ") + e.what());
  }
}

// A non-negative integer field of an entry.
uint64_t unsigned_field(const json& value, const std::string& tensor, const char* what,
                        const FileErrors& errors) {
  if (!value.is_number_unsigned())
    errors.fail_tensor(
        PHOTON_ERR_CORRUPT, shown(tensor),
        std::string(what) + " must hold non-negative integers, got " + shown(value.dump()));
  return value.get<uint64_t>();
}

SafetensorsTensor read_entry(const std::string& name, const json& j, uint64_t data_start,
                             uint64_t data_size, const FileErrors& errors) {
  const std::string label = shown(name);
  if (name.size() > kMaxNameBytes)
    errors.fail(PHOTON_ERR_CORRUPT, "a tensor name of " + std::to_string(name.size()) +
                                        " bytes (at most " + std::to_string(kMaxNameBytes) + ")");
  if (!j.is_object()) errors.fail_tensor(PHOTON_ERR_CORRUPT, label, "is not a JSON object");
  for (const auto& [key, value] : j.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      errors.fail_tensor(PHOTON_ERR_CORRUPT, label, "has the unknown field '" + shown(key) + "'");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key))
      errors.fail_tensor(PHOTON_ERR_CORRUPT, label, std::string("has no field '") + key + "'");

  SafetensorsTensor t;
  t.name = name;
  if (!j["dtype"].is_string())
    errors.fail_tensor(PHOTON_ERR_CORRUPT, label, "has a dtype that is not a string");
  const std::string dtype = j["dtype"].get<std::string>();
  if (!dtype_from_safetensors(dtype, &t.dtype))
    errors.fail_tensor(PHOTON_ERR_UNSUPPORTED, label,
                       "has dtype " + shown(dtype) + "; F32, F16 and BF16 are supported");

  const json& shape = j["shape"];
  if (!shape.is_array())
    errors.fail_tensor(PHOTON_ERR_CORRUPT, label, "has a shape that is not an array");
  if (shape.size() > PHOTON_MAX_DIMS)
    errors.fail_tensor(PHOTON_ERR_TENSOR_SHAPE, label,
                       "has rank " + std::to_string(shape.size()) + "; ranks up to " +
                           std::to_string(PHOTON_MAX_DIMS) + " are supported");
  uint64_t bytes = dtype_size(t.dtype);
  for (const json& d : shape) {
    const uint64_t dim = unsigned_field(d, name, "shape", errors);
    if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, dim, &bytes))
      errors.fail_tensor(PHOTON_ERR_SIZE_OVERFLOW, label,
                         "of shape " + shown(shape.dump()) + " overflows 64-bit sizes");
    t.shape.push_back(static_cast<int64_t>(dim));
  }

  const json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    errors.fail_tensor(PHOTON_ERR_CORRUPT, label, "needs data_offsets [begin, end]");
  const uint64_t begin = unsigned_field(offsets[0], name, "data_offsets", errors);
  const uint64_t end = unsigned_field(offsets[1], name, "data_offsets", errors);
  if (end < begin)
    errors.fail_tensor(
        PHOTON_ERR_CORRUPT, label,
        "ends (" + std::to_string(end) + ") before it begins (" + std::to_string(begin) + ")");
  if (end > data_size)
    errors.fail_tensor(PHOTON_ERR_TENSOR_BOUNDS, label,
                       "spans bytes " + std::to_string(begin) + ".." + std::to_string(end) +
                           " of a data section of " + std::to_string(data_size) + " bytes");
  if (end - begin != bytes)
    errors.fail_tensor(PHOTON_ERR_TENSOR_SHAPE, label,
                       "has " + std::to_string(end - begin) + " bytes but shape " +
                           shape_to_string(t.shape) + " of " + dtype + " needs " +
                           std::to_string(bytes));
  t.offset = data_start + begin;
  t.size = bytes;
  return t;
}

// The data section must be exactly the tensors, one after another (as the reference
// implementation requires): a gap or an overlap is damage.
void check_layout(const std::vector<SafetensorsTensor>& tensors, uint64_t data_start,
                  uint64_t data_size, const FileErrors& errors) {
  uint64_t expected = data_start;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : tensors) {
    if (t.offset < expected)
      errors.fail_tensor(PHOTON_ERR_CORRUPT, shown(t.name),
                         "overlaps tensor '" + shown(previous->name) + "'");
    if (t.offset > expected)
      errors.fail(PHOTON_ERR_CORRUPT, "data bytes " + std::to_string(expected - data_start) + ".." +
                                          std::to_string(t.offset - data_start) +
                                          " belong to no tensor");
    expected = t.offset + t.size;
    previous = &t;
  }
  if (expected != data_start + data_size)
    errors.fail(PHOTON_ERR_CORRUPT, "data bytes " + std::to_string(expected - data_start) + ".." +
                                        std::to_string(data_size) + " belong to no tensor");
}

}  // namespace

int64_t SafetensorsTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const FileErrors errors(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) errors.fail(PHOTON_ERR_IO, std::string("cannot open: ") + std::strerror(errno));
  const FdCloser closer(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    errors.fail(PHOTON_ERR_IO, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) errors.fail(PHOTON_ERR_IO, "not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    errors.fail(PHOTON_ERR_TRUNCATED, "the file has " + std::to_string(file_size) +
                                          " bytes; a safetensors file starts with an 8-byte "
                                          "header length");

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED)
    errors.fail(PHOTON_ERR_IO, std::string("cannot map: ") + std::strerror(errno));
  file->map_ = map;
  file->map_size_ = file_size;
  const uint8_t* bytes = static_cast<const uint8_t*>(map);

  const uint64_t header_size = read_le64(bytes);
  if (header_size > kMaxSafetensorsHeader)
    errors.fail(PHOTON_ERR_CORRUPT, "the header length " + std::to_string(header_size) +
                                        " exceeds " + std::to_string(kMaxSafetensorsHeader) +
                                        " bytes (not a safetensors file?)");
  if (header_size > file_size - 8)
    errors.fail(PHOTON_ERR_TRUNCATED, "the header declares " + std::to_string(header_size) +
                                          " bytes but the file has only " +
                                          std::to_string(file_size - 8) + " after its length");
  if (header_size == 0 || bytes[8] != '{')
    errors.fail(PHOTON_ERR_CORRUPT, "the header does not start with '{' (not a safetensors file?)");
  const json header = parse_header(reinterpret_cast<const char*>(bytes + 8),
                                   static_cast<size_t>(header_size), errors);
  if (!header.is_object()) errors.fail(PHOTON_ERR_CORRUPT, "the header is not a JSON object");

  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) errors.fail(PHOTON_ERR_CORRUPT, "__metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          errors.fail(PHOTON_ERR_CORRUPT,
                      "__metadata__ entry '" + shown(key) + "' is not a string");
        file->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    file->tensors_.push_back(read_entry(name, entry, data_start, data_size, errors));
  }
  std::stable_sort(file->tensors_.begin(), file->tensors_.end(),
                   [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
                     return a.offset != b.offset ? a.offset < b.offset : a.size < b.size;
                   });
  check_layout(file->tensors_, data_start, data_size, errors);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  // Tensors are read front to back, each once.
  ::madvise(map, file_size, MADV_SEQUENTIAL);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read_f32(const SafetensorsTensor& tensor, float* dst) const {
  const uint8_t* base = static_cast<const uint8_t*>(map_);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t width = dtype_size(tensor.dtype);
  std::vector<uint16_t> staging;
  uint64_t released = tensor.offset / page * page;
  for (uint64_t done = 0; done < tensor.size;) {
    const uint64_t bytes = std::min<uint64_t>(kReadChunk, tensor.size - done);
    const uint8_t* src = base + tensor.offset + done;
    const size_t count = static_cast<size_t>(bytes / width);
    // The data of a 16-bit tensor may start at an odd offset; it is then read through an
    // aligned copy.
    if (tensor.dtype != DType::F32 && reinterpret_cast<uintptr_t>(src) % alignof(uint16_t) != 0) {
      staging.resize(count);
      std::memcpy(staging.data(), src, static_cast<size_t>(bytes));
      src = reinterpret_cast<const uint8_t*>(staging.data());
    }
    convert_to_f32(tensor.dtype, src, dst + done / width, count);
    done += bytes;
    const uint64_t read_up_to = (tensor.offset + done) / page * page;
    if (read_up_to > released) {
      ::madvise(const_cast<uint8_t*>(base) + released, static_cast<size_t>(read_up_to - released),
                MADV_DONTNEED);
      released = read_up_to;
    }
  }
}

}  // namespace photon
