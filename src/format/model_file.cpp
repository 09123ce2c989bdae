#include "format/model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "format/data_hash.h"
#include "format/file_errors.h"
#include "format/model_schema.h"

namespace photon {

namespace {

// Bounds on the work the FlatBuffers verifier may do: the header is metadata only, so even a model
// with hundreds of thousands of tensors stays far below them.
constexpr flatbuffers::uoffset_t kMaxHeaderDepth = 16;
constexpr flatbuffers::uoffset_t kMaxHeaderTables = 1u << 22;

uint32_t read_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string printable(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (p[i] >= 0x20 && p[i] < 0x7f) ? static_cast<char>(p[i]) : '?';
  return s;
}

bool known_dtype(fb::DType t) {
  return t == fb::DType::F32 || t == fb::DType::F16 || t == fb::DType::BF16 || t == fb::DType::Q8;
}

// Checks one tensor entry against the data section; every product and sum is overflow-checked.
TensorEntry read_tensor(const fb::Tensor& t, uint64_t data_size, const FileErrors& errors) {
  TensorEntry e;
  e.name = t.name()->str();
  const auto* shape = t.shape();
  const size_t rank = shape == nullptr ? 0 : shape->size();
  if (rank < 1 || rank > PHOTON_MAX_DIMS)
    errors.fail_tensor(PHOTON_ERR_TENSOR_SHAPE, e.name,
                       "has rank " + std::to_string(rank) + "; ranks 1.." +
                           std::to_string(PHOTON_MAX_DIMS) + " are supported");
  // The verifier checks a vector's length field, not that its 8-byte elements are 8-byte aligned,
  // so a hand-made file can misalign the dimensions: they are copied out byte by byte.
  e.shape.resize(rank);
  std::memcpy(e.shape.data(), shape->Data(), rank * sizeof(int64_t));
  for (int64_t& d : e.shape) d = flatbuffers::EndianScalar(d);
  for (int64_t d : e.shape)
    if (d < 0)
      errors.fail_tensor(PHOTON_ERR_TENSOR_SHAPE, e.name,
                         "has a negative dimension in shape " + shape_to_string(e.shape));
  if (!known_dtype(t.dtype()))
    errors.fail_tensor(PHOTON_ERR_CORRUPT, e.name,
                       "has unknown dtype value " + std::to_string(static_cast<int>(t.dtype())));
  e.dtype = static_cast<DType>(t.dtype());
  if (e.dtype == DType::Q8 && e.shape.back() % kQ8Block != 0)
    errors.fail_tensor(PHOTON_ERR_TENSOR_SHAPE, e.name,
                       "is q8 with rows of " + std::to_string(e.shape.back()) +
                           " values; q8 rows hold whole blocks of " + std::to_string(kQ8Block));
  // Bytes per element, or per block of q8 (one block of its innermost dimension).
  uint64_t bytes = e.dtype == DType::Q8 ? kQ8BlockBytes : dtype_size(e.dtype);
  for (size_t i = 0; i < e.shape.size(); ++i) {
    const uint64_t d = static_cast<uint64_t>(e.shape[i]) /
                       (e.dtype == DType::Q8 && i + 1 == e.shape.size() ? kQ8Block : 1);
    if (__builtin_mul_overflow(bytes, d, &bytes))
      errors.fail_tensor(PHOTON_ERR_SIZE_OVERFLOW, e.name,
                         "of shape " + shape_to_string(e.shape) + " overflows 64-bit sizes");
  }
  e.offset = t.offset();
  e.size = t.size();
  if (e.size != bytes)
    errors.fail_tensor(PHOTON_ERR_TENSOR_SHAPE, e.name,
                       "declares " + std::to_string(e.size) + " bytes but shape " +
                           shape_to_string(e.shape) + " of " + dtype_name(e.dtype) + " needs " +
                           std::to_string(bytes));
  uint64_t end = 0;
  if (__builtin_add_overflow(e.offset, e.size, &end))
    errors.fail_tensor(PHOTON_ERR_SIZE_OVERFLOW, e.name,
                       "offset " + std::to_string(e.offset) + " + size " + std::to_string(e.size) +
                           " overflows 64 bits");
  if (end > data_size)
    errors.fail_tensor(PHOTON_ERR_TENSOR_BOUNDS, e.name,
                       "spans bytes " + std::to_string(e.offset) + ".." + std::to_string(end) +
                           " of a data section of " + std::to_string(data_size) + " bytes");
  if (e.offset % kDataAlignment != 0)
    errors.fail_tensor(PHOTON_ERR_CORRUPT, e.name,
                       "offset " + std::to_string(e.offset) + " is not " +
                           std::to_string(kDataAlignment) + "-byte aligned");
  return e;
}

void check_no_overlap(const std::vector<TensorEntry>& tensors, const FileErrors& errors) {
  std::vector<const TensorEntry*> by_offset;
  for (const TensorEntry& t : tensors)
    if (t.size > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->size > by_offset[i]->offset)
      errors.fail_tensor(PHOTON_ERR_CORRUPT, by_offset[i]->name,
                         "overlaps tensor '" + by_offset[i - 1]->name + "'");
}

// Identifier, size prefix and FlatBuffers verification; returns the verified root table.
const fb::Model& verify_header(const uint8_t* bytes, uint64_t file_size, const FileErrors& errors,
                               uint64_t* header_size) {
  // The identifier comes before the size prefix is trusted, so that any other kind of file is
  // called what it is rather than "truncated" by a prefix made of its first bytes.
  if (!fb::SizePrefixedModelBufferHasIdentifier(bytes))
    errors.fail(PHOTON_ERR_BAD_IDENTIFIER, "not a PHOTON model file (identifier \"" +
                                               printable(bytes + 8, 4) + "\", expected \"" +
                                               kModelFileIdentifier + "\")");
  *header_size = read_le32(bytes);
  if (4 + *header_size > file_size)
    errors.fail(PHOTON_ERR_TRUNCATED, "the header declares " + std::to_string(*header_size) +
                                          " bytes but the file has only " +
                                          std::to_string(file_size - 4) + " after its size prefix");
  if (4 + *header_size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    errors.fail(PHOTON_ERR_CORRUPT,
                "the header size " + std::to_string(*header_size) + " is invalid");
  flatbuffers::Verifier verifier(bytes, 4 + *header_size, kMaxHeaderDepth, kMaxHeaderTables);
  if (!fb::VerifySizePrefixedModelBuffer(verifier))
    errors.fail(PHOTON_ERR_CORRUPT, "the FlatBuffers header failed verification");
  return *fb::GetSizePrefixedModel(bytes);
}

// The file's tensors must be exactly expected_tensors(config), with its shapes.
void check_tensor_set(const std::vector<TensorEntry>& tensors,
                      const std::unordered_map<std::string, size_t>& index,
                      const ModelConfig& config, const FileErrors& errors) {
  const std::vector<TensorSpec> expected = expected_tensors(config);
  std::map<std::string, const TensorSpec*> expected_by_name;
  for (const TensorSpec& spec : expected) expected_by_name[spec.name] = &spec;
  for (const TensorEntry& t : tensors)
    if (expected_by_name.count(t.name) == 0)
      errors.fail_tensor(PHOTON_ERR_TENSOR_SET, t.name, "is not used by the configuration");
  for (const TensorSpec& spec : expected) {
    auto it = index.find(spec.name);
    if (it == index.end())
      errors.fail_tensor(
          PHOTON_ERR_TENSOR_SET, spec.name,
          "is missing (the configuration needs shape " + shape_to_string(spec.shape) + ")");
    const TensorEntry& t = tensors[it->second];
    if (t.shape != spec.shape)
      errors.fail_tensor(PHOTON_ERR_TENSOR_SHAPE, spec.name,
                         "has shape " + shape_to_string(t.shape) + " but the configuration needs " +
                             shape_to_string(spec.shape));
  }
}

}  // namespace

std::unique_ptr<ModelFile> ModelFile::open(const std::string& path, const ProgressFn& progress) {
  const FileErrors errors(path);
  auto report = [&](float fraction) {
    if (progress && !progress(fraction)) errors.fail(PHOTON_ERR_CANCELLED, "loading cancelled");
  };
  std::unique_ptr<ModelFile> file(new ModelFile());
  file->path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) errors.fail(PHOTON_ERR_IO, std::string("cannot open: ") + std::strerror(errno));
  {
    const FdCloser closer(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0)
      errors.fail(PHOTON_ERR_IO, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) errors.fail(PHOTON_ERR_IO, "not a regular file");
    file->file_size_ = static_cast<uint64_t>(st.st_size);
    if (file->file_size_ < 12)  // size prefix, root offset, identifier
      errors.fail(PHOTON_ERR_TRUNCATED, "file is " + std::to_string(file->file_size_) +
                                            " bytes, too short for a model header");
    void* map = ::mmap(nullptr, file->file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
      errors.fail(PHOTON_ERR_IO, std::string("cannot map: ") + std::strerror(errno));
    file->map_ = map;
    file->map_size_ = file->file_size_;
  }
  report(0.0f);
  const uint8_t* bytes = static_cast<const uint8_t*>(file->map_);
  const uint64_t file_size = file->file_size_;

  uint64_t header_size = 0;
  const fb::Model& model = verify_header(bytes, file_size, errors, &header_size);

  file->format_version_ = model.format_version();
  if (file->format_version_ == 0) errors.fail(PHOTON_ERR_CORRUPT, "format version 0 is invalid");
  if (file->format_version_ > kModelFormatVersion)
    errors.fail(PHOTON_ERR_UNSUPPORTED_VERSION,
                "written in format version " + std::to_string(file->format_version_) +
                    "; this build reads versions up to " + std::to_string(kModelFormatVersion));

  file->config_ = config_from_fb(*model.config(), path + ": config");
  try {
    validate_config(file->config_);
  } catch (const Error& e) {
    errors.fail(e.status(), e.what());
  }

  if (model.data_alignment() != kDataAlignment)
    errors.fail(PHOTON_ERR_CORRUPT, "data alignment " + std::to_string(model.data_alignment()) +
                                        " is not supported (expected " +
                                        std::to_string(kDataAlignment) + ")");
  file->data_offset_ = align_up(4 + header_size, kDataAlignment);
  const uint64_t data_size = model.data_size();
  uint64_t data_end = 0;
  if (__builtin_add_overflow(file->data_offset_, data_size, &data_end))
    errors.fail(PHOTON_ERR_SIZE_OVERFLOW,
                "data section size " + std::to_string(data_size) + " overflows 64 bits");
  if (file_size < data_end)
    errors.fail(PHOTON_ERR_TRUNCATED, "the data section ends at byte " + std::to_string(data_end) +
                                          " but the file has " + std::to_string(file_size) +
                                          " bytes");
  if (file_size > data_end)
    errors.fail(PHOTON_ERR_CORRUPT,
                std::to_string(file_size - data_end) + " unexpected bytes after the data section");
  file->data_hash_ = model.data_hash();
  report(0.3f);

  if (model.tensors() != nullptr)
    for (const fb::Tensor* t : *model.tensors()) {
      file->tensors_.push_back(read_tensor(*t, data_size, errors));
      file->tensors_.back().data = bytes + file->data_offset_ + file->tensors_.back().offset;
    }
  for (size_t i = 0; i < file->tensors_.size(); ++i)
    if (!file->index_.emplace(file->tensors_[i].name, i).second)
      errors.fail_tensor(PHOTON_ERR_TENSOR_SET, file->tensors_[i].name, "appears more than once");
  check_no_overlap(file->tensors_, errors);
  report(0.6f);

  check_tensor_set(file->tensors_, file->index_, file->config_, errors);

  if (model.tokenizer() != nullptr)
    file->tokenizer_.assign(reinterpret_cast<const char*>(model.tokenizer()->data()),
                            model.tokenizer()->size());
  if (model.metadata() != nullptr)
    for (const fb::KeyValue* kv : *model.metadata()) {
      for (const auto& [key, value] : file->metadata_)
        if (key == kv->key()->str())
          errors.fail(PHOTON_ERR_CORRUPT, "metadata key '" + key + "' appears more than once");
      file->metadata_.emplace_back(kv->key()->str(), kv->value()->str());
    }
  report(1.0f);
  return file;
}

namespace {

std::string non_finite_name(float value) {
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

// q8 tensors: their scales (the values, d * q, are then finite).
void verify_q8_scales(const TensorEntry& t, const FileErrors& errors) {
  const int64_t bad = first_non_finite(DType::Q8, t.data, t.size / kQ8BlockBytes * kQ8Block);
  if (bad < 0) return;
  const uint64_t first = static_cast<uint64_t>(bad), block = first / kQ8Block;
  float scale = 0.0f;
  convert_to_f32(DType::BF16, t.data + block * kQ8BlockBytes, &scale, 1);
  errors.fail_tensor(PHOTON_ERR_NOT_FINITE, t.name,
                     "holds a q8 scale of " + non_finite_name(scale) + " in block " +
                         std::to_string(block) + " (elements " + std::to_string(first) + " to " +
                         std::to_string(first + kQ8Block - 1) + ", from " +
                         element_index(t.shape, first) + ")");
}

}  // namespace

void ModelFile::verify_data() const {
  const FileErrors errors(path_);
  for (const TensorEntry& t : tensors_) {
    if (t.dtype == DType::Q8) {
      verify_q8_scales(t, errors);
      continue;
    }
    const uint64_t count = t.size / dtype_size(t.dtype);
    const int64_t bad = first_non_finite(t.dtype, t.data, count);
    if (bad >= 0) {
      float value = 0.0f;
      convert_to_f32(t.dtype, t.data + static_cast<uint64_t>(bad) * dtype_size(t.dtype), &value, 1);
      errors.fail_tensor(PHOTON_ERR_NOT_FINITE, t.name,
                         "holds " + non_finite_name(value) + " at " +
                             element_index(t.shape, static_cast<uint64_t>(bad)) + " (element " +
                             std::to_string(bad) + ")");
    }
  }
  const uint8_t* data = static_cast<const uint8_t*>(map_) + data_offset_;
  const uint64_t hash = hash_data_section(data, file_size_ - data_offset_);
  if (hash != data_hash_)
    errors.fail(PHOTON_ERR_CORRUPT, "the data section hashes to " + hex(hash) +
                                        " but the header records " + hex(data_hash_) +
                                        ": the weights changed after the file was written");
}

bool is_model_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return false;
  std::ifstream in(path, std::ios::binary);
  char head[12] = {};
  return in.read(head, sizeof head) && std::memcmp(head + 8, kModelFileIdentifier, 4) == 0;
}

std::string element_index(const std::vector<int64_t>& shape, uint64_t flat) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const uint64_t extent = static_cast<uint64_t>(std::max<int64_t>(shape[d], 1));
    index[d] = static_cast<int64_t>(flat % extent);
    flat /= extent;
  }
  return shape_to_string(index);
}

ModelFile::~ModelFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

const TensorEntry* ModelFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace photon
