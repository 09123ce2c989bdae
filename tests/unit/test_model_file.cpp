// Model files: write/read round trips, and every kind of damaged file refused with its own status.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <map>

#include "core/error.h"
#include "format/data_hash.h"
#include "format/model_file.h"
#include "format/model_schema.h"
#include "format/model_writer.h"
#include "model_generated.h"
#include "test_model_file_util.h"

namespace photon {
namespace {

using namespace test;

Failure open_failure(const std::string& path) {
  return run([&] { ModelFile::open(path); });
}

// A consistent header for `config` laid out as the writer does, for tests to damage.
ModelHeader valid_header(const ModelConfig& config, DType dtype = DType::F32) {
  ModelHeader h;
  h.config = config;
  h.tokenizer = kTokenizer;
  for (const TensorSpec& spec : expected_tensors(config)) {
    TensorEntry e;
    e.name = spec.name;
    e.dtype = dtype;
    e.shape = spec.shape;
    e.offset = align_up(h.data_size, kDataAlignment);
    e.size = static_cast<uint64_t>(spec.elements()) * dtype_size(dtype);
    h.data_size = e.offset + e.size;
    h.tensors.push_back(e);
  }
  h.metadata = {{"producer", "test"}};
  return h;
}

// header, zero padding, then `data_bytes` zero bytes of data (data_size unless given).
void write_crafted(const std::string& path, const ModelHeader& h, int64_t data_bytes = -1) {
  std::vector<uint8_t> bytes = serialize_header(h);
  bytes.resize(align_up(bytes.size(), kDataAlignment), 0);
  bytes.resize(bytes.size() + (data_bytes < 0 ? h.data_size : static_cast<uint64_t>(data_bytes)),
               0);
  write_bytes(path, bytes);
}

TensorEntry& tensor_named(ModelHeader& h, const std::string& name) {
  for (TensorEntry& t : h.tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

class RoundTrip : public testing::TestWithParam<DType> {};

TEST_P(RoundTrip, ValuesConfigAndLayoutSurvive) {
  const DType dtype = GetParam();
  TempDir dir;
  const std::string path = dir.file("tiny.photon");
  const ModelConfig config = tiny_photon();
  WriteOptions options;
  options.dtype = dtype;
  options.metadata = {{"source", "unit test"}};
  std::vector<WriteTensor> tensors = ramp_tensors(config);
  std::reverse(tensors.begin(), tensors.end());  // any order is accepted
  write_model_file(path, config, kTokenizer, tensors, options);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const auto file = ModelFile::open(path);
  EXPECT_EQ(file->format_version(), kModelFormatVersion);
  EXPECT_EQ(file->config(), config);
  EXPECT_EQ(file->tokenizer_model(), kTokenizer);
  const std::vector<TensorSpec> specs = expected_tensors(config);
  ASSERT_EQ(file->tensors().size(), specs.size());

  const std::vector<uint8_t> bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), file->file_size());
  const uint32_t prefix =
      static_cast<uint32_t>(bytes[0] | bytes[1] << 8 | bytes[2] << 16 | bytes[3] << 24);
  EXPECT_EQ(file->data_offset(), align_up(4 + uint64_t{prefix}, kDataAlignment));
  const uint64_t data_size = file->file_size() - file->data_offset();
  EXPECT_EQ(file->data_hash(), hash_data_section(bytes.data() + file->data_offset(), data_size));

  std::vector<float> expected, actual;
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorEntry& t = file->tensors()[k];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, specs[k].name);  // written in the configuration's order
    EXPECT_EQ(file->find(t.name), &t);
    EXPECT_EQ(t.dtype, dtype);
    EXPECT_EQ(t.shape, specs[k].shape);
    EXPECT_EQ(t.offset % kDataAlignment, 0u);
    const size_t n = static_cast<size_t>(specs[k].elements());
    ASSERT_EQ(t.size, n * dtype_size(dtype));
    ASSERT_EQ(t.data, file->tensors()[0].data - file->tensors()[0].offset + t.offset);
    ASSERT_EQ(std::memcmp(t.data, bytes.data() + file->data_offset() + t.offset, t.size), 0);
    expected.resize(n);
    actual.resize(n);
    for (size_t i = 0; i < n; ++i) expected[i] = ramp_value(k, i);
    std::vector<uint8_t> narrowed(n * dtype_size(dtype));
    convert_from_f32(dtype, expected.data(), narrowed.data(), n);
    convert_to_f32(dtype, narrowed.data(), expected.data(), n);
    convert_to_f32(dtype, t.data, actual.data(), n);
    ASSERT_EQ(actual, expected);
  }
  EXPECT_EQ(file->find("no.such.tensor"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(EachDType, RoundTrip, testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const auto& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

TEST(ModelFile, VanillaConfigRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("vanilla.photon");
  const ModelConfig config = tiny_vanilla();
  write_model_file(path, config, kTokenizer, ramp_tensors(config), {});
  const auto file = ModelFile::open(path);
  EXPECT_EQ(file->config(), config);
  EXPECT_EQ(file->tensors().size(), expected_tensors(config).size());
}

TEST(ModelFile, MetadataDefaultsAndOverrides) {
  TempDir dir;
  const std::string path = dir.file("meta.photon");
  WriteOptions options;
  options.metadata = {{"source", "a"}, {"license", "none"}, {"source", "b"}};
  write_model_file(path, tiny_vanilla(), kTokenizer, ramp_tensors(tiny_vanilla()), options);
  const auto file = ModelFile::open(path);
  std::map<std::string, std::string> meta(file->metadata().begin(), file->metadata().end());
  EXPECT_EQ(file->metadata().size(), 4u);
  EXPECT_EQ(meta["source"], "b");
  EXPECT_EQ(meta["license"], "none");
  EXPECT_EQ(meta["producer"], std::string("photon-sdk ") + PHOTON_VERSION_STRING);
  const std::string& created = meta["created"];  // e.g. 2025-01-31T23:59:07Z
  ASSERT_EQ(created.size(), 20u) << created;
  for (size_t i = 0; i < created.size(); ++i) {
    const char expected = std::string("dddd-dd-ddTdd:dd:ddZ")[i];
    if (expected == 'd')
      EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(created[i]))) << created;
    else
      EXPECT_EQ(created[i], expected) << created;
  }

  options.metadata = {{"producer", "my trainer"}, {"created", "yesterday"}};
  write_model_file(path, tiny_vanilla(), kTokenizer, ramp_tensors(tiny_vanilla()), options);
  const auto again = ModelFile::open(path);
  EXPECT_EQ(again->metadata(), options.metadata);
}

TEST(ModelFile, CraftedValidHeaderLoads) {
  // The damage tests below start from this header, so it must be accepted as it is.
  TempDir dir;
  const std::string path = dir.file("crafted.photon");
  write_crafted(path, valid_header(tiny_photon(), DType::BF16));
  EXPECT_EQ(open_failure(path).status, PHOTON_OK) << open_failure(path).message;
}

// Past 4 GiB, beyond 32-bit unsigned offsets too, the reader must still find every tensor where
// the header says: the photon-1.2b preset in f32 (~4.9 GB) as a sparse file whose only data are
// marks at both ends of each tensor, so that it costs no disk and runs in every suite.
TEST(LargeModel, TensorsBeyond4GiBOfASparseFile) {
  ModelConfig config;
  ASSERT_TRUE(find_preset("photon-1.2b", &config));
  const ModelHeader h = valid_header(config);
  std::vector<uint8_t> header = serialize_header(h);
  header.resize(align_up(header.size(), kDataAlignment), 0);
  TempDir dir;
  const std::string path = dir.file("sparse.photon");
  write_bytes(path, header);
  fs::resize_file(path, header.size() + h.data_size);
  auto mark = [](size_t tensor, bool last) { return static_cast<float>(2 * tensor + last + 1); };
  {
    std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
    for (size_t i = 0; i < h.tensors.size(); ++i) {
      for (bool last : {false, true}) {
        const float value = mark(i, last);
        out.seekp(static_cast<std::streamoff>(header.size() + h.tensors[i].offset +
                                              (last ? h.tensors[i].size - 4 : 0)));
        out.write(reinterpret_cast<const char*>(&value), 4);
      }
    }
    ASSERT_TRUE(out.good());
  }
  const auto file = ModelFile::open(path);
  EXPECT_GT(file->file_size(), uint64_t{4} << 30);
  int beyond_4gib = 0;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const TensorEntry* t = file->find(h.tensors[i].name);
    ASSERT_NE(t, nullptr) << h.tensors[i].name;
    beyond_4gib += file->data_offset() + t->offset > uint64_t{4} << 30;
    float first, last;
    std::memcpy(&first, t->data, 4);
    std::memcpy(&last, t->data + t->size - 4, 4);
    EXPECT_EQ(first, mark(i, false)) << t->name;
    EXPECT_EQ(last, mark(i, true)) << t->name;
  }
  EXPECT_GT(beyond_4gib, 0);
}

TEST(ModelFile, MissingFileAndDirectoryAreIoErrors) {
  TempDir dir;
  const Failure missing = open_failure(dir.file("absent.photon"));
  EXPECT_EQ(missing.status, PHOTON_ERR_IO);
  EXPECT_NE(missing.message.find("absent.photon"), std::string::npos) << missing.message;
  EXPECT_EQ(open_failure(dir.file("")).status, PHOTON_ERR_IO);
}

TEST(ModelFile, TruncatedFilesAreTruncated) {
  TempDir dir;
  const std::string path = dir.file("full.photon");
  write_model_file(path, tiny_photon(), kTokenizer, ramp_tensors(tiny_photon()), {});
  const std::vector<uint8_t> full = read_bytes(path);
  const uint64_t data_offset = ModelFile::open(path)->data_offset();
  const std::string cut_path = dir.file("cut.photon");
  for (size_t cut : {size_t{0}, size_t{3}, size_t{7}, size_t{10}, size_t{100},
                     static_cast<size_t>(data_offset) - 1, static_cast<size_t>(data_offset) + 10,
                     full.size() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    write_bytes(cut_path,
                std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(cut)));
    const Failure f = open_failure(cut_path);
    EXPECT_EQ(f.status, PHOTON_ERR_TRUNCATED) << f.message;
    EXPECT_NE(f.message.find(cut_path), std::string::npos) << f.message;
  }
}

TEST(ModelFile, OtherFilesHaveABadIdentifier) {
  TempDir dir;
  const std::string path = dir.file("model.photon");
  write_crafted(path, valid_header(tiny_photon()));
  std::vector<uint8_t> bytes = read_bytes(path);
  std::memcpy(bytes.data() + 8, "GGUF", 4);
  write_bytes(path, bytes);
  Failure f = open_failure(path);
  EXPECT_EQ(f.status, PHOTON_ERR_BAD_IDENTIFIER) << f.message;
  EXPECT_NE(f.message.find("not a PHOTON model file"), std::string::npos) << f.message;

  const std::string text = "{\"arch\": \"photon\", \"vocab_size\": 32000}\n";
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
  EXPECT_EQ(open_failure(path).status, PHOTON_ERR_BAD_IDENTIFIER);
}

TEST(ModelFile, DamagedFlatBufferIsCorrupt) {
  TempDir dir;
  const std::string path = dir.file("model.photon");
  write_crafted(path, valid_header(tiny_photon()));
  std::vector<uint8_t> bytes = read_bytes(path);
  const uint8_t far_root[4] = {0xf0, 0xff, 0xff, 0x0f};  // the root table offset, past the header
  std::memcpy(bytes.data() + 4, far_root, 4);
  write_bytes(path, bytes);
  const Failure f = open_failure(path);
  EXPECT_EQ(f.status, PHOTON_ERR_CORRUPT) << f.message;
}

TEST(ModelFile, FormatVersions) {
  TempDir dir;
  const std::string path = dir.file("model.photon");
  ModelHeader h = valid_header(tiny_photon());
  h.format_version = kModelFormatVersion + 1;
  write_crafted(path, h);
  Failure f = open_failure(path);
  EXPECT_EQ(f.status, PHOTON_ERR_UNSUPPORTED_VERSION) << f.message;
  h.format_version = 0;
  write_crafted(path, h);
  EXPECT_EQ(open_failure(path).status, PHOTON_ERR_CORRUPT);
}

TEST(ModelFile, InvalidConfigIsBadConfig) {
  TempDir dir;
  const std::string path = dir.file("model.photon");
  ModelHeader h = valid_header(tiny_photon());
  h.config.levels[1].encoder.head_dim = 3;
  write_crafted(path, h);
  const Failure f = open_failure(path);
  EXPECT_EQ(f.status, PHOTON_ERR_BAD_CONFIG) << f.message;
  EXPECT_NE(f.message.find("head_dim"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find(path), std::string::npos) << f.message;
}

TEST(ModelFile, UnknownEnumValuesAreRefused) {
  TempDir dir;
  const std::string path = dir.file("model.photon");
  flatbuffers::FlatBufferBuilder b;
  const auto config = fb::CreateConfig(b, static_cast<fb::Arch>(7), 32, 1e-5f, 10000.0f, 16);
  fb::FinishSizePrefixedModelBuffer(b, fb::CreateModel(b, 1, config, 0, 0, 0, 0, kDataAlignment));
  std::vector<uint8_t> bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  bytes.resize(align_up(bytes.size(), kDataAlignment), 0);
  write_bytes(path, bytes);
  const Failure f = open_failure(path);
  EXPECT_EQ(f.status, PHOTON_ERR_BAD_CONFIG) << f.message;
  EXPECT_NE(f.message.find("arch"), std::string::npos) << f.message;

  ModelHeader h = valid_header(tiny_vanilla());
  h.tensors[3].dtype = static_cast<DType>(9);
  write_crafted(path, h);
  EXPECT_EQ(open_failure(path).status, PHOTON_ERR_CORRUPT);
}

TEST(ModelFile, DataSectionSizes) {
  TempDir dir;
  const std::string path = dir.file("model.photon");
  ModelHeader h = valid_header(tiny_vanilla());
  const uint64_t real_size = h.data_size;
  h.data_size = UINT64_MAX - 16;
  write_crafted(path, h, static_cast<int64_t>(real_size));
  EXPECT_EQ(open_failure(path).status, PHOTON_ERR_SIZE_OVERFLOW);

  h.data_size = real_size;
  write_crafted(path, h, static_cast<int64_t>(real_size) + 64);
  EXPECT_EQ(open_failure(path).status, PHOTON_ERR_CORRUPT);  // trailing bytes

  h.data_alignment = 32;
  write_crafted(path, h);
  EXPECT_EQ(open_failure(path).status, PHOTON_ERR_CORRUPT);
}

// Applies `damage` to a valid header of the tiny photon model and returns the failure.
Failure damaged(const std::function<void(ModelHeader&)>& damage) {
  TempDir dir;
  const std::string path = dir.file("damaged.photon");
  ModelHeader h = valid_header(tiny_photon());
  damage(h);
  write_crafted(path, h);
  Failure f = open_failure(path);
  EXPECT_NE(f.message.find(path), std::string::npos) << f.message;
  return f;
}

TEST(ModelFile, TensorOutsideDataSectionIsOutOfBounds) {
  const Failure f = damaged([](ModelHeader& h) {
    tensor_named(h, "lm_head").offset = align_up(h.data_size, kDataAlignment);
  });
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_BOUNDS) << f.message;
  EXPECT_NE(f.message.find("lm_head"), std::string::npos) << f.message;
}

TEST(ModelFile, TensorOffsetOverflowIsSizeOverflow) {
  const Failure f = damaged([](ModelHeader& h) { h.tensors[0].offset = UINT64_MAX - 63; });
  EXPECT_EQ(f.status, PHOTON_ERR_SIZE_OVERFLOW) << f.message;
  EXPECT_NE(f.message.find("tok_emb_enc"), std::string::npos) << f.message;
}

TEST(ModelFile, OverflowingDimsAreSizeOverflow) {
  const Failure f = damaged([](ModelHeader& h) {
    tensor_named(h, "tok_emb_dec").shape = {int64_t{1} << 62, 16};
  });
  EXPECT_EQ(f.status, PHOTON_ERR_SIZE_OVERFLOW) << f.message;
  EXPECT_NE(f.message.find("tok_emb_dec"), std::string::npos) << f.message;
}

TEST(ModelFile, SizeDisagreeingWithShapeIsTensorShape) {
  const Failure f = damaged([](ModelHeader& h) { tensor_named(h, "dec.2.start").size -= 4; });
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SHAPE) << f.message;
  EXPECT_NE(f.message.find("dec.2.start"), std::string::npos) << f.message;
}

TEST(ModelFile, BadRanksAndNegativeDimsAreTensorShape) {
  EXPECT_EQ(damaged([](ModelHeader& h) { h.tensors[1].shape = {}; }).status,
            PHOTON_ERR_TENSOR_SHAPE);
  EXPECT_EQ(damaged([](ModelHeader& h) {
              h.tensors[1].shape = {1, 1, 1, 1, 4};
            }).status,
            PHOTON_ERR_TENSOR_SHAPE);
  EXPECT_EQ(damaged([](ModelHeader& h) {
              h.tensors[1].shape = {-4, -1};
            }).status,
            PHOTON_ERR_TENSOR_SHAPE);
}

TEST(ModelFile, MisalignedOrOverlappingTensorsAreCorrupt) {
  EXPECT_EQ(damaged([](ModelHeader& h) { h.tensors[1].offset += 4; }).status, PHOTON_ERR_CORRUPT);
  EXPECT_EQ(damaged([](ModelHeader& h) { h.tensors[2].offset = h.tensors[1].offset; }).status,
            PHOTON_ERR_CORRUPT);
}

TEST(ModelFile, TensorSetMismatches) {
  Failure f = damaged([](ModelHeader& h) { h.tensors.erase(h.tensors.begin() + 5); });
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET) << f.message;
  EXPECT_NE(f.message.find(expected_tensors(tiny_photon())[5].name), std::string::npos)
      << f.message;
  EXPECT_NE(f.message.find("missing"), std::string::npos) << f.message;

  f = damaged([](ModelHeader& h) { tensor_named(h, "enc.2.norm").name = "enc.2.extra"; });
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET) << f.message;
  EXPECT_NE(f.message.find("enc.2.extra"), std::string::npos) << f.message;

  f = damaged([](ModelHeader& h) { tensor_named(h, "enc.2.norm").name = "enc.1.norm"; });
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET) << f.message;
  EXPECT_NE(f.message.find("more than once"), std::string::npos) << f.message;
}

TEST(ModelFile, ShapeDisagreeingWithConfigIsTensorShape) {
  const Failure f = damaged([](ModelHeader& h) {
    TensorEntry& t = tensor_named(h, "lm_head");
    t.shape = {t.shape[1], t.shape[0]};  // same size, transposed
  });
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SHAPE) << f.message;
  EXPECT_NE(f.message.find("lm_head"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("[8, 512]"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("[512, 8]"), std::string::npos) << f.message;
}

TEST(ModelFile, ProgressIsReportedAndCanCancel) {
  TempDir dir;
  const std::string path = dir.file("model.photon");
  write_crafted(path, valid_header(tiny_photon()));
  std::vector<float> seen;
  ModelFile::open(path, [&](float f) {
    seen.push_back(f);
    return true;
  });
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen.front(), 0.0f);
  EXPECT_EQ(seen.back(), 1.0f);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  const Failure f = run([&] { ModelFile::open(path, [](float) { return false; }); });
  EXPECT_EQ(f.status, PHOTON_ERR_CANCELLED) << f.message;
}

}  // namespace
}  // namespace photon
