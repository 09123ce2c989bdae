#include "format/model_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <numbers>
#include <set>

#include "core/error.h"
#include "format/data_hash.h"
#include "format/model_schema.h"
#include "format/npz.h"

namespace photon {

static_assert(std::endian::native == std::endian::little,
              "model files are little-endian and written straight from memory");

namespace {

// Values are narrowed to the storage dtype this many at a time (whole q8 blocks), so only one f32
// copy of the largest tensor is ever held.
constexpr size_t kConvertChunk = size_t{1} << 20;

// "<path>.tmp", written sequentially (plus one rewrite of the header) and renamed over `path` by
// commit(); removed if the write does not get that far.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(path), tmp_(path + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) io_error("cannot create");
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void append(const void* data, size_t n) {
    write_at(position_, data, n);
    position_ += n;
  }
  void write_at(uint64_t offset, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t written =
          ::pwrite(fd_, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) io_error("cannot write");
      p += written;
      offset += static_cast<uint64_t>(written);
      n -= static_cast<size_t>(written);
    }
  }
  uint64_t position() const { return position_; }
  void commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) io_error("cannot write");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail(PHOTON_ERR_IO, "cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(errno));
    committed_ = true;
  }

 private:
  [[noreturn]] void io_error(const char* what) {
    fail(PHOTON_ERR_IO,
         std::string(what) + " " + tmp_ + " (writing " + path_ + "): " + std::strerror(errno));
  }
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t position_ = 0;
  bool committed_ = false;
};

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// The caller's entries (a repeated key keeps its first position and its last value), then the
// defaults it did not set.
std::vector<std::pair<std::string, std::string>> file_metadata(const WriteOptions& options) {
  std::vector<std::pair<std::string, std::string>> out;
  auto set = [&](const std::string& key, const std::string& value, bool replace) {
    for (auto& entry : out)
      if (entry.first == key) {
        if (replace) entry.second = value;
        return;
      }
    out.emplace_back(key, value);
  };
  for (const auto& [key, value] : options.metadata) set(key, value, true);
  set("producer", std::string("photon-sdk ") + PHOTON_VERSION_STRING, false);
  set("created", utc_now_iso8601(), false);
  return out;
}

// `tensors` in the order of expected_tensors(config), after checking that they are that set
// with exactly those shapes.
std::vector<const WriteTensor*> match_expected(const std::string& path, const ModelConfig& config,
                                               const std::vector<WriteTensor>& tensors) {
  const std::vector<TensorSpec> expected = expected_tensors(config);
  std::map<std::string, const TensorSpec*> expected_by_name;
  for (const TensorSpec& spec : expected) expected_by_name[spec.name] = &spec;
  std::map<std::string, const WriteTensor*> given;
  for (const WriteTensor& t : tensors) {
    if (expected_by_name.count(t.name) == 0)
      fail(PHOTON_ERR_TENSOR_SET,
           path + ": tensor '" + t.name + "' is not used by the configuration");
    if (!given.emplace(t.name, &t).second)
      fail(PHOTON_ERR_TENSOR_SET, path + ": tensor '" + t.name + "' is given more than once");
  }
  std::vector<const WriteTensor*> ordered;
  for (const TensorSpec& spec : expected) {
    auto it = given.find(spec.name);
    if (it == given.end())
      fail(PHOTON_ERR_TENSOR_SET, path + ": tensor '" + spec.name + "' is missing (shape " +
                                      shape_to_string(spec.shape) + ")");
    if (it->second->shape != spec.shape)
      fail(PHOTON_ERR_TENSOR_SHAPE,
           path + ": tensor '" + spec.name + "' has shape " + shape_to_string(it->second->shape) +
               " but the configuration needs " + shape_to_string(spec.shape));
    ordered.push_back(it->second);
  }
  return ordered;
}

// Counter-based random numbers: element i of a stream is a function of (key, i) alone, so tensors
// fill in parallel and the values do not depend on the thread count or the order of tensors.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t splitmix64_at(uint64_t key, uint64_t index) {
  return mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
}

uint64_t tensor_key(uint64_t seed, const std::string& name) {
  return mix64(mix64(seed) ^ hash_data_section(name.data(), name.size()));
}

// normal(0, stddev) by Box-Muller in float (half the cost of double, and plenty for weights that
// only need to be plausible): pair p draws one 64-bit number, whose halves give the radius and the
// angle; elements 2p and 2p+1 are its cosine and sine halves. The radius caps at 6.7 stddev.
void fill_normal(float* dst, int64_t n, uint64_t key, float stddev) {
  const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static) if (pairs > 8192)
  for (int64_t p = 0; p < pairs; ++p) {
    const uint64_t bits = splitmix64_at(key, static_cast<uint64_t>(p));
    const float u1 = static_cast<float>((bits >> 32) + 1) * 0x1p-32f;  // (0, 1]: log is finite
    const float u2 = static_cast<float>(bits & 0xffffffffu) * 0x1p-32f;
    const float radius = stddev * std::sqrt(-2.0f * std::log(u1));
    const float angle = 2.0f * std::numbers::pi_v<float> * u2;
    dst[2 * p] = radius * std::cos(angle);
    if (2 * p + 1 < n) dst[2 * p + 1] = radius * std::sin(angle);
  }
}

std::string value_text(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(value));
  return text;
}

// Model files hold finite weights only: a NaN or an infinity would reach every logit it touches.
// `values` are elements first .. first + count of the tensor.
void check_finite(const std::string& path, const TensorEntry& entry, const float* values,
                  size_t first, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i]))
      fail(PHOTON_ERR_NOT_FINITE,
           path + ": tensor '" + entry.name + "' holds " + value_text(values[i]) + " at " +
               element_index(entry.shape, first + i) + " (element " + std::to_string(first + i) +
               "); model files hold finite weights only");
}

// A finite f32 value whose f16 or bf16 rounding is infinite does not fit the storage type.
void check_fits(const std::string& path, const TensorEntry& entry, const float* values,
                const uint16_t* stored, size_t first, size_t count) {
  const uint16_t exponent = entry.dtype == DType::F16 ? 0x7c00 : 0x7f80;
  for (size_t i = 0; i < count; ++i)
    if ((stored[i] & exponent) == exponent)
      fail(PHOTON_ERR_NOT_FINITE,
           path + ": tensor '" + entry.name + "' holds " + value_text(values[i]) + " at " +
               element_index(entry.shape, first + i) + " (element " + std::to_string(first + i) +
               "), which overflows " + dtype_name(entry.dtype) + " (largest finite value " +
               value_text(entry.dtype == DType::F16 ? 65504.0f : 3.3895314e38f) +
               "); store the weights as " + (entry.dtype == DType::F16 ? "bf16 or f32" : "f32"));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

DType stored_dtype(DType dtype, const std::vector<int64_t>& shape) {
  if (dtype != DType::Q8) return dtype;
  if (shape.size() < 2) return DType::F32;
  return shape.back() % kQ8Block == 0 ? DType::Q8 : DType::F16;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(PHOTON_ERR_IO, "cannot open " + path + ": " + std::strerror(errno));
  // Not `stream << in.rdbuf()`: that swallows an allocation failure and returns a truncated file.
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0)
    text.append(chunk, static_cast<size_t>(in.gcount()));
  if (in.bad()) fail(PHOTON_ERR_IO, "cannot read " + path);
  return text;
}

void write_model_file(const std::string& path, const ModelConfig& config,
                      const std::string& tokenizer_model, const std::vector<WriteTensor>& tensors,
                      const WriteOptions& options) {
  try {
    validate_config(config);
  } catch (const Error& e) {
    fail(e.status(), path + ": " + e.what());
  }
  const std::vector<const WriteTensor*> ordered = match_expected(path, config, tensors);
  // The tokenizer lives inside the FlatBuffer header, which must stay below 2 GiB.
  if (tokenizer_model.size() > (size_t{1} << 30))
    fail(PHOTON_ERR_TOKENIZER, path + ": the tokenizer model of " +
                                   std::to_string(tokenizer_model.size()) + " bytes is too large");

  ModelHeader header;
  header.config = config;
  header.tokenizer = tokenizer_model;
  header.metadata = file_metadata(options);
  int64_t max_elements = 0;
  for (const WriteTensor* t : ordered) {
    TensorEntry entry;
    entry.name = t->name;
    entry.dtype = stored_dtype(options.dtype, t->shape);
    entry.shape = t->shape;
    entry.offset = align_up(header.data_size, kDataAlignment);
    const int64_t elements = TensorSpec{t->name, t->shape}.elements();
    entry.size = dtype_bytes(entry.dtype, static_cast<uint64_t>(elements));
    header.data_size = entry.offset + entry.size;
    max_elements = std::max(max_elements, elements);
    header.tensors.push_back(std::move(entry));
  }

  auto report = [&](float fraction) {
    if (options.progress && !options.progress(fraction))
      fail(PHOTON_ERR_CANCELLED, path + ": writing cancelled");
  };
  report(0.0f);

  std::vector<float> values;
  std::vector<uint16_t> staging;  // f16 or bf16 values, or q8 blocks (fewer bytes)
  try {
    values.resize(static_cast<size_t>(max_elements));
    if (options.dtype != DType::F32) staging.resize(kConvertChunk);
  } catch (const std::bad_alloc&) {
    fail(PHOTON_ERR_OUT_OF_MEMORY,
         path + ": cannot allocate a buffer of " + std::to_string(max_elements) + " floats");
  }

  TempFile file(path);
  // The header is written with a placeholder hash, then rewritten in place: its size does not
  // depend on the hash (serialize_header stores every scalar).
  const std::vector<uint8_t> placeholder = serialize_header(header);
  const uint64_t data_offset = align_up(placeholder.size(), kDataAlignment);
  const std::vector<uint8_t> zeros(kDataAlignment, 0);
  file.append(placeholder.data(), placeholder.size());
  file.append(zeros.data(), data_offset - placeholder.size());

  DataHasher hasher;
  auto append_data = [&](const void* data, size_t n) {
    hasher.update(data, n);
    file.append(data, n);
  };
  for (size_t i = 0; i < ordered.size(); ++i) {
    const TensorEntry& entry = header.tensors[i];
    const size_t padding = entry.offset - (file.position() - data_offset);
    append_data(zeros.data(), padding);
    const size_t n = static_cast<size_t>(TensorSpec{entry.name, entry.shape}.elements());
    ordered[i]->fill(values.data());
    for (size_t done = 0; done < n; done += kConvertChunk) {
      const size_t count = std::min(kConvertChunk, n - done);
      check_finite(path, entry, values.data() + done, done, count);
      if (entry.dtype == DType::F32) {
        append_data(values.data() + done, count * 4);
      } else {
        convert_from_f32(entry.dtype, values.data() + done, staging.data(), count);
        if (entry.dtype != DType::Q8)  // a finite block's scale is finite
          check_fits(path, entry, values.data() + done, staging.data(), done, count);
        append_data(staging.data(), dtype_bytes(entry.dtype, count));
      }
    }
    report(static_cast<float>(static_cast<double>(entry.offset + entry.size) /
                              static_cast<double>(header.data_size)));
  }

  header.data_hash = hasher.finish();
  const std::vector<uint8_t> final_header = serialize_header(header);
  if (final_header.size() != placeholder.size())
    fail(PHOTON_ERR_INTERNAL, path + ": the header changed size when its hash was filled in");
  file.write_at(0, final_header.data(), final_header.size());
  file.commit();
}

void rewrite_model_file(const ModelFile& source, const std::string& tokenizer_model,
                        const std::string& path, const WriteOptions& options) {
  std::vector<WriteTensor> tensors;
  for (const TensorEntry& t : source.tensors()) {
    const TensorEntry* entry = &t;
    tensors.push_back({t.name, t.shape, [entry](float* dst) {
                         convert_to_f32(
                             entry->dtype, entry->data, dst,
                             static_cast<size_t>(TensorSpec{entry->name, entry->shape}.elements()));
                       }});
  }
  WriteOptions rewritten = options;
  rewritten.metadata.clear();
  auto given = [&](const std::string& key) {
    for (const auto& entry : options.metadata)
      if (entry.first == key) return true;
    return false;
  };
  for (const auto& [key, value] : source.metadata())
    if (key != "producer" && key != "created" && key != "source" && !given(key))
      rewritten.metadata.emplace_back(key, value);
  if (!given("source"))
    rewritten.metadata.emplace_back("source", std::filesystem::path(source.path()).filename());
  rewritten.metadata.insert(rewritten.metadata.end(), options.metadata.begin(),
                            options.metadata.end());
  write_model_file(path, source.config(), tokenizer_model, tensors, rewritten);
}

void write_random_model(const std::string& path, const ModelConfig& config,
                        const std::string& tokenizer_model, uint64_t seed,
                        const WriteOptions& options) {
  std::vector<WriteTensor> tensors;
  for (const TensorSpec& spec : expected_tensors(config)) {
    WriteTensor t{spec.name, spec.shape, {}};
    const int64_t n = spec.elements();
    if (ends_with(spec.name, "norm")) {  // RMSNorm weights
      t.fill = [n](float* dst) { std::fill(dst, dst + n, 1.0f); };
    } else if (ends_with(spec.name, ".bias")) {
      t.fill = [n](float* dst) { std::fill(dst, dst + n, 0.0f); };
    } else {  // matrices, embeddings and the start vector
      const uint64_t key = tensor_key(seed, spec.name);
      t.fill = [n, key](float* dst) { fill_normal(dst, n, key, 0.02f); };
    }
    tensors.push_back(std::move(t));
  }
  write_model_file(path, config, tokenizer_model, tensors, options);
}

void convert_npz_model(const std::string& config_json_path, const std::string& npz_path,
                       const std::string& tokenizer_model, const std::string& out_path,
                       const WriteOptions& options) {
  const ModelConfig config = config_from_json(read_whole_file(config_json_path), config_json_path);
  const std::map<std::string, NpyArray> arrays = read_npz(npz_path);

  const std::vector<TensorSpec> expected = expected_tensors(config);
  std::set<std::string> expected_names;
  for (const TensorSpec& spec : expected) expected_names.insert(spec.name);
  for (const auto& [name, array] : arrays)
    if (expected_names.count(name) == 0)
      fail(PHOTON_ERR_TENSOR_SET,
           npz_path + ": array '" + name + "' is not used by " + config_json_path);
  std::vector<WriteTensor> tensors;
  for (const TensorSpec& spec : expected) {
    auto it = arrays.find(spec.name);
    if (it == arrays.end())
      fail(PHOTON_ERR_TENSOR_SET, npz_path + ": array '" + spec.name + "' is missing (" +
                                      config_json_path + " needs shape " +
                                      shape_to_string(spec.shape) + ")");
    const NpyArray& array = it->second;
    if (array.shape != spec.shape)
      fail(PHOTON_ERR_TENSOR_SHAPE, npz_path + ": array '" + spec.name + "' has shape " +
                                        shape_to_string(array.shape) + " but " + config_json_path +
                                        " needs " + shape_to_string(spec.shape));
    tensors.push_back({spec.name, spec.shape, [&array](float* dst) {
                         std::copy(array.data.begin(), array.data.end(), dst);
                       }});
  }

  WriteOptions with_source = options;
  if (std::none_of(options.metadata.begin(), options.metadata.end(),
                   [](const auto& entry) { return entry.first == "source"; }))
    with_source.metadata.emplace_back("source",
                                      std::filesystem::path(npz_path).filename().string());
  write_model_file(out_path, config, tokenizer_model, tensors, with_source);
}

}  // namespace photon
