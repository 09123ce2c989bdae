// The saved session, field by field (photon.h, photon_session_save: "a restored session continues
// exactly as this one would have, in any process"). kRows lists every field of
// schemas/session.fbs with a scenario in which that field decides what happens next; a field added
// to the schema without a row fails EveryFieldOfTheStateHasARow.
//
// For each scenario an uninterrupted run (state_runs.h: generate calls until a token budget, each
// stop ending a call) is the reference. A second session of the same settings advances one token
// at a time and is saved at every position; each state is restored in this process and, written to
// a file, in another one (photon_continue_states), and must run exactly the rest of the reference:
// the same tokens, pieces and log-probabilities, and every call stopping where and why the
// reference's did. Each row is checked to be exercised: some saved state holds the field away from
// what a default session saves, and for a setting, the run with that setting at its default differs
// from the scenario's (so that a state that dropped it could not continue the same).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "photon.h"
#include "schema_fields.h"
#include "session_generated.h"
#include "state_runs.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

namespace sr = photon::state_runs;
namespace fb = photon::fb;

const char* const kPrompt = "In the beginning God created";
constexpr int32_t kBudget = 40;  // tokens of each run
constexpr uint64_t kSeeds = 64;  // samplers searched for a run that has what a scenario needs

// A session's settings, and the run they make.
struct Scenario {
  std::string name;
  int levels = 2;  // 0: vanilla
  photon_mode mode = PHOTON_MODE_HIERGEN;
  photon_dtype kv_type = PHOTON_DTYPE_F32;
  float temperature = 0.9f;
  int32_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f, penalty = 1.0f;
  int32_t last_n = 64;
  float presence = 0.0f, frequency = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;
  int32_t top_logprobs = 0;
  uint64_t seed = 1;
  bool ignore_eos = true;
  std::vector<std::string> stops;
  int32_t context = 0;
};

// A scenario of the defaults above, as `set` changes them.
template <typename Set>
Scenario scenario(Set set) {
  Scenario c;
  set(c);
  return c;
}

// What a scenario saved at each position (the first state before any token is generated), and its
// reference run.
struct Saved {
  sr::Continuation reference;
  std::vector<std::vector<uint8_t>> states;
};

const fb::SessionState& root(const std::vector<uint8_t>& state) {
  return *fb::GetSizePrefixedSessionState(state.data());
}

// The state's windows, levels and caches, wherever its mode keeps them.
std::vector<const fb::WindowState*> windows(const fb::SessionState& s) {
  std::vector<const fb::WindowState*> out;
  if (const auto* h = s.mode_as_HierGenState(); h && h->levels())
    for (const auto* l : *h->levels())
      if (l->window()) out.push_back(l->window());
  if (const auto* r = s.mode_as_RecGenState(); r && r->group())
    for (const auto* w : *r->group()) out.push_back(w);
  return out;
}
std::vector<const fb::LevelState*> levels(const fb::SessionState& s) {
  std::vector<const fb::LevelState*> out;
  if (const auto* h = s.mode_as_HierGenState(); h && h->levels())
    for (const auto* l : *h->levels()) out.push_back(l);
  return out;
}
std::vector<const fb::Cache*> caches(const fb::SessionState& s) {
  std::vector<const fb::Cache*> out;
  for (const auto* w : windows(s))
    if (w->cache()) out.push_back(w->cache());
  for (const auto* l : levels(s))
    if (l->encoder()) out.push_back(l->encoder());
  if (const auto* r = s.mode_as_RecGenState(); r && r->top()) out.push_back(r->top());
  if (const auto* v = s.mode_as_VanillaState(); v && v->cache()) out.push_back(v->cache());
  return out;
}

template <typename T, typename Pred>
bool any_of(const std::vector<T>& items, Pred pred) {
  for (const T& item : items)
    if (pred(item)) return true;
  return false;
}
template <typename V>
size_t size_of(const V* v) {
  return v ? v->size() : 0;
}
template <typename V>
bool any_nonzero(const V* v) {
  if (v)
    for (auto x : *v)
      if (x != 0) return true;
  return false;
}

using Exercised = std::function<bool(const fb::SessionState& state, const fb::SessionState& base)>;

// A field of the schema, the scenario that exercises it, when a saved state shows it exercised
// (`base`: the state of a session of default settings after the same prompt), and for a setting,
// how to put it back to its default.
struct Row {
  const char* field;
  const char* scenario;
  Exercised exercised;
  std::function<void(Scenario&)> reset = {};
};

const fb::Sampler& sampler(const fb::SessionState& s) {
  return *s.sampler();
}

const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
      // The session's identity: a state of another model is refused (IdentityTiesAStateToItsModel;
      // each field damaged alone: Damaged.SessionStatesFailWithTheirOwnErrors).
      {"SessionState.format_version", "hiergen",
       [](auto& s, auto&) { return s.format_version() > 0; }},
      {"SessionState.model_hash", "hiergen", [](auto& s, auto&) { return s.model_hash() != 0; }},
      {"SessionState.config_json", "hiergen",
       [](auto& s, auto&) { return size_of(s.config_json()) > 0; }},
      {"SessionState.tokenizer_hash", "hiergen",
       [](auto& s, auto&) { return s.tokenizer_hash() != 0; }},
      // The history and what was delivered of it.
      {"SessionState.tokens", "hiergen",
       [](auto& s, auto& b) { return size_of(s.tokens()) > size_of(b.tokens()); }},
      {"SessionState.context_length", "context",
       [](auto& s, auto& b) { return s.context_length() != b.context_length(); },
       [](Scenario& c) { c.context = 0; }},
      {"SessionState.utf8_pending", "utf8",
       [](auto& s, auto&) { return size_of(s.utf8_pending()) > 0; }},
      {"SessionState.recent_text", "stops",
       [](auto& s, auto&) { return size_of(s.recent_text()) > 0; }},
      {"SessionState.kv_type", "recgen",
       [](auto& s, auto& b) { return s.kv_type() != b.kv_type(); },
       [](Scenario& c) { c.kv_type = PHOTON_DTYPE_F32; }},
      {"SessionState.mode", "recgen",
       [](auto& s, auto& b) { return s.mode_type() != b.mode_type(); },
       [](Scenario& c) { c.mode = PHOTON_MODE_HIERGEN; }},
      {"SessionState.sampler", "hiergen", [](auto& s, auto&) { return s.sampler() != nullptr; }},
      // The sampler.
      {"Sampler.temperature", "hiergen",
       [](auto& s, auto& b) { return sampler(s).temperature() != sampler(b).temperature(); },
       [](Scenario& c) { c.temperature = 0.0f; }},
      {"Sampler.top_k", "top-k",
       [](auto& s, auto& b) { return sampler(s).top_k() != sampler(b).top_k(); },
       [](Scenario& c) { c.top_k = 0; }},
      {"Sampler.top_p", "top-p",
       [](auto& s, auto& b) { return sampler(s).top_p() != sampler(b).top_p(); },
       [](Scenario& c) { c.top_p = 1.0f; }},
      {"Sampler.min_p", "min-p",
       [](auto& s, auto& b) { return sampler(s).min_p() != sampler(b).min_p(); },
       [](Scenario& c) { c.min_p = 0.0f; }},
      {"Sampler.repetition_penalty", "hiergen",
       [](auto& s, auto& b) {
         return sampler(s).repetition_penalty() != sampler(b).repetition_penalty();
       },
       [](Scenario& c) { c.penalty = 1.0f; }},
      {"Sampler.repetition_last_n", "hiergen",
       [](auto& s, auto& b) {
         return sampler(s).repetition_last_n() != sampler(b).repetition_last_n();
       },
       [](Scenario& c) { c.last_n = 64; }},
      {"Sampler.seed", "hiergen",
       [](auto& s, auto& b) { return sampler(s).seed() != sampler(b).seed(); },
       [](Scenario& c) { c.seed = 0; }},
      {"Sampler.ignore_eos", "eos-ignored",
       [](auto& s, auto& b) { return sampler(s).ignore_eos() != sampler(b).ignore_eos(); },
       [](Scenario& c) { c.ignore_eos = false; }},
      {"Sampler.stop_strings", "stops",
       [](auto& s, auto&) { return size_of(sampler(s).stop_strings()) > 0; },
       [](Scenario& c) { c.stops.clear(); }},
      {"Sampler.presence_penalty", "penalties",
       [](auto& s, auto& b) {
         return sampler(s).presence_penalty() != sampler(b).presence_penalty();
       },
       [](Scenario& c) { c.presence = 0.0f; }},
      {"Sampler.frequency_penalty", "penalties",
       [](auto& s, auto& b) {
         return sampler(s).frequency_penalty() != sampler(b).frequency_penalty();
       },
       [](Scenario& c) { c.frequency = 0.0f; }},
      {"Sampler.logit_bias_tokens", "logit-bias",
       [](auto& s, auto&) { return size_of(sampler(s).logit_bias_tokens()) > 0; },
       [](Scenario& c) { c.logit_bias.clear(); }},
      {"Sampler.top_logprobs", "alternatives",
       [](auto& s, auto& b) { return sampler(s).top_logprobs() != sampler(b).top_logprobs(); },
       [](Scenario& c) { c.top_logprobs = 0; }},
      {"Sampler.logit_bias_values", "logit-bias",
       [](auto& s, auto&) { return any_nonzero(sampler(s).logit_bias_values()); },
       [](Scenario& c) {
         for (auto& entry : c.logit_bias) entry.second = 0.0f;
       }},
      // The caches, every mode's.
      {"Cache.layers", "hiergen",
       [](auto& s, auto&) { return any_of(caches(s), [](auto* c) { return c->layers() > 0; }); }},
      {"Cache.kv_dim", "hiergen",
       [](auto& s, auto&) { return any_of(caches(s), [](auto* c) { return c->kv_dim() > 0; }); }},
      {"Cache.capacity", "hiergen",
       [](auto& s, auto&) { return any_of(caches(s), [](auto* c) { return c->capacity() > 0; }); }},
      {"Cache.len", "hiergen",
       [](auto& s, auto&) { return any_of(caches(s), [](auto* c) { return c->len() > 0; }); }},
      {"Cache.k", "hiergen",
       [](auto& s, auto&) {
         return any_of(caches(s), [](auto* c) { return any_nonzero(c->k()); });
       }},
      {"Cache.v", "hiergen",
       [](auto& s, auto&) {
         return any_of(caches(s), [](auto* c) { return any_nonzero(c->v()); });
       }},
      {"Cache.k16", "recgen",
       [](auto& s, auto&) {
         return any_of(caches(s), [](auto* c) { return any_nonzero(c->k16()); });
       }},
      {"Cache.v16", "vanilla",
       [](auto& s, auto&) {
         return any_of(caches(s), [](auto* c) { return any_nonzero(c->v16()); });
       }},
      // HierGen: every level's encoder and open window.
      {"HierGenState.consumed", "hiergen",
       [](auto& s, auto&) {
         return s.mode_as_HierGenState() && s.mode_as_HierGenState()->consumed() > 0;
       }},
      {"HierGenState.levels", "hiergen", [](auto& s, auto&) { return !levels(s).empty(); }},
      {"HierGenState.top_last", "hiergen",
       [](auto& s, auto&) {
         return s.mode_as_HierGenState() && any_nonzero(s.mode_as_HierGenState()->top_last());
       }},
      {"LevelState.encoder", "hiergen",
       [](auto& s, auto&) {
         return any_of(levels(s), [](auto* l) { return l->encoder() && l->encoder()->len() > 0; });
       }},
      {"LevelState.pending", "hiergen",
       [](auto& s, auto&) {
         return any_of(levels(s), [](auto* l) { return any_nonzero(l->pending()); });
       }},
      {"LevelState.n_pending", "hiergen",
       [](auto& s, auto&) {
         return any_of(levels(s), [](auto* l) { return l->n_pending() > 0; });
       }},
      {"LevelState.window", "hiergen",
       [](auto& s, auto&) {
         return any_of(levels(s), [](auto* l) { return l->window() != nullptr; });
       }},
      {"WindowState.cache", "hiergen",
       [](auto& s, auto&) {
         return any_of(windows(s), [](auto* w) { return w->cache() && w->cache()->len() > 0; });
       }},
      {"WindowState.outputs", "hiergen",
       [](auto& s, auto&) {
         return any_of(windows(s), [](auto* w) { return any_nonzero(w->outputs()); });
       }},
      {"WindowState.n_outputs", "hiergen",
       [](auto& s, auto&) {
         return any_of(windows(s), [](auto* w) { return w->n_outputs() > 0; });
       }},
      {"WindowState.consumed", "hiergen",
       [](auto& s, auto&) {
         return any_of(windows(s), [](auto* w) { return w->consumed() > 0; });
       }},
      // RecGen: the top level's cache, the plans and the open group of windows.
      {"RecGenState.top", "recgen",
       [](auto& s, auto&) {
         return s.mode_as_RecGenState() && s.mode_as_RecGenState()->top() &&
                s.mode_as_RecGenState()->top()->len() > 0;
       }},
      {"RecGenState.top_last", "recgen",
       [](auto& s, auto&) {
         return s.mode_as_RecGenState() && any_nonzero(s.mode_as_RecGenState()->top_last());
       }},
      {"RecGenState.plans", "recgen",
       [](auto& s, auto&) {
         const auto* r = s.mode_as_RecGenState();
         if (r && r->plans())
           for (const auto* p : *r->plans())
             if (any_nonzero(p->values())) return true;
         return false;
       }},
      {"Plan.values", "recgen",
       [](auto& s, auto&) {
         const auto* r = s.mode_as_RecGenState();
         return r && size_of(r->plans()) > 0 && any_nonzero(r->plans()->Get(0)->values());
       }},
      {"RecGenState.group", "recgen",
       [](auto& s, auto&) { return s.mode_as_RecGenState() && !windows(s).empty(); }},
      {"RecGenState.group_start", "recgen",
       [](auto& s, auto&) {
         return s.mode_as_RecGenState() && s.mode_as_RecGenState()->group_start() > 0;
       }},
      // Both values of `generated` are seen: RecGenState.generated rows the scenario with it false
      // (right after the prompt) and true.
      {"RecGenState.generated", "recgen",
       [](auto& s, auto&) {
         return s.mode_as_RecGenState() && s.mode_as_RecGenState()->generated();
       }},
      {"VanillaState.cache", "vanilla",
       [](auto& s, auto&) {
         return s.mode_as_VanillaState() && s.mode_as_VanillaState()->cache() &&
                s.mode_as_VanillaState()->cache()->len() > 0;
       }},
      {"VanillaState.hidden", "vanilla",
       [](auto& s, auto&) {
         return s.mode_as_VanillaState() && any_nonzero(s.mode_as_VanillaState()->hidden());
       }},
  };
  return kRows;
}

class StateFields : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int levels = 0; levels <= 3; ++levels) {
      paths_[levels] =
          photon::testing::scratch_model_path("state_fields_" + std::to_string(levels));
      photon::testing::write_test_model(
          levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels),
          paths_[levels], 900 + static_cast<uint64_t>(levels));
      ASSERT_EQ(photon_model_load(paths_[levels].c_str(), nullptr, &models_[levels]), PHOTON_OK)
          << photon_last_error();
    }
  }
  static void TearDownTestSuite() {
    for (int levels = 0; levels <= 3; ++levels) {
      photon_model_free(models_[levels]);
      models_[levels] = nullptr;
      std::remove(paths_[levels].c_str());
    }
    saved_.clear();
    scenarios_.clear();
  }

  static std::vector<int32_t> prompt(photon_model* model) {
    std::vector<int32_t> ids(256);
    size_t n = 0;
    EXPECT_EQ(
        photon_model_tokenize(model, kPrompt, std::strlen(kPrompt), 1, ids.data(), ids.size(), &n),
        PHOTON_OK);
    ids.resize(n);
    return ids;
  }

  // A session of c's settings after the prompt (owned by the caller).
  static photon_session* prompted(const Scenario& c) {
    photon_session_options* o = nullptr;
    EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
    photon_session_options_set_mode(o, c.mode);
    photon_session_options_set_kv_type(o, c.kv_type);
    photon_session_options_set_temperature(o, c.temperature);
    photon_session_options_set_top_k(o, c.top_k);
    photon_session_options_set_top_p(o, c.top_p);
    photon_session_options_set_min_p(o, c.min_p);
    photon_session_options_set_repetition_penalty(o, c.penalty, c.last_n);
    photon_session_options_set_presence_penalty(o, c.presence);
    photon_session_options_set_frequency_penalty(o, c.frequency);
    std::vector<int32_t> bias_tokens;
    std::vector<float> biases;
    for (const auto& [token, bias] : c.logit_bias) {
      bias_tokens.push_back(token);
      biases.push_back(bias);
    }
    EXPECT_EQ(photon_session_options_set_logit_bias(o, bias_tokens.data(), biases.data(),
                                                    bias_tokens.size()),
              PHOTON_OK);
    photon_session_options_set_top_logprobs(o, c.top_logprobs);
    photon_session_options_set_seed(o, c.seed);
    photon_session_options_set_ignore_eos(o, c.ignore_eos ? 1 : 0);
    photon_session_options_set_context_length(o, c.context);
    for (const std::string& stop : c.stops)
      EXPECT_EQ(photon_session_options_add_stop_string(o, stop.c_str()), PHOTON_OK);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(models_[c.levels], o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    const std::vector<int32_t> p = prompt(models_[c.levels]);
    EXPECT_EQ(photon_session_prefill(s, p.data(), p.size()), PHOTON_OK) << photon_last_error();
    return s;
  }

  // The uninterrupted run of c's settings.
  static sr::Continuation reference(const Scenario& c) {
    photon_session* s = prompted(c);
    sr::Continuation run;
    EXPECT_EQ(sr::continue_session(s, kBudget, &run), PHOTON_OK) << photon_last_error();
    photon_session_free(s);
    for (const sr::Run* r : {&run.first, &run.then})
      EXPECT_TRUE(r->calls.size() < static_cast<size_t>(sr::kMaxCalls))
          << c.name << ": a run ended within " << sr::kMaxCalls << " calls";
    return run;
  }

  // The first seed from c.seed on whose reference `pick` accepts (it may adjust c from the run).
  template <typename Pick>
  static Scenario search(Scenario c, Pick pick, const char* what) {
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      c.seed = seed;
      if (pick(c, reference(c).first)) return c;
    }
    ADD_FAILURE() << "no seed of " << kSeeds << " gives a run with " << what;
    return c;
  }

  static const std::map<std::string, Scenario>& scenarios() {
    if (!scenarios_.empty()) return scenarios_;
    Scenario hiergen = scenario([](Scenario& c) {
      c.name = "hiergen";
      c.penalty = 1.5f;
      c.last_n = 6;
      c.seed = 5;
    });
    Scenario recgen = scenario([](Scenario& c) {
      c.name = "recgen";
      c.levels = 3;
      c.mode = PHOTON_MODE_RECGEN;
      c.kv_type = PHOTON_DTYPE_BF16;
      c.temperature = 0.8f;
      c.seed = 7;
    });
    Scenario vanilla = scenario([](Scenario& c) {
      c.name = "vanilla";
      c.levels = 0;
      c.mode = PHOTON_MODE_AUTO;
      c.kv_type = PHOTON_DTYPE_F16;
      c.temperature = 0.7f;
      c.seed = 3;
    });
    Scenario context = scenario([](Scenario& c) {
      c.name = "context";
      c.levels = 1;
      c.seed = 2;
    });
    context.context = static_cast<int32_t>(prompt(models_[1]).size()) + kBudget / 2;
    // A hot sampler whose run (EOS ignored) samples EOS: with EOS not ignored it stops there.
    const int32_t eos = photon_model_eos(models_[2]);
    Scenario eos_ignored = search(
        scenario([](Scenario& c) {
          c.name = "eos-ignored";
          c.temperature = 2.0f;
        }),
        [eos](Scenario&, const sr::Run& r) {
          for (size_t j = 2; j + 2 < r.tokens.size(); ++j)
            if (r.tokens[j] == eos) return true;
          return false;
        },
        "EOS");
    Scenario eos_stops = eos_ignored;
    eos_stops.name = "eos-stops";
    eos_stops.ignore_eos = false;
    // A token whose piece is empty: its bytes wait for the rest of a character.
    Scenario utf8 = search(
        scenario([](Scenario& c) {
          c.name = "utf8";
          c.levels = 1;
          c.temperature = 1.5f;
        }),
        [](Scenario&, const sr::Run& r) {
          for (size_t j = 0; j + 2 < r.pieces.size(); ++j)
            if (r.pieces[j].empty()) return true;
          return false;
        },
        "a character split across tokens");
    // Two stop strings from the run: one spanning two pieces (the last byte of one and the first
    // of the next, both plain ASCII), first completed past a quarter of the run, and a whole later
    // piece.
    Scenario stops = search(
        scenario([](Scenario& c) {
          c.name = "stops";
          c.levels = 2;
          c.temperature = 1.0f;
        }),
        [](Scenario& c, const sr::Run& r) {
          std::string text;
          std::vector<size_t> ends;
          for (const std::string& p : r.pieces) ends.push_back((text += p).size());
          auto first_end = [&](const std::string& stop) {
            const size_t at = text.find(stop);
            for (size_t j = 0; at != std::string::npos && j < ends.size(); ++j)
              if (ends[j] >= at + stop.size()) return static_cast<int>(j);
            return -1;
          };
          auto plain = [](const std::string& s) {
            for (unsigned char ch : s)
              if (ch < 0x21 || ch > 0x7E) return false;
            return !s.empty();
          };
          for (size_t j = kBudget / 4; j + kBudget / 2 < r.pieces.size(); ++j) {
            if (r.pieces[j - 1].empty() || r.pieces[j].empty()) continue;
            const std::string span =
                r.pieces[j - 1].substr(r.pieces[j - 1].size() - 1) + r.pieces[j][0];
            if (!plain(span) || first_end(span) != static_cast<int>(j)) continue;
            for (size_t k = j + 3; k + 3 < r.pieces.size(); ++k)
              if (plain(r.pieces[k]) && first_end(r.pieces[k]) == static_cast<int>(k)) {
                c.stops = {span, r.pieces[k]};
                return true;
              }
          }
          return false;
        },
        "two stop strings");
    // One filter each, so that each decides.
    Scenario top_k = scenario([](Scenario& c) {
      c.name = "top-k";
      c.levels = 1;
      c.top_k = 4;
    });
    Scenario top_p = scenario([](Scenario& c) {
      c.name = "top-p";
      c.mode = PHOTON_MODE_RECGEN;
      c.top_p = 0.5f;
    });
    Scenario min_p = scenario([](Scenario& c) {
      c.name = "min-p";
      c.levels = 3;
      c.min_p = 0.2f;
    });
    // OpenAI's penalties, in RecGen, whose sibling windows they make decode one after another.
    Scenario penalties = scenario([](Scenario& c) {
      c.name = "penalties";
      c.levels = 3;
      c.mode = PHOTON_MODE_RECGEN;
      c.presence = 0.6f;
      c.frequency = 0.8f;
      c.last_n = 24;
      c.seed = 9;
    });
    // Biases strong enough to steer a hot sampler.
    Scenario logit_bias = scenario([](Scenario& c) {
      c.name = "logit-bias";
      c.levels = 1;
      c.temperature = 1.2f;
      c.logit_bias = {{5, 4.0f}, {40, 3.0f}, {300, 5.0f}};
      c.seed = 4;
    });
    // Alternatives reported with each token, in RecGen, which samples tokens ahead of delivery.
    Scenario alternatives = scenario([](Scenario& c) {
      c.name = "alternatives";
      c.mode = PHOTON_MODE_RECGEN;
      c.top_logprobs = 3;
    });
    for (const Scenario& c : {hiergen, recgen, vanilla, context, eos_ignored, eos_stops, utf8,
                              stops, top_k, top_p, min_p, penalties, logit_bias, alternatives})
      scenarios_[c.name] = c;
    return scenarios_;
  }

  // Scenario c's reference and its states at every position, saved by a session that advances
  // one token per call.
  static const Saved& saved(const std::string& name) {
    auto it = saved_.find(name);
    if (it != saved_.end()) return it->second;
    const Scenario& c = scenarios().at(name);
    Saved out{reference(c), {}};
    photon_session* s = prompted(c);
    sr::Run stepped;
    for (size_t at = 0;; ++at) {
      out.states.push_back(photon::testing::save_state(s));
      if (at == out.reference.first.tokens.size()) break;
      int32_t generated = 0;
      EXPECT_EQ(photon_session_generate(s, 1, sr::append, &stepped, &generated), PHOTON_OK);
      if (generated != 1) break;
    }
    photon_session_free(s);
    EXPECT_EQ(stepped.tokens, out.reference.first.tokens)
        << name << ": one token per call runs the same";
    return saved_.emplace(name, std::move(out)).first->second;
  }

  // A default session's state after the prompt, of the model and mode family of scenario c.
  static std::vector<uint8_t> base_state(const Scenario& c) {
    Scenario d;  // photon_session_options_create's defaults
    d.name = "default";
    d.levels = c.levels;
    d.mode = c.levels == 0 ? PHOTON_MODE_AUTO : PHOTON_MODE_HIERGEN;
    d.temperature = 0.0f;
    d.seed = 0;
    d.ignore_eos = false;
    photon_session* s = prompted(d);
    std::vector<uint8_t> state = photon::testing::save_state(s);
    photon_session_free(s);
    return state;
  }

  static photon_model* models_[4];
  static std::string paths_[4];
  static std::map<std::string, Scenario> scenarios_;
  static std::map<std::string, Saved> saved_;
};

photon_model* StateFields::models_[4] = {};
std::string StateFields::paths_[4];
std::map<std::string, Scenario> StateFields::scenarios_;
std::map<std::string, Saved> StateFields::saved_;

void expect_runs_equal(const sr::Run& got, const sr::Run& want, const char* which) {
  SCOPED_TRACE(which);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.pieces, want.pieces);
  EXPECT_EQ(got.logprobs, want.logprobs);
  EXPECT_EQ(got.top, want.top);
  ASSERT_EQ(got.calls.size(), want.calls.size()) << "calls";
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].start, want.calls[i].start) << "call " << i;
    EXPECT_EQ(got.calls[i].end, want.calls[i].end) << "call " << i;
    EXPECT_EQ(got.calls[i].reason, want.calls[i].reason) << "call " << i;
  }
}

// A session restored after `at` tokens of `whole` continues with the rest of it.
void expect_continues(const sr::Continuation& got, const sr::Continuation& whole, int32_t at) {
  expect_runs_equal(got.first, sr::tail(whole.first, at), "the first run");
  EXPECT_STREQ(photon_status_name(got.prefill), photon_status_name(whole.prefill));
  EXPECT_EQ(got.known_logprobs, whole.known_logprobs);
  expect_runs_equal(got.then, whole.then, "after the prefill");
}

TEST_F(StateFields, EveryFieldOfTheStateHasARow) {
  std::set<std::string> rowed;
  for (const Row& r : rows()) {
    EXPECT_TRUE(rowed.insert(r.field).second) << r.field << " has two rows";
    EXPECT_EQ(scenarios().count(r.scenario), 1u) << r.field << ": no scenario " << r.scenario;
  }
  const std::set<std::string> fields = photon::testing::schema_fields("session.fbs", "");
  for (const std::string& f : fields)
    EXPECT_EQ(rowed.count(f), 1u) << f << " of schemas/session.fbs has no row in kRows";
  for (const std::string& f : rowed) EXPECT_EQ(fields.count(f), 1u) << f << " is not in the schema";
  EXPECT_GT(fields.size(), 40u);  // the schema was read
}

// A state whose sampler has none of version 4's settings is written as version 3, which builds
// that predate them restore.
TEST_F(StateFields, StatesAreVersion3UnlessTheSamplerNeedsVersion4) {
  EXPECT_EQ(root(saved("hiergen").states.front()).format_version(), 3u);
  EXPECT_EQ(root(saved("penalties").states.front()).format_version(), 4u);
  EXPECT_EQ(root(saved("logit-bias").states.front()).format_version(), 4u);
}

TEST_F(StateFields, EachRowsScenarioExercisesItsField) {
  for (const Row& row : rows()) {
    SCOPED_TRACE(std::string(row.field) + " in " + row.scenario);
    const Scenario& c = scenarios().at(row.scenario);
    const Saved& s = saved(row.scenario);
    const std::vector<uint8_t> base = base_state(c);
    bool exercised = false;
    for (const std::vector<uint8_t>& state : s.states)
      exercised = exercised || row.exercised(root(state), root(base));
    EXPECT_TRUE(exercised)
        << "no saved state of the scenario holds the field away from a default session's";
    if (row.reset) {
      Scenario d = c;
      row.reset(d);
      const sr::Continuation other = reference(d);
      EXPECT_FALSE(other == s.reference) << "the run is the same with the setting at its default";
    }
  }
  // RecGen's states before its first generated token, and after.
  const Saved& r = saved("recgen");
  EXPECT_FALSE(root(r.states.front()).mode_as_RecGenState()->generated());
}

TEST_F(StateFields, RestoredAtEveryPositionContinuesAsTheUninterruptedRun) {
  const std::string dir =
      std::string(PHOTON_BINARY_DIR) + "/state_fields." + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const auto& [name, c] : scenarios()) {
    SCOPED_TRACE(name);
    const Saved& s = saved(name);
    ASSERT_GT(s.states.size(), 2u);
    std::string command = std::string(PHOTON_CONTINUE_STATES) + " " + paths_[c.levels];
    for (size_t at = 0; at < s.states.size(); ++at) {
      SCOPED_TRACE("saved after " + std::to_string(at) + " tokens, restored in this process");
      photon_session* restored = nullptr;
      ASSERT_EQ(photon_session_restore(models_[c.levels], s.states[at].data(), s.states[at].size(),
                                       &restored),
                PHOTON_OK)
          << photon_last_error();
      EXPECT_EQ(photon_session_stop_reason(restored), PHOTON_STOP_NONE);
      sr::Continuation run;
      EXPECT_EQ(sr::continue_session(restored, kBudget - static_cast<int32_t>(at), &run),
                PHOTON_OK);
      photon_session_free(restored);
      expect_continues(run, s.reference, static_cast<int32_t>(at));
      const std::string file = dir + "/" + name + "." + std::to_string(at) + ".phss";
      FILE* f = std::fopen(file.c_str(), "wb");
      ASSERT_NE(f, nullptr) << file;
      ASSERT_EQ(std::fwrite(s.states[at].data(), 1, s.states[at].size(), f), s.states[at].size());
      std::fclose(f);
      command += " " + file + " " + std::to_string(kBudget - static_cast<int32_t>(at));
    }
    // The same states, restored by another process.
    FILE* child = popen(command.c_str(), "r");
    ASSERT_NE(child, nullptr);
    std::string out;
    char buffer[65536];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, child)) > 0;) out.append(buffer, n);
    EXPECT_EQ(pclose(child), 0) << command;
    size_t at = 0;
    for (size_t from = 0, end; (end = out.find('\n', from)) != std::string::npos;
         from = end + 1, ++at) {
      SCOPED_TRACE("saved after " + std::to_string(at) + " tokens, restored in another process");
      const nlohmann::json line = nlohmann::json::parse(out.substr(from, end - from));
      ASSERT_FALSE(line.contains("error")) << line.at("error");
      expect_continues(sr::continuation_from_json(line), s.reference, static_cast<int32_t>(at));
    }
    EXPECT_EQ(at, s.states.size()) << "a run for every state";
  }
  std::filesystem::remove_all(dir);
}

TEST_F(StateFields, IdentityTiesAStateToItsModel) {
  const Saved& s = saved("hiergen");
  for (int levels : {0, 1, 3}) {
    photon_session* restored = nullptr;
    EXPECT_EQ(
        photon_session_restore(models_[levels], s.states[3].data(), s.states[3].size(), &restored),
        PHOTON_ERR_WRONG_MODEL)
        << "restored into the model of " << levels << " levels";
    EXPECT_EQ(restored, nullptr);
  }
}

// What photon.h says a restored session does not keep: context shift (off until set again), a
// pending cancellation, and a pull loop's owed stop at a stop string.
TEST_F(StateFields, ARestoredSessionLeavesBehindWhatTheStateDoesNotHold) {
  const auto restore = [](const Scenario& c, const std::vector<uint8_t>& state) {
    photon_session* r = nullptr;
    EXPECT_EQ(photon_session_restore(models_[c.levels], state.data(), state.size(), &r), PHOTON_OK)
        << photon_last_error();
    return r;
  };
  int32_t n = -1;
  {
    SCOPED_TRACE("context shift");
    const Scenario& c = scenarios().at("context");
    photon_session* s = prompted(c);
    photon_session_options* o = nullptr;
    ASSERT_EQ(photon_session_get_options(s, &o), PHOTON_OK);
    ASSERT_EQ(photon_session_options_set_context_shift(o, 1), PHOTON_OK);
    ASSERT_EQ(photon_session_set_sampler(s, o), PHOTON_OK);
    photon_session_options_free(o);
    ASSERT_EQ(
        photon_session_generate(s, c.context - photon_session_position(s), nullptr, nullptr, &n),
        PHOTON_OK);
    ASSERT_EQ(photon_session_position(s), c.context);
    photon_session* r = restore(c, photon::testing::save_state(s));
    ASSERT_EQ(photon_session_generate(s, 5, nullptr, nullptr, &n), PHOTON_OK);
    EXPECT_EQ(n, 5) << "the original shifts and goes on";
    ASSERT_EQ(photon_session_generate(r, 5, nullptr, nullptr, &n), PHOTON_OK);
    EXPECT_EQ(n, 0);
    EXPECT_EQ(photon_session_stop_reason(r), PHOTON_STOP_CONTEXT_FULL);
    photon_session_free(s);
    photon_session_free(r);
  }
  {
    SCOPED_TRACE("a pending cancellation (which a pull would answer)");
    const Scenario& c = scenarios().at("hiergen");
    photon_session* s = prompted(c);
    photon_session_cancel(s);
    photon_session* r = restore(c, photon::testing::save_state(s));
    int32_t token = -2;
    char piece[256];
    size_t length = 0;
    float logprob = 0.0f;
    ASSERT_EQ(photon_session_next_token(s, &token, piece, sizeof piece, &length, &logprob),
              PHOTON_OK);
    EXPECT_EQ(token, -1);
    EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_CANCELLED);
    ASSERT_EQ(photon_session_next_token(r, &token, piece, sizeof piece, &length, &logprob),
              PHOTON_OK);
    EXPECT_EQ(token, saved("hiergen").reference.first.tokens[0]);
    photon_session_free(s);
    photon_session_free(r);
  }
  {
    SCOPED_TRACE("a pull loop's stop at a stop string");
    const Scenario& c = scenarios().at("stops");
    const sr::Run& whole = saved("stops").reference.first;
    ASSERT_FALSE(whole.calls.empty());
    ASSERT_EQ(whole.calls[0].reason, PHOTON_STOP_STRING);
    photon_session* s = prompted(c);
    int32_t token = -1;
    char piece[256];
    size_t length = 0;
    float logprob = 0.0f;
    for (int32_t i = 0; i < whole.calls[0].end; ++i) {
      ASSERT_EQ(photon_session_next_token(s, &token, piece, sizeof piece, &length, &logprob),
                PHOTON_OK);
      ASSERT_EQ(token, whole.tokens[static_cast<size_t>(i)]);
    }
    photon_session* r = restore(c, photon::testing::save_state(s));
    ASSERT_EQ(photon_session_next_token(s, &token, piece, sizeof piece, &length, &logprob),
              PHOTON_OK);
    EXPECT_EQ(token, -1) << "the original's next pull answers the stop";
    ASSERT_EQ(photon_session_next_token(r, &token, piece, sizeof piece, &length, &logprob),
              PHOTON_OK);
    EXPECT_EQ(token, whole.tokens[static_cast<size_t>(whole.calls[0].end)]);
    photon_session_free(s);
    photon_session_free(r);
  }
}

}  // namespace
