// The safetensors reader: valid files read back (every dtype, odd data offsets, tensors larger
// than one read chunk, metadata), and every kind of damage refused with its status and a message
// naming the file and the tensor or field.
#include <gtest/gtest.h>

#include "format/safetensors.h"
#include "safetensors_util.h"
#include "test_model_file_util.h"

namespace photon {
namespace {

using namespace test;

std::vector<float> values(size_t n, float scale = 0.25f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 97) - 48);
  return v;
}

std::vector<float> read_all(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsTensor* t = file.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(t->elements()));
  file.read_f32(*t, out.data());
  return out;
}

class Safetensors : public testing::Test {
 protected:
  std::string write(const std::vector<uint8_t>& bytes) {
    write_bytes(path_, bytes);
    return path_;
  }
  Failure open_failure(const std::vector<uint8_t>& bytes) {
    write(bytes);
    return run([&] { SafetensorsFile::open(path_); });
  }
  // The header text as is, with data_bytes of data after it.
  Failure header_failure(const std::string& header, size_t data_bytes) {
    return open_failure(st_raw(header, data_bytes));
  }
  TempDir dir_;
  std::string path_ = dir_.file("model.safetensors");
};

TEST_F(Safetensors, ReadsEveryDtypeWithShapesAndMetadata) {
  // Values that f16 and bf16 hold exactly, so that each dtype reads back the same numbers.
  const std::vector<float> v = values(12);
  write(st_file({st_tensor("a", "F32", {3, 4}, v), st_tensor("b.weight", "F16", {12}, v),
                 st_tensor("c", "BF16", {2, 2, 3}, v), st_tensor("empty", "F32", {0, 4}, {})},
                {{"format", "pt"}, {"note", "x"}}));
  const auto file = SafetensorsFile::open(path_);
  ASSERT_EQ(file->tensors().size(), 4u);
  EXPECT_EQ(file->find("a")->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(file->find("a")->dtype, DType::F32);
  EXPECT_EQ(file->find("b.weight")->dtype, DType::F16);
  EXPECT_EQ(file->find("c")->dtype, DType::BF16);
  EXPECT_EQ(file->find("c")->shape, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(file->find("missing"), nullptr);
  EXPECT_EQ(read_all(*file, "a"), v);
  EXPECT_EQ(read_all(*file, "b.weight"), v);
  EXPECT_EQ(read_all(*file, "c"), v);
  EXPECT_EQ(file->find("empty")->elements(), 0);
  EXPECT_EQ(file->metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}}));
}

TEST_F(Safetensors, SixteenBitTensorsAtOddOffsets) {
  const std::vector<float> v = values(7);
  for (size_t padding : {0, 1, 3}) {
    write(st_file({st_tensor("x", "BF16", {7}, v), st_tensor("y", "F16", {7}, v)}, {}, padding));
    const auto file = SafetensorsFile::open(path_);
    EXPECT_EQ(read_all(*file, "x"), v) << padding;
    EXPECT_EQ(read_all(*file, "y"), v) << padding;
  }
}

TEST_F(Safetensors, TensorsLargerThanOneReadChunk) {
  // 3 Mi bf16 values (6 MiB) and 5 Mi f32 values (20 MiB) cross the reader's 8 MiB chunks.
  const std::vector<float> small = values(size_t{3} << 20, 1.0f);
  const std::vector<float> large = values(size_t{5} << 20, 0.5f);
  write(st_file({st_tensor("small", "BF16", {3, 1 << 20}, small),
                 st_tensor("large", "F32", {5 << 20}, large)},
                {}, 1));
  const auto file = SafetensorsFile::open(path_);
  EXPECT_EQ(read_all(*file, "large"), large);
  EXPECT_EQ(read_all(*file, "small"), small);
  EXPECT_EQ(read_all(*file, "large"), large);  // again, after its pages were released
}

TEST_F(Safetensors, AnEmptyHeaderIsAnEmptyFile) {
  write(st_raw("{}", 0));
  EXPECT_TRUE(SafetensorsFile::open(path_)->tensors().empty());
  write(st_raw("{}      ", 0));  // padded with spaces, as writers align the data
  EXPECT_TRUE(SafetensorsFile::open(path_)->tensors().empty());
}

struct Expect {
  photon_status status;
  std::vector<std::string> words;  // each must appear in the message
};

void expect(const Failure& f, const Expect& e, const std::string& path) {
  EXPECT_EQ(f.status, e.status) << f.message;
  EXPECT_NE(f.message.find(path), std::string::npos) << f.message;
  for (const std::string& w : e.words) EXPECT_NE(f.message.find(w), std::string::npos) << f.message;
}

TEST_F(Safetensors, FileLevelDamage) {
  expect(run([&] { SafetensorsFile::open(dir_.file("absent.safetensors")); }),
         {PHOTON_ERR_IO, {"cannot open"}}, "absent.safetensors");
  expect(run([&] { SafetensorsFile::open(dir_.file("")); }), {PHOTON_ERR_IO, {"regular file"}},
         dir_.file(""));
  expect(open_failure({1, 0, 0}), {PHOTON_ERR_TRUNCATED, {"3 bytes", "8-byte header length"}},
         path_);
  // A valid file cut inside its header, and inside its data.
  const std::vector<uint8_t> whole = st_file({st_tensor("w", "F32", {4}, values(4))});
  expect(open_failure(std::vector<uint8_t>(whole.begin(), whole.begin() + 20)),
         {PHOTON_ERR_TRUNCATED, {"header declares"}}, path_);
  expect(open_failure(std::vector<uint8_t>(whole.begin(), whole.end() - 3)),
         {PHOTON_ERR_TENSOR_BOUNDS, {"'w'", "spans bytes 0..16", "13 bytes"}}, path_);
  std::vector<uint8_t> huge = st_raw("{}", 0);
  huge[4] = 1;  // a header of 2^32 + 2 bytes
  expect(open_failure(huge), {PHOTON_ERR_CORRUPT, {"header length", "100000000"}}, path_);
  expect(header_failure("[1, 2]", 0), {PHOTON_ERR_CORRUPT, {"does not start with '{'"}}, path_);
  expect(header_failure("", 0), {PHOTON_ERR_CORRUPT, {"does not start with '{'"}}, path_);
  expect(header_failure("{\"a\": {\"dtype\": \"F32\"", 0), {PHOTON_ERR_CORRUPT, {"not valid JSON"}},
         path_);
  expect(header_failure("{\"a\xff\": 1}", 0), {PHOTON_ERR_CORRUPT, {"not valid JSON"}}, path_);
  expect(header_failure("{} trailing", 0), {PHOTON_ERR_CORRUPT, {"not valid JSON"}}, path_);
  expect(header_failure("{\"a\": {\"b\": {\"c\": [1]}}}", 0),
         {PHOTON_ERR_CORRUPT, {"nests deeper"}}, path_);
}

TEST_F(Safetensors, EntryDamage) {
  const std::string ok = R"("dtype": "F32", "shape": [2], "data_offsets": [0, 8])";
  auto one = [&](const std::string& entry, size_t data = 8) {
    return header_failure("{\"t.weight\": {" + entry + "}}", data);
  };
  expect(one(ok + R"(, "extra": 1)"), {PHOTON_ERR_CORRUPT, {"'t.weight'", "unknown field 'extra'"}},
         path_);
  expect(one(R"("dtype": "F32", "shape": [2])"),
         {PHOTON_ERR_CORRUPT, {"'t.weight'", "no field 'data_offsets'"}}, path_);
  expect(one(ok + R"(, "dtype": "F16")"),
         {PHOTON_ERR_CORRUPT, {"'t.weight'", "field 'dtype' twice"}}, path_);
  expect(header_failure("{\"t.weight\": 5}", 0),
         {PHOTON_ERR_CORRUPT, {"'t.weight'", "not a JSON object"}}, path_);
  expect(one(R"("dtype": "F64", "shape": [1], "data_offsets": [0, 8])"),
         {PHOTON_ERR_UNSUPPORTED, {"'t.weight'", "dtype F64", "F32, F16 and BF16"}}, path_);
  expect(one(R"("dtype": "I32", "shape": [2], "data_offsets": [0, 8])"),
         {PHOTON_ERR_UNSUPPORTED, {"dtype I32"}}, path_);
  expect(one(R"("dtype": 7, "shape": [2], "data_offsets": [0, 8])"),
         {PHOTON_ERR_CORRUPT, {"dtype that is not a string"}}, path_);
  expect(one(R"("dtype": "F32", "shape": 2, "data_offsets": [0, 8])"),
         {PHOTON_ERR_CORRUPT, {"shape that is not an array"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [-2], "data_offsets": [0, 8])"),
         {PHOTON_ERR_CORRUPT, {"shape must hold non-negative integers", "-2"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [2.5], "data_offsets": [0, 8])"),
         {PHOTON_ERR_CORRUPT, {"shape must hold non-negative integers"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [1, 1, 1, 1, 2], "data_offsets": [0, 8])"),
         {PHOTON_ERR_TENSOR_SHAPE, {"rank 5"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8])"),
         {PHOTON_ERR_SIZE_OVERFLOW, {"'t.weight'", "overflows"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [3], "data_offsets": [0, 8])"),
         {PHOTON_ERR_TENSOR_SHAPE, {"'t.weight'", "has 8 bytes", "[3] of F32 needs 12"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [2], "data_offsets": [8, 0])"),
         {PHOTON_ERR_CORRUPT, {"ends (0) before it begins (8)"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [2], "data_offsets": [0])"),
         {PHOTON_ERR_CORRUPT, {"data_offsets [begin, end]"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [2], "data_offsets": [4, 12])"),
         {PHOTON_ERR_TENSOR_BOUNDS, {"'t.weight'", "spans bytes 4..12", "8 bytes"}}, path_);
  expect(one(R"("dtype": "F32", "shape": [2], "data_offsets": [18446744073709551615, 7])"),
         {PHOTON_ERR_CORRUPT, {"before it begins"}}, path_);
  expect(header_failure("{\"" + std::string(5000, 'n') + "\": {" + ok + "}}", 8),
         {PHOTON_ERR_CORRUPT, {"a tensor name of 5000 bytes"}}, path_);
}

TEST_F(Safetensors, LayoutDamage) {
  const std::string a = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  expect(
      header_failure(
          "{" + a + ", " + R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16),
      {PHOTON_ERR_TENSOR_SET, {"names 'a' twice"}}, path_);
  expect(
      header_failure(
          "{" + a + ", " + R"("b": {"dtype": "F16", "shape": [4], "data_offsets": [4, 12]}})", 12),
      {PHOTON_ERR_CORRUPT, {"tensor 'b' overlaps tensor 'a'"}}, path_);
  expect(header_failure(
             "{" + a + ", " + R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8),
         {PHOTON_ERR_CORRUPT, {"overlaps tensor 'a'"}}, path_);
  expect(
      header_failure(
          "{" + a + ", " + R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})", 16),
      {PHOTON_ERR_CORRUPT, {"data bytes 8..12 belong to no tensor"}}, path_);
  expect(header_failure("{" + a + "}", 10),
         {PHOTON_ERR_CORRUPT, {"data bytes 8..10 belong to no tensor"}}, path_);
  expect(header_failure(R"({"__metadata__": [1]})", 0),
         {PHOTON_ERR_CORRUPT, {"__metadata__ is not a JSON object"}}, path_);
  expect(header_failure(R"({"__metadata__": {"k": 1}})", 0),
         {PHOTON_ERR_CORRUPT, {"__metadata__ entry 'k' is not a string"}}, path_);
  expect(header_failure(R"({"__metadata__": {"k": "1"}, "__metadata__": {}})", 0),
         {PHOTON_ERR_TENSOR_SET, {"'__metadata__' twice"}}, path_);
}

}  // namespace
}  // namespace photon
