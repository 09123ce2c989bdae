// The configuration: the paper's presets have exactly the spec's parameter counts (spec section 9),
// JSON round-trips, and invalid configurations are refused naming the field.
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/error.h"

namespace {

using photon::ModelConfig;

TEST(Config, PresetParameterCountsMatchTheSpec) {
  const std::pair<const char*, uint64_t> expected[] = {
      {"photon-600m", 646400768ull},  {"photon-900m", 907164160ull},
      {"photon-1.2b", 1229533440ull}, {"block-600m", 629772416ull},
      {"block-900m", 887880448ull},   {"block-1.2b", 1207397760ull},
      {"vanilla-600m", 610915968ull}, {"vanilla-900m", 867114752ull},
      {"vanilla-1.2b", 1184657280ull}};
  for (const auto& [name, count] : expected) {
    ModelConfig c;
    ASSERT_TRUE(photon::find_preset(name, &c)) << name;
    EXPECT_EQ(photon::parameter_count(c), count) << name;
  }
}

TEST(Config, JsonRoundTripsEveryPreset) {
  for (const std::string& name : photon::preset_names()) {
    ModelConfig c;
    ASSERT_TRUE(photon::find_preset(name, &c));
    EXPECT_EQ(photon::config_from_json(photon::config_to_json(c), name), c) << name;
  }
}

TEST(Config, ParsesTheSpecExample) {
  const char* json = R"({"arch": "photon", "vocab_size": 32000, "embed_dim": 416, "token_dim": 1664,
 "norm_eps": 1e-5, "rope_theta": 10000.0, "max_seq_len": 4096,
 "levels": [
  {"chunk_len": 4, "chunker": "concat", "dim": 1664, "prefix_len": 2,
   "encoder": {"layers": 4, "heads": 32, "kv_heads": 32, "head_dim": 52, "ffn_dim": 4096},
   "decoder": {"layers": 4, "heads": 32, "kv_heads": 32, "head_dim": 52, "ffn_dim": 4096}},
  {"chunk_len": 4, "chunker": "linear", "dim": 1664, "prefix_len": 2,
   "encoder": {"layers": 4, "heads": 32, "kv_heads": 32, "head_dim": 52, "ffn_dim": 4096},
   "decoder": {"layers": 4, "heads": 32, "kv_heads": 32, "head_dim": 52, "ffn_dim": 4096}}]})";
  ModelConfig preset;
  ASSERT_TRUE(photon::find_preset("photon-600m", &preset));
  EXPECT_EQ(photon::config_from_json(json, "spec"), preset);
}

void expect_refused(const std::string& json, const std::string& mentions) {
  try {
    photon::config_from_json(json, "c.json");
    ADD_FAILURE() << "accepted: " << json;
  } catch (const photon::Error& e) {
    EXPECT_EQ(e.status(), PHOTON_ERR_BAD_CONFIG);
    EXPECT_NE(std::string(e.what()).find(mentions), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c.json"), std::string::npos) << e.what();
  }
}

TEST(Config, RefusesInvalidConfigurationsNamingTheField) {
  const std::string stack =
      R"({"layers": 1, "heads": 2, "kv_heads": 2, "head_dim": 4, "ffn_dim": 8})";
  auto photon1 = [&](const std::string& level) {
    return R"({"arch": "photon", "vocab_size": 10, "embed_dim": 4, "token_dim": 8, )"
           R"("max_seq_len": 16, "levels": [)" +
           level + "]}";
  };
  expect_refused("not json", "not valid JSON");
  expect_refused(R"({"arch": "rnn"})", "arch");
  expect_refused(
      photon1(R"({"chunk_len": 2, "chunker": "concat", "dim": 7, "prefix_len": 1, "encoder": )" +
              stack + R"(, "decoder": )" + stack + "}"),
      "concat chunker needs dim");
  expect_refused(
      photon1(R"({"chunk_len": 1, "chunker": "linear", "dim": 8, "prefix_len": 1, "encoder": )" +
              stack + R"(, "decoder": )" + stack + "}"),
      "levels[0].chunk_len");
  expect_refused(
      photon1(
          R"({"chunk_len": 2, "chunker": "linear", "dim": 8, "prefix_len": 1, "encoder": )"
          R"({"layers": 1, "heads": 3, "kv_heads": 2, "head_dim": 4, "ffn_dim": 8}, "decoder": )" +
          stack + "}"),
      "levels[0].encoder.kv_heads");
  expect_refused(
      photon1(
          R"({"chunk_len": 2, "chunker": "linear", "dim": 8, "prefix_len": 1, "encoder": )"
          R"({"layers": 1, "heads": 2, "kv_heads": 2, "head_dim": 3, "ffn_dim": 8}, "decoder": )" +
          stack + "}"),
      "head_dim");
  expect_refused(
      R"({"arch": "vanilla", "vocab_size": 10, "dim": 8, "layers": 1, "heads": 2, "kv_heads": 2, )"
      R"("head_dim": 4, "ffn_dim": 8, "max_seq_len": -3})",
      "max_seq_len");
}

}  // namespace
