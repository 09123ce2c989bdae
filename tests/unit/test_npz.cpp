// .npz reading and config.json + weights.npz conversion, on the fixtures of
// tests/data/make-npz-fixtures (tests/data/npz/).
#include <gtest/gtest.h>

#include <map>

#include "format/model_file.h"
#include "format/model_writer.h"
#include "format/npz.h"
#include "test_model_file_util.h"

namespace photon {
namespace {

using namespace test;

std::string fixture(const std::string& name) {
  return std::string(PHOTON_SOURCE_DIR) + "/tests/data/npz/" + name;
}

// make-npz-fixtures stores 0.5 * i - 1 at flat index i.
std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.5f * static_cast<float>(i) - 1.0f;
  return v;
}

Failure npz_failure(const std::string& path) {
  return run([&] { read_npz(path); });
}

class NpzVariants : public testing::TestWithParam<std::string> {};

TEST_P(NpzVariants, ReadsShapesAndValues) {
  const auto arrays = read_npz(fixture(GetParam()));
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays.at("a").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(arrays.at("a").data, ramp(12));
  EXPECT_EQ(arrays.at("b").shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(arrays.at("b").data, ramp(5));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, NpzVariants,
                         testing::Values("f32_stored.npz", "f32_deflated.npz", "f16_stored.npz",
                                         "f16_deflated.npz", "npy_v2_v3.npz"),
                         [](const auto& param_info) {
                           return param_info.param.substr(0, param_info.param.find('.'));
                         });

TEST(Npz, Zip64Records) {
  const auto arrays = read_npz(fixture("zip64.npz"));
  ASSERT_EQ(arrays.size(), 1u);
  EXPECT_EQ(arrays.at("a").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(arrays.at("a").data, ramp(12));
}

// np.asfortranarray of the 3 x 4 ramp: the file holds its columns one after another.
TEST(Npz, FortranOrderArraysAreReadInRowMajorOrder) {
  const auto arrays = read_npz(fixture("fortran.npz"));
  ASSERT_EQ(arrays.size(), 1u);
  EXPECT_EQ(arrays.at("a").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(arrays.at("a").data, ramp(12));
}

TEST(Npz, UnsupportedArraysNameTheArrayAndDtype) {
  Failure f = npz_failure(fixture("int64.npz"));
  EXPECT_EQ(f.status, PHOTON_ERR_UNSUPPORTED) << f.message;
  EXPECT_NE(f.message.find("'a'"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("<i8"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("int64.npz"), std::string::npos) << f.message;

  f = npz_failure(fixture("big_endian.npz"));
  EXPECT_EQ(f.status, PHOTON_ERR_UNSUPPORTED) << f.message;
  EXPECT_NE(f.message.find(">f4"), std::string::npos) << f.message;

  f = npz_failure(fixture("not_npy.npz"));
  EXPECT_EQ(f.status, PHOTON_ERR_UNSUPPORTED) << f.message;
  EXPECT_NE(f.message.find("readme.txt"), std::string::npos) << f.message;
}

TEST(Npz, DamagedArchives) {
  TempDir dir;
  const std::string path = dir.file("damaged.npz");
  EXPECT_EQ(npz_failure(dir.file("absent.npz")).status, PHOTON_ERR_IO);

  write_bytes(path, {'P', 'K', 3, 4});
  EXPECT_EQ(npz_failure(path).status, PHOTON_ERR_TRUNCATED);

  const std::string text(100, 'x');
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
  EXPECT_EQ(npz_failure(path).status, PHOTON_ERR_CORRUPT);

  // A flipped data byte of a stored member: the CRC catches it.
  std::vector<uint8_t> bytes = read_bytes(fixture("f32_stored.npz"));
  const std::vector<uint8_t> original = bytes;
  bytes[200] ^= 0x40;
  write_bytes(path, bytes);
  Failure f = npz_failure(path);
  EXPECT_EQ(f.status, PHOTON_ERR_CORRUPT) << f.message;

  // Garbage in a deflated stream.
  bytes = read_bytes(fixture("f32_deflated.npz"));
  for (size_t i = 60; i < 120; ++i) bytes[i] = static_cast<uint8_t>(i * 37);
  write_bytes(path, bytes);
  f = npz_failure(path);
  EXPECT_NE(f.status, PHOTON_OK) << f.message;
  EXPECT_NE(f.message.find(path), std::string::npos) << f.message;

  // Cut short: the end of central directory record is gone.
  write_bytes(path, std::vector<uint8_t>(original.begin(), original.begin() + 300));
  EXPECT_EQ(npz_failure(path).status, PHOTON_ERR_CORRUPT);
}

TEST(Npz, MemberDataPastTheEndIsTruncated) {
  // Move the central directory's local header offset of the first member near the end of file.
  TempDir dir;
  const std::string path = dir.file("moved.npz");
  std::vector<uint8_t> bytes = read_bytes(fixture("f32_stored.npz"));
  size_t cd = 0;
  for (size_t i = 0; i + 4 <= bytes.size(); ++i)
    if (bytes[i] == 'P' && bytes[i + 1] == 'K' && bytes[i + 2] == 1 && bytes[i + 3] == 2) {
      cd = i;
      break;
    }
  ASSERT_GT(cd, 0u);
  const uint32_t offset = static_cast<uint32_t>(bytes.size() - 10);
  std::memcpy(bytes.data() + cd + 42, &offset, 4);
  write_bytes(path, bytes);
  const Failure f = npz_failure(path);
  EXPECT_EQ(f.status, PHOTON_ERR_TRUNCATED) << f.message;
}

Failure convert_failure(const std::string& npz, const std::string& out) {
  return run([&] { convert_npz_model(fixture("model.json"), fixture(npz), kTokenizer, out, {}); });
}

TEST(Convert, NpzModelRoundTrips) {
  TempDir dir;
  const std::string out = dir.file("model.photon");
  WriteOptions options;
  options.dtype = DType::F16;
  convert_npz_model(fixture("model.json"), fixture("model.npz"), kTokenizer, out, options);
  const auto file = ModelFile::open(out);
  const auto arrays = read_npz(fixture("model.npz"));
  EXPECT_EQ(file->config().vocab_size, 16);
  EXPECT_EQ(file->config().num_levels(), 2);
  ASSERT_EQ(file->tensors().size(), arrays.size());
  for (const TensorEntry& t : file->tensors()) {
    const NpyArray& a = arrays.at(t.name);
    EXPECT_EQ(t.shape, a.shape);
    EXPECT_EQ(t.dtype, DType::F16);
    std::vector<float> values(a.data.size());
    convert_to_f32(t.dtype, t.data, values.data(), values.size());
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(values[i], f16_to_f32(f32_to_f16(a.data[i]))) << t.name << " [" << i << "]";
  }
  std::map<std::string, std::string> meta(file->metadata().begin(), file->metadata().end());
  EXPECT_EQ(meta["source"], "model.npz");
}

TEST(Convert, Float16ArraysAreAccepted) {
  TempDir dir;
  const std::string out = dir.file("model.photon");
  convert_npz_model(fixture("model.json"), fixture("model_f16.npz"), kTokenizer, out, {});
  const auto file = ModelFile::open(out);
  const auto arrays = read_npz(fixture("model.npz"));
  const TensorEntry* head = file->find("lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->dtype, DType::F32);
  std::vector<float> values(head->size / 4);
  std::memcpy(values.data(), head->data, head->size);
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(values[i], f16_to_f32(f32_to_f16(arrays.at("lm_head").data[i])));
}

TEST(Convert, RefusesArraySetsOtherThanTheConfigs) {
  TempDir dir;
  const std::string out = dir.file("model.photon");
  Failure f = convert_failure("model_missing.npz", out);
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET) << f.message;
  EXPECT_NE(f.message.find("dec.1.converter.bias"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("model_missing.npz"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("missing"), std::string::npos) << f.message;

  f = convert_failure("model_extra.npz", out);
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SET) << f.message;
  EXPECT_NE(f.message.find("enc.1.chunker.norm"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("model_extra.npz"), std::string::npos) << f.message;

  f = convert_failure("model_misshapen.npz", out);
  EXPECT_EQ(f.status, PHOTON_ERR_TENSOR_SHAPE) << f.message;
  EXPECT_NE(f.message.find("lm_head"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("[4, 16]"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("[16, 4]"), std::string::npos) << f.message;

  f = run([&] {
    convert_npz_model(dir.file("absent.json"), fixture("model.npz"), kTokenizer, out, {});
  });
  EXPECT_EQ(f.status, PHOTON_ERR_IO) << f.message;
  EXPECT_NE(f.message.find("absent.json"), std::string::npos) << f.message;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace photon
