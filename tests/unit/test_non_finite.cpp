// Non-finite weights in a file made by other means than the SDK's writers (which refuse them:
// test_model_file_writer.cpp): the load option that reads every weight names the first one, and
// without it the engine reports the non-finite logits they cause as an error, never as a token.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "photon.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::ModelConfig;

// Where tensor `name` of the model file at `path` starts, and its type.
void find_tensor(const std::string& path, const std::string& name, uint64_t* offset,
                 photon_dtype* dtype) {
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
  bool found = false;
  for (size_t i = 0; i < photon_model_tensor_count(model) && !found; ++i) {
    const char* tensor = nullptr;
    ASSERT_EQ(photon_model_tensor_info(model, i, &tensor, dtype, nullptr, nullptr, offset, nullptr),
              PHOTON_OK);
    found = name == tensor;
  }
  photon_model_free(model);
  ASSERT_TRUE(found) << name;
}

// Overwrites element `element` of tensor `name` of the model file at `path` with `value`, in the
// tensor's stored type (f32, f16 or bf16).
void patch(const std::string& path, const std::string& name, uint64_t element, float value) {
  uint64_t offset = 0;
  photon_dtype dtype = PHOTON_DTYPE_F32;
  find_tensor(path, name, &offset, &dtype);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  if (dtype == PHOTON_DTYPE_F32) {
    file.seekp(static_cast<std::streamoff>(offset + 4 * element));
    file.write(reinterpret_cast<const char*>(&value), 4);
  } else {
    uint16_t stored = 0;
    photon::convert_from_f32(static_cast<photon::DType>(dtype), &value, &stored, 1);
    file.seekp(static_cast<std::streamoff>(offset + 2 * element));
    file.write(reinterpret_cast<const char*>(&stored), 2);
  }
  ASSERT_TRUE(file.good());
}

photon_status load(const std::string& path, bool verify, photon_model** model) {
  photon_load_options* options = nullptr;
  EXPECT_EQ(photon_load_options_create(&options), PHOTON_OK);
  EXPECT_EQ(photon_load_options_set_verify(options, verify ? 1 : 0), PHOTON_OK);
  const photon_status status = photon_model_load(path.c_str(), options, model);
  photon_load_options_free(options);
  return status;
}

class NonFinite : public ::testing::TestWithParam<int> {
 protected:
  // Param: 0 vanilla, else the number of PHOTON levels.
  void SetUp() override {
    const int levels = GetParam();
    config_ = levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels);
    path_ = photon::testing::scratch_model_path("test_non_finite_" + std::to_string(levels));
  }
  void TearDown() override { std::remove(path_.c_str()); }

  void write(photon::DType dtype = photon::DType::F32) {
    photon::testing::write_test_model(config_, path_, 5, dtype);
  }

  ModelConfig config_;
  std::string path_;
};

TEST_P(NonFinite, VerifyNamesTheTensorAndTheElement) {
  for (const photon::DType dtype : {photon::DType::F32, photon::DType::F16, photon::DType::BF16}) {
    write(dtype);
    photon_model* model = nullptr;
    ASSERT_EQ(load(path_, true, &model), PHOTON_OK) << photon_last_error();
    photon_model_free(model);

    const int64_t cols = config_.arch == photon::Arch::Vanilla ? config_.dim : config_.token_dim;
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      write(dtype);
      patch(path_, "lm_head", static_cast<uint64_t>(2 * cols + 3), bad);
      ASSERT_EQ(load(path_, false, &model), PHOTON_OK) << photon_last_error();
      photon_model_free(model);
      EXPECT_EQ(load(path_, true, &model), PHOTON_ERR_NOT_FINITE);
      const std::string message = photon_last_error();
      EXPECT_NE(message.find(path_ + ": tensor 'lm_head' holds " +
                             std::string(std::isnan(bad) ? "nan"
                                         : bad > 0       ? "inf"
                                                         : "-inf") +
                             " at [2, 3] (element " + std::to_string(2 * cols + 3) + ")"),
                std::string::npos)
          << message;
    }
  }
}

// The scale of a q8 block that no writer makes (its largest value / 127 is finite): the check
// names the tensor, the block and where it starts; without it, scoring reports the non-finite
// logits.
TEST_P(NonFinite, VerifyNamesAQ8BlockWithANonFiniteScale) {
  // A matrix of 32 columns, stored in q8: vanilla's width; a PHOTON model's level-1 width.
  const std::string tensor =
      config_.arch == photon::Arch::Vanilla ? "lm_head" : "enc.1.layers.0.attn.wq";
  const std::pair<uint16_t, const char*> scales[] = {
      {0x7f80, "inf"}, {0xff80, "-inf"}, {0x7fc0, "nan"}};
  for (const auto& [bits, name] : scales) {
    write(photon::DType::Q8);
    uint64_t offset = 0;
    photon_dtype dtype = PHOTON_DTYPE_F32;
    find_tensor(path_, tensor, &offset, &dtype);
    ASSERT_EQ(dtype, PHOTON_DTYPE_Q8);
    {
      std::fstream file(path_, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(static_cast<std::streamoff>(offset + 5 * 34));  // block 5's scale
      file.write(reinterpret_cast<const char*>(&bits), 2);
      ASSERT_TRUE(file.good());
    }
    photon_model* model = nullptr;
    EXPECT_EQ(load(path_, true, &model), PHOTON_ERR_NOT_FINITE);
    const std::string message = photon_last_error();
    EXPECT_NE(message.find(path_ + ": tensor '" + tensor + "' holds a q8 scale of " + name +
                           " in block 5 (elements 160 to 191, from [5, 0])"),
              std::string::npos)
        << message;
    ASSERT_EQ(load(path_, false, &model), PHOTON_OK) << photon_last_error();
    const std::vector<int32_t> tokens{1, 17, 42, 99, 7, 300, 12, 5, 8};
    std::vector<float> logprobs(tokens.size());
    EXPECT_EQ(photon_model_score(model, tokens.data(), tokens.size(), logprobs.data()),
              PHOTON_ERR_NOT_FINITE)
        << name;
    photon_model_free(model);
  }
}

TEST_P(NonFinite, VerifyFindsDataChangedAfterWriting) {
  write();
  patch(path_, "lm_head", 0, 0.125f);
  photon_model* model = nullptr;
  EXPECT_EQ(load(path_, true, &model), PHOTON_ERR_CORRUPT);
  const std::string message = photon_last_error();
  EXPECT_NE(message.find("the weights changed after the file was written"), std::string::npos)
      << message;
  EXPECT_EQ(photon_load_options_set_verify(nullptr, 1), PHOTON_ERR_INVALID_ARGUMENT);
}

// A NaN anywhere upstream of the logits: the engine fails the call with a message, delivering no
// token, in every mode and through every way of decoding; scoring fails alike.
TEST_P(NonFinite, NonFiniteLogitsAreAnErrorNotAToken) {
  write();
  const std::string tensor =
      config_.arch == photon::Arch::Vanilla ? "layers.1.ffn.w_down" : "enc.1.layers.0.attn.wv";
  patch(path_, tensor, 1, NAN);
  photon_model* model = nullptr;
  ASSERT_EQ(load(path_, false, &model), PHOTON_OK) << photon_last_error();
  std::vector<photon_mode> modes{PHOTON_MODE_HIERGEN};
  if (GetParam() >= 2) modes.push_back(PHOTON_MODE_RECGEN);
  const std::vector<int32_t> prompt{1, 17, 42, 99, 7, 300, 12, 5, 8};
  for (const photon_mode mode : modes) {
    photon_session_options* options = nullptr;
    ASSERT_EQ(photon_session_options_create(&options), PHOTON_OK);
    photon_session_options_set_mode(options, mode);
    photon_session_options_set_ignore_eos(options, 1);
    photon_session* session = nullptr;
    ASSERT_EQ(photon_session_create(model, options, &session), PHOTON_OK) << photon_last_error();
    ASSERT_EQ(photon_session_prefill(session, prompt.data(), prompt.size()), PHOTON_OK);
    photon::testing::Generated generated;
    EXPECT_EQ(photon_session_generate(session, 8, &photon::testing::collect, &generated, nullptr),
              PHOTON_ERR_NOT_FINITE)
        << mode;
    const std::string message = photon_last_error();
    EXPECT_NE(message.find("not finite"), std::string::npos) << message;
    EXPECT_TRUE(generated.tokens.empty());
    photon_session_free(session);

    ASSERT_EQ(photon_session_create(model, options, &session), PHOTON_OK) << photon_last_error();
    ASSERT_EQ(photon_session_prefill(session, prompt.data(), prompt.size()), PHOTON_OK);
    int32_t token = 0;
    size_t piece_len = 0;
    EXPECT_EQ(photon_session_next_token(session, &token, nullptr, 0, &piece_len, nullptr),
              PHOTON_ERR_NOT_FINITE);
    photon_session_free(session);
    photon_session_options_free(options);
  }
  std::vector<float> logprobs(prompt.size());
  EXPECT_EQ(photon_model_score(model, prompt.data(), prompt.size(), logprobs.data()),
            PHOTON_ERR_NOT_FINITE);
  const std::string message = photon_last_error();
  EXPECT_NE(message.find("photon_model_score: the log-probability of token "), std::string::npos)
      << message;
  EXPECT_NE(message.find("the model's logits are not finite"), std::string::npos) << message;
  photon_model_free(model);
}

INSTANTIATE_TEST_SUITE_P(Models, NonFinite, ::testing::Values(0, 1, 2), [](const auto& param_info) {
  return param_info.param == 0 ? std::string("Vanilla")
                               : "Photon" + std::to_string(param_info.param);
});

}  // namespace
