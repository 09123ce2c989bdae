// The saved states of tests/states/saved/: a session of every mode (HierGen of 1, 2 and 3 levels,
// RecGen of 2 and 3, vanilla) and KV cache type (f32: format version 1; bf16 and f16: version 2),
// saved by the library of the release that wrote those versions, and what each session does after
// it is restored (saved/expected.json). photon_make_states writes both; test_saved_states.cpp
// restores every state with this build and checks that it continues as recorded. When the
// arithmetic changes on purpose (every CPU product through the skinny kernels changed the bits of
// prefill's log-probabilities), expected.json is recorded again by the last library that writes
// format version 2, restoring the committed states.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "photon.h"
#include "test_models.h"

namespace photon::saved_states {

struct Kind {
  const char* name;
  int levels;  // 0: vanilla
  photon_mode mode;
};
constexpr Kind kKinds[] = {
    {"hiergen_l1", 1, PHOTON_MODE_HIERGEN}, {"hiergen_l2", 2, PHOTON_MODE_HIERGEN},
    {"hiergen_l3", 3, PHOTON_MODE_HIERGEN}, {"recgen_l2", 2, PHOTON_MODE_RECGEN},
    {"recgen_l3", 3, PHOTON_MODE_RECGEN},   {"vanilla", 0, PHOTON_MODE_AUTO}};

// The KV cache type, and where the session was saved: tiny_photon(2) has B_1 = 2, B_2 = 6 and
// tiny_photon(3) B_3 = 12, so 15 tokens leave every level mid-unit past a complete top unit; 9
// prompt tokens and none generated leave RecGen before its first generated token; 17 tokens
// with a repetition penalty make RecGen sample one lane at a time.
struct Variant {
  const char* name;
  photon_dtype kv_type;
  uint32_t format_version;
  int prompt;
  int generate;
  bool penalty;
};
constexpr Variant kVariants[] = {{"f32", PHOTON_DTYPE_F32, 1, 9, 6, false},
                                 {"bf16", PHOTON_DTYPE_BF16, 2, 9, 0, false},
                                 {"f16", PHOTON_DTYPE_F16, 2, 12, 5, true}};

inline std::string state_name(const Kind& k, const Variant& v) {
  return std::string(k.name) + "_" + v.name;
}

inline void check(photon_status status, const std::string& what) {
  if (status != PHOTON_OK)
    throw std::runtime_error(what + ": " + photon_status_name(status) + ": " + photon_last_error());
}

// The model of `levels` (deterministic: the states record its fingerprint).
inline void write_model(int levels, const std::string& path) {
  photon::testing::write_test_model(
      levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels), path,
      700 + static_cast<uint64_t>(levels));
}

inline std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(i == 0 ? 1 : 3 + (i * 89 + 17) % 500);
  return p;
}

// The session that was saved: created, prefilled and generated from.
inline photon_session* saved_session(photon_model* model, const Kind& k, const Variant& v) {
  photon_session_options* o = nullptr;
  check(photon_session_options_create(&o), "options");
  check(photon_session_options_set_mode(o, k.mode), "mode");
  check(photon_session_options_set_kv_type(o, v.kv_type), "kv type");
  check(photon_session_options_set_temperature(o, 0.8f), "temperature");
  check(photon_session_options_set_top_k(o, 40), "top_k");
  check(photon_session_options_set_top_p(o, 0.95f), "top_p");
  check(photon_session_options_set_seed(o, 11), "seed");
  check(photon_session_options_set_ignore_eos(o, 1), "ignore_eos");
  check(photon_session_options_add_stop_string(o, "\x01 never"), "stop string");
  if (v.penalty) check(photon_session_options_set_repetition_penalty(o, 1.3f, 16), "penalty");
  photon_session* s = nullptr;
  const photon_status created = photon_session_create(model, o, &s);
  photon_session_options_free(o);
  check(created, "create");
  const std::vector<int32_t> p = prompt(v.prompt);
  check(photon_session_prefill(s, p.data(), p.size()), "prefill");
  check(photon_session_generate(s, v.generate, nullptr, nullptr, nullptr), "generate");
  return s;
}

// What a restored session does: it generates, takes known tokens (with their log-probabilities),
// and generates again.
struct Continuation {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<float> known_logprobs;
  std::vector<int32_t> then_tokens;
  std::vector<float> then_logprobs;
};

inline const std::vector<int32_t>& known_tokens() {
  static const std::vector<int32_t> known = {5, 77, 200};
  return known;
}

inline int append_token(void* user, int32_t token, const char*, size_t, float logprob) {
  auto* out = static_cast<std::pair<std::vector<int32_t>*, std::vector<float>*>*>(user);
  out->first->push_back(token);
  out->second->push_back(logprob);
  return 0;
}

inline Continuation continue_session(photon_session* s) {
  Continuation c;
  std::pair<std::vector<int32_t>*, std::vector<float>*> first{&c.tokens, &c.logprobs};
  check(photon_session_generate(s, 20, append_token, &first, nullptr), "generate");
  c.known_logprobs.resize(known_tokens().size());
  check(photon_session_prefill_logprobs(s, known_tokens().data(), known_tokens().size(),
                                        c.known_logprobs.data()),
        "prefill_logprobs");
  std::pair<std::vector<int32_t>*, std::vector<float>*> then{&c.then_tokens, &c.then_logprobs};
  check(photon_session_generate(s, 10, append_token, &then, nullptr), "generate");
  return c;
}

// Floats go through JSON as doubles, which hold every float exactly.
inline nlohmann::json to_json(const Continuation& c) {
  return {{"tokens", c.tokens},
          {"logprobs", c.logprobs},
          {"known_logprobs", c.known_logprobs},
          {"then_tokens", c.then_tokens},
          {"then_logprobs", c.then_logprobs}};
}

inline Continuation from_json(const nlohmann::json& j) {
  Continuation c;
  c.tokens = j.at("tokens").get<std::vector<int32_t>>();
  c.logprobs = j.at("logprobs").get<std::vector<float>>();
  c.known_logprobs = j.at("known_logprobs").get<std::vector<float>>();
  c.then_tokens = j.at("then_tokens").get<std::vector<int32_t>>();
  c.then_logprobs = j.at("then_logprobs").get<std::vector<float>>();
  return c;
}

}  // namespace photon::saved_states
