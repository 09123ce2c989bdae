// photon_model_tokenizer_model: the tokenizer a model file embeds, as photon_write_options
// takes it back.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "photon.h"
#include "test_models.h"
#include "tokenizer/tokenizer.h"

namespace {

using photon::ModelConfig;

TEST(TokenizerModel, IsTheEmbeddedOneAndFollowsTheBufferProtocol) {
  const std::string path = photon::testing::scratch_model_path("test_tokenizer_model");
  const ModelConfig config = photon::testing::tiny_photon(2);
  photon::testing::write_test_model(config, path, 3);
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK) << photon_last_error();
  const std::string expected = photon::pad_tokenizer_model(
      photon::testing::read_binary(PHOTON_SOURCE_DIR "/tests/data/tiny.model"), config.vocab_size,
      "tiny.model");
  size_t size = 0;
  EXPECT_EQ(photon_model_tokenizer_model(model, nullptr, 0, &size), PHOTON_ERR_BUFFER_TOO_SMALL);
  ASSERT_EQ(size, expected.size());
  std::string bytes(size - 1, '\0');
  EXPECT_EQ(photon_model_tokenizer_model(model, bytes.data(), bytes.size(), &size),
            PHOTON_ERR_BUFFER_TOO_SMALL);
  bytes.resize(size + 3, 'x');
  ASSERT_EQ(photon_model_tokenizer_model(model, bytes.data(), bytes.size(), &size), PHOTON_OK);
  EXPECT_EQ(size, expected.size());
  EXPECT_EQ(bytes.substr(0, size), expected);
  EXPECT_EQ(photon_model_tokenizer_model(nullptr, bytes.data(), bytes.size(), &size),
            PHOTON_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(photon_model_tokenizer_model(model, bytes.data(), bytes.size(), nullptr),
            PHOTON_ERR_INVALID_ARGUMENT);
  photon_model_free(model);
  std::remove(path.c_str());
}

}  // namespace
