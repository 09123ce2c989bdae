// The stop rules of photon.h (the block before photon_session_generate, photon_session_next_token
// and photon_session_cancel) in every mode (vanilla, HierGen, RecGen with two and three levels),
// for the three ways of generating: photon_session_generate, pulls of photon_session_next_token,
// and photon_session_generate_batch beside a session of another mode that must not notice.
//
// Every expectation comes from an uninterrupted run of the same sampler without stop rules
// (ignore-EOS on, no stop strings, one call): its token ids, and the generated text after each
// token, from photon_model_detokenize of the prompt and the tokens so far. Where a stop string
// stops is found in that text (the first token after which it occurs once more), and EOS where
// the run has its id, not by the engine's matching.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "photon.h"
#include "test_generated.h"
#include "test_models.h"

namespace {

using photon::testing::save_state;

constexpr int kRunLength = 100;  // tokens of each uninterrupted run
constexpr int kSeeds = 64;       // samplers searched for a run that has what a test needs
const char* const kPrompt = "In the beginning God created";
const char* const kCompanionPrompt = "And the earth was without form";
constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD: a byte of no valid character

struct Case {
  const char* name;
  int levels;  // 0: vanilla
  photon_mode mode;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

enum class Way { Generate, Pull, Batch };
const Way kWays[] = {Way::Generate, Way::Pull, Way::Batch};

const char* way_name(Way way) {
  switch (way) {
    case Way::Generate: return "photon_session_generate";
    case Way::Pull: return "photon_session_next_token";
    case Way::Batch: return "photon_session_generate_batch";
  }
  return "";
}

struct Sampler {
  float temperature = 1.0f;
  uint64_t seed = 1;
};

// What one call delivered and why it stopped.
struct Call {
  std::vector<int32_t> tokens;
  std::string text;  // the pieces, joined
  photon_stop_reason reason = PHOTON_STOP_NONE;
};

// Occurrences of `stop` in `text`, overlapping ones included.
size_t occurrences(const std::string& text, const std::string& stop) {
  size_t n = 0;
  for (size_t at = text.find(stop); at != std::string::npos; at = text.find(stop, at + 1)) ++n;
  return n;
}

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The offset of the character that ends at `end` (text is valid UTF-8).
size_t char_before(const std::string& text, size_t end) {
  size_t at = end - 1;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return at;
}

// An uninterrupted run, the reference of every test: the sampled tokens after a prompt, and the
// text they generate.
struct Reference {
  Sampler sampler;
  std::vector<int32_t> tokens;
  std::vector<std::string> text;  // text[j]: the generated text after tokens[0..j]

  // Where the text that tokens[j] adds begins in text[j]: past the common prefix with
  // text[j - 1], which ends in U+FFFD while a character split across tokens is incomplete.
  size_t added_at(size_t j) const {
    if (j == 0) return 0;
    const std::string& a = text[j - 1];
    const std::string& b = text[j];
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n < a.size() ? char_before(a, n + 1) : n;  // back to a character boundary
  }
  std::string added(size_t j) const { return text[j].substr(added_at(j)); }

  // The first token from `from` on after which the text holds one more occurrence of `stop`
  // than before it (the one a call stops at); -1 if none does.
  int stop_at(const std::string& stop, size_t from = 0) const {
    for (size_t j = from; j < tokens.size(); ++j)
      if (occurrences(text[j], stop) > occurrences(j == 0 ? std::string() : text[j - 1], stop))
        return static_cast<int>(j);
    return -1;
  }
  std::vector<int32_t> slice(size_t from, size_t to) const {
    return {tokens.begin() + static_cast<long>(from), tokens.begin() + static_cast<long>(to)};
  }
};

// A stop string chosen from a run, and the token of the run it stops at.
struct Stop {
  Sampler sampler;
  std::string text;
  int at = -1;
};

class StopRules : public ::testing::TestWithParam<Case> {
 protected:
  // The models of the cases, each written and loaded once per process when a test needs it.
  static photon_model* model(int levels) {
    if (!models_[levels]) {
      const std::string path =
          photon::testing::scratch_model_path("test_stop_rules_" + std::to_string(levels));
      photon::testing::write_test_model(
          levels == 0 ? photon::testing::tiny_vanilla() : photon::testing::tiny_photon(levels),
          path, 300 + levels);
      EXPECT_EQ(photon_model_load(path.c_str(), nullptr, &models_[levels]), PHOTON_OK)
          << photon_last_error();
      std::remove(path.c_str());  // the loaded model keeps its mapping
    }
    return models_[levels];
  }
  static void TearDownTestSuite() {
    for (auto& m : models_) photon_model_free(m), m = nullptr;
  }

  void SetUp() override {
    model_ = model(GetParam().levels);
    ASSERT_NE(model_, nullptr);
    prompt_ = tokenize(kPrompt);
    companion_prompt_ = tokenize(kCompanionPrompt);
    companion_ = run({0.9f, 77}, companion_mode(), companion_prompt_);
  }
  void TearDown() override {
    for (photon_session* s : sessions_) photon_session_free(s);
  }

  std::vector<int32_t> tokenize(const char* text, bool bos = true) const {
    std::vector<int32_t> ids(256);
    size_t n = 0;
    EXPECT_EQ(photon_model_tokenize(model_, text, std::strlen(text), bos ? 1 : 0, ids.data(),
                                    ids.size(), &n),
              PHOTON_OK);
    ids.resize(n);
    return ids;
  }
  std::string detokenize(const std::vector<int32_t>& ids) const {
    size_t n = 0;
    EXPECT_EQ(photon_model_detokenize(model_, ids.data(), ids.size(), nullptr, 0, &n),
              PHOTON_ERR_BUFFER_TOO_SMALL);
    std::string text(n + 1, '\0');
    EXPECT_EQ(photon_model_detokenize(model_, ids.data(), ids.size(), text.data(), text.size(), &n),
              PHOTON_OK);
    text.resize(n);
    return text;
  }
  // The text `tokens` generate after `before` (the session's history before them).
  std::vector<std::string> texts(const std::vector<int32_t>& before,
                                 const std::vector<int32_t>& tokens) const {
    const std::string head = detokenize(before);
    std::vector<int32_t> all = before;
    std::vector<std::string> out;
    for (int32_t t : tokens) {
      all.push_back(t);
      const std::string text = detokenize(all);
      EXPECT_EQ(text.compare(0, head.size(), head), 0) << "the history's text is not a prefix";
      out.push_back(text.substr(head.size()));
    }
    return out;
  }

  photon_mode companion_mode() const {
    if (GetParam().levels < 2) return PHOTON_MODE_HIERGEN;
    return GetParam().mode == PHOTON_MODE_RECGEN ? PHOTON_MODE_HIERGEN : PHOTON_MODE_RECGEN;
  }

  // A session of the case's mode (or `mode`), owned by the test.
  photon_session* session(const Sampler& sampler, bool ignore_eos,
                          const std::vector<std::string>& stops = {}, int32_t context = 0,
                          photon_mode mode = PHOTON_MODE_AUTO) {
    photon_session_options* o = nullptr;
    EXPECT_EQ(photon_session_options_create(&o), PHOTON_OK);
    photon_session_options_set_mode(o, mode == PHOTON_MODE_AUTO ? GetParam().mode : mode);
    photon_session_options_set_temperature(o, sampler.temperature);
    photon_session_options_set_seed(o, sampler.seed);
    photon_session_options_set_ignore_eos(o, ignore_eos ? 1 : 0);
    photon_session_options_set_context_length(o, context);
    for (const std::string& stop : stops)
      EXPECT_EQ(photon_session_options_add_stop_string(o, stop.c_str()), PHOTON_OK);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(model_, o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    sessions_.push_back(s);
    return s;
  }
  photon_session* prompted(const Sampler& sampler, bool ignore_eos,
                           const std::vector<std::string>& stops = {}, int32_t context = 0) {
    photon_session* s = session(sampler, ignore_eos, stops, context);
    EXPECT_EQ(photon_session_prefill(s, prompt_.data(), prompt_.size()), PHOTON_OK);
    return s;
  }

  // The uninterrupted run of a sampler: one call, nothing but its budget to stop it.
  Reference run(const Sampler& sampler, photon_mode mode, const std::vector<int32_t>& prompt) {
    photon_session* s = session(sampler, true, {}, 0, mode);
    EXPECT_EQ(photon_session_prefill(s, prompt.data(), prompt.size()), PHOTON_OK);
    photon::testing::Generated g;
    EXPECT_EQ(photon_session_generate(s, kRunLength, photon::testing::collect, &g, nullptr),
              PHOTON_OK);
    EXPECT_EQ(photon_session_stop_reason(s), PHOTON_STOP_LENGTH);
    Reference r{sampler, g.tokens, texts(prompt, g.tokens)};
    return r;
  }
  const Reference& run(const Sampler& sampler) {
    const std::pair<float, uint64_t> key{sampler.temperature, sampler.seed};
    auto it = runs_.find(key);
    if (it == runs_.end()) it = runs_.emplace(key, run(sampler, GetParam().mode, prompt_)).first;
    return it->second;
  }

  // The first sampler (seeds 1, 2, ...) whose run has what `pick` looks for: a stop string.
  template <typename Pick>
  Stop find_stop(float temperature, Pick pick, const char* what) {
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const Reference& r = run({temperature, seed});
      Stop stop = pick(r);
      if (stop.at >= 0) {
        stop.sampler = r.sampler;
        return stop;
      }
    }
    ADD_FAILURE() << "no run of " << kSeeds << " seeds has " << what;
    return {};
  }

  // One call of `way` on s, asking for up to max_tokens tokens. Its callback returns non-zero for
  // the token of index stop_at (a pull loop stops pulling after it), and calls
  // photon_session_cancel at the token of index cancel_at (in a pull loop: before the next pull),
  // or `cancel` when given. A batch runs s beside a fresh session of another mode, which must
  // deliver the first max_tokens tokens of its own uninterrupted run.
  Call advance(Way way, photon_session* s, int max_tokens, int stop_at = -1, int cancel_at = -1,
               const std::function<void()>& cancel = {}) {
    Sink sink{s, stop_at, cancel_at, cancel, {}, {}};
    const int32_t before = photon_session_position(s);
    int32_t n[2] = {-1, -1};
    switch (way) {
      case Way::Generate:
        EXPECT_EQ(photon_session_generate(s, max_tokens, on_token, &sink, &n[1]), PHOTON_OK)
            << photon_last_error();
        break;
      case Way::Pull:
        for (int i = 0; i < max_tokens; ++i) {
          int32_t token = -2;
          char piece[256];
          size_t length = 99;
          float logprob = 1.0f;
          if (photon_session_next_token(s, &token, piece, sizeof piece, &length, &logprob) !=
              PHOTON_OK) {
            ADD_FAILURE() << photon_last_error();
            break;
          }
          if (token < 0) {
            EXPECT_EQ(length, 0u) << "a stopped pull has no piece";
            break;
          }
          EXPECT_LE(logprob, 0.0f);
          if (sink.take(token, piece, length) != 0) break;
        }
        n[1] = static_cast<int32_t>(sink.call.tokens.size());
        break;
      case Way::Batch: {
        photon_session* beside = session(companion_.sampler, true, {}, 0, companion_mode());
        EXPECT_EQ(
            photon_session_prefill(beside, companion_prompt_.data(), companion_prompt_.size()),
            PHOTON_OK);
        photon_session* batch[] = {beside, s};
        EXPECT_EQ(photon_session_generate_batch(batch, 2, max_tokens, on_batch_token, &sink, n),
                  PHOTON_OK)
            << photon_last_error();
        EXPECT_EQ(sink.beside, companion_.slice(0, static_cast<size_t>(max_tokens)))
            << "the session beside it goes on alone";
        EXPECT_EQ(photon_session_stop_reason(beside), PHOTON_STOP_LENGTH);
        break;
      }
    }
    EXPECT_EQ(n[1], static_cast<int32_t>(sink.call.tokens.size())) << "the delivered count";
    EXPECT_EQ(photon_session_position(s), before + n[1]);
    sink.call.reason = photon_session_stop_reason(s);
    return sink.call;
  }

  // Expects `call` to have delivered tokens [from, to) of `r` with their text, and to have stopped
  // with `reason` (PHOTON_STOP_LENGTH: a pull loop's own budget ended it, with no reason).
  static void expect_call(Way way, const Call& call, const Reference& r, size_t from, size_t to,
                          photon_stop_reason reason) {
    EXPECT_EQ(call.tokens, r.slice(from, to));
    if (way == Way::Pull && reason == PHOTON_STOP_LENGTH) reason = PHOTON_STOP_NONE;
    EXPECT_EQ(call.reason, reason);
    // U+FFFD stands for a byte that starts no character, which the stream can only tell once
    // the next token came; elsewhere the pieces are the detokenized text.
    if (to > from) {
      EXPECT_EQ(without_replacements(call.text),
                without_replacements(r.text[to - 1].substr(r.added_at(from))));
    }
  }
  static std::string without_replacements(std::string text) {
    for (size_t at = text.find(kReplacement); at != std::string::npos;
         at = text.find(kReplacement, at))
      text.erase(at, 3);
    return text;
  }

  struct Sink {
    photon_session* session;
    int stop_at, cancel_at;
    const std::function<void()>& cancel;
    Call call;
    std::vector<int32_t> beside;
    // Takes the next token of the session under test; returns what its callback returns.
    int take(int32_t token, const char* piece, size_t length) {
      call.tokens.push_back(token);
      call.text.append(piece, length);
      const int index = static_cast<int>(call.tokens.size()) - 1;
      if (index == cancel_at) cancel ? cancel() : photon_session_cancel(session);
      return index == stop_at ? 1 : 0;
    }
  };
  static int on_token(void* user, int32_t token, const char* piece, size_t length, float) {
    return static_cast<Sink*>(user)->take(token, piece, length);
  }
  static int on_batch_token(void* user, size_t index, int32_t token, const char* piece,
                            size_t length, float) {
    Sink& sink = *static_cast<Sink*>(user);
    if (index == 0) {
      sink.beside.push_back(token);
      return 0;
    }
    return sink.take(token, piece, length);
  }

  void set_ignore_eos(photon_session* s) {
    photon_session_options* o = nullptr;
    ASSERT_EQ(photon_session_get_options(s, &o), PHOTON_OK);
    photon_session_options_set_ignore_eos(o, 1);
    EXPECT_EQ(photon_session_set_sampler(s, o), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
  }

  static photon_model* models_[4];
  photon_model* model_ = nullptr;
  std::vector<int32_t> prompt_, companion_prompt_;
  Reference companion_;
  std::map<std::pair<float, uint64_t>, Reference> runs_;
  std::vector<photon_session*> sessions_;
};

photon_model* StopRules::models_[4] = {};

// The budget a test gives the call after a stop.
constexpr int kMore = 10;
// The room a chosen stop leaves in its run: the call after it and a batch beside it.
constexpr int kRoom = 2 * kMore + 5;

bool clean(const std::string& text) {
  return !text.empty() && text.find(kReplacement) == std::string::npos;
}

// A stop string made of the last character before token j's text and its first character:
// stop strings that the run first completes at such a j, beginning in an earlier piece.
Stop spanning_two_pieces(const Reference& r) {
  for (size_t j = 3; j + kRoom < r.tokens.size(); ++j) {
    const std::string& t = r.text[j];
    const size_t a = r.added_at(j);
    if (a == 0 || a == t.size()) continue;
    const size_t b = char_before(t, a);
    const std::string stop = t.substr(b, a - b + utf8_length(static_cast<unsigned char>(t[a])));
    if (clean(stop) && r.stop_at(stop) == static_cast<int>(j)) return {{}, stop, r.stop_at(stop)};
  }
  return {};
}

// A stop string that ends in a character of two or more bytes that came from two or more
// tokens (the pieces of the first ones are empty), after the character before it.
Stop ending_in_a_split_character(const Reference& r) {
  for (size_t j = 3; j + kRoom < r.tokens.size(); ++j) {
    const std::string& t = r.text[j];
    if (t.compare(0, r.text[j - 1].size(), r.text[j - 1]) == 0) continue;  // nothing completed
    const size_t a = r.added_at(j);
    const size_t length = utf8_length(static_cast<unsigned char>(t[a]));
    if (a == 0 || length < 2) continue;
    const size_t b = char_before(t, a);
    const std::string stop = t.substr(b, a + length - b);
    if (clean(stop) && r.stop_at(stop) == static_cast<int>(j)) return {{}, stop, r.stop_at(stop)};
  }
  return {};
}

// A stop string longer than any of its pieces: the last character before token j - 1's text,
// all of that text, and the first character of token j's.
Stop spanning_three_pieces(const Reference& r) {
  for (size_t j = 4; j + kRoom < r.tokens.size(); ++j) {
    const std::string& t = r.text[j];
    const size_t a1 = r.added_at(j - 1), a2 = r.added_at(j);
    if (a1 == 0 || a2 <= a1 || a2 == t.size()) continue;
    const size_t b = char_before(t, a1);
    const std::string stop = t.substr(b, a2 + utf8_length(static_cast<unsigned char>(t[a2])) - b);
    if (clean(stop) && r.stop_at(stop) == static_cast<int>(j)) return {{}, stop, r.stop_at(stop)};
  }
  return {};
}

// The text of the first generated token.
Stop first_piece(const Reference& r) {
  const std::string stop = r.added(0);
  if (clean(stop) && r.stop_at(stop) == 0) return {{}, stop, 0};
  return {};
}

TEST_P(StopRules, EosIsNeitherDeliveredNorPassed) {
  const int32_t eos = photon_model_eos(model_);
  ASSERT_GE(eos, 0);
  const Reference* r = nullptr;
  int e = -1;
  for (uint64_t seed = 1; seed <= kSeeds && e < 0; ++seed) {
    r = &run({2.0f, seed});  // a hot sampler, for EOS to come up
    for (size_t j = 2; j + kRoom < r->tokens.size() && e < 0; ++j)
      if (r->tokens[j] == eos) e = static_cast<int>(j);
  }
  ASSERT_GE(e, 0) << "no run of " << kSeeds << " seeds samples EOS";
  for (Way way : kWays) {
    SCOPED_TRACE(way_name(way));
    photon_session* s = prompted(r->sampler, false);
    expect_call(way, advance(way, s, e + kMore), *r, 0, e, PHOTON_STOP_EOS);
    // EOS stays the next token: every later call stops at once.
    expect_call(way, advance(way, s, kMore), *r, e, e, PHOTON_STOP_EOS);
    expect_call(way, advance(way, s, kMore), *r, e, e, PHOTON_STOP_EOS);
    // Until the sampler ignores it: then it is delivered, and the run goes on.
    set_ignore_eos(s);
    expect_call(way, advance(way, s, kMore), *r, e, e + kMore, PHOTON_STOP_LENGTH);
  }
}

TEST_P(StopRules, StopStringsStopAtTheTokenThatCompletesThem) {
  const Stop stops[] = {
      find_stop(1.0f, spanning_two_pieces, "a stop string that spans two pieces"),
      find_stop(1.0f, spanning_three_pieces, "a stop string longer than a piece"),
      find_stop(1.0f, ending_in_a_split_character, "a character split across tokens"),
      find_stop(1.0f, first_piece, "text in its first token"),
  };
  for (const Stop& stop : stops) {
    ASSERT_GE(stop.at, 0);
    const Reference& r = run(stop.sampler);
    SCOPED_TRACE("stop string \"" + stop.text + "\" at token " + std::to_string(stop.at));
    // The call after the stop goes on; the occurrence it stopped at does not stop it again.
    const int next = r.stop_at(stop.text, stop.at + 1);
    const bool again = next >= 0 && next < stop.at + 1 + kMore;
    for (Way way : kWays) {
      SCOPED_TRACE(way_name(way));
      photon_session* s = prompted(stop.sampler, true, {stop.text});
      expect_call(way, advance(way, s, stop.at + kMore), r, 0, stop.at + 1, PHOTON_STOP_STRING);
      expect_call(way, advance(way, s, kMore), r, stop.at + 1,
                  again ? next + 1 : stop.at + 1 + kMore,
                  again ? PHOTON_STOP_STRING : PHOTON_STOP_LENGTH);
    }
  }
}

// A call whose budget ends before the token that completes a stop string leaves it begun; the
// next call completes it with its first token.
TEST_P(StopRules, StopStringsContinueAcrossCalls) {
  const Stop stops[] = {
      find_stop(1.0f, spanning_two_pieces, "a stop string that spans two pieces"),
      find_stop(1.0f, ending_in_a_split_character, "a character split across tokens"),
  };
  for (const Stop& stop : stops) {
    ASSERT_GE(stop.at, 0);
    const Reference& r = run(stop.sampler);
    SCOPED_TRACE("stop string \"" + stop.text + "\" at token " + std::to_string(stop.at));
    for (Way way : kWays) {
      SCOPED_TRACE(way_name(way));
      photon_session* s = prompted(stop.sampler, true, {stop.text});
      expect_call(way, advance(way, s, stop.at), r, 0, stop.at, PHOTON_STOP_LENGTH);
      expect_call(way, advance(way, s, kMore), r, stop.at, stop.at + 1, PHOTON_STOP_STRING);
    }
  }
}

// After a stop string, a pull loop ends with one more pull (-1); a generate call between drops
// that, and generate calls do not owe one.
TEST_P(StopRules, APullLoopEndsOnePullAfterItsStopString) {
  const auto once = [](const Reference& r) {
    const Stop stop = spanning_two_pieces(r);
    return stop.at >= 0 && r.stop_at(stop.text, stop.at + 1) < 0 ? stop : Stop{};
  };
  const Stop stop = find_stop(1.0f, once, "a stop string that spans two pieces, once");
  ASSERT_GE(stop.at, 0);
  const Reference& r = run(stop.sampler);
  const int k = stop.at;
  photon_session* pulled = prompted(stop.sampler, true, {stop.text});
  expect_call(Way::Pull, advance(Way::Pull, pulled, k + 1), r, 0, k + 1, PHOTON_STOP_STRING);
  expect_call(Way::Pull, advance(Way::Pull, pulled, kMore), r, k + 1, k + 1, PHOTON_STOP_STRING);
  expect_call(Way::Pull, advance(Way::Pull, pulled, kMore), r, k + 1, k + 1 + kMore,
              PHOTON_STOP_LENGTH);
  photon_session* mixed = prompted(stop.sampler, true, {stop.text});
  expect_call(Way::Pull, advance(Way::Pull, mixed, k + 1), r, 0, k + 1, PHOTON_STOP_STRING);
  expect_call(Way::Generate, advance(Way::Generate, mixed, 2), r, k + 1, k + 3, PHOTON_STOP_LENGTH);
  expect_call(Way::Pull, advance(Way::Pull, mixed, 2), r, k + 3, k + 5, PHOTON_STOP_LENGTH);
  photon_session* generated = prompted(stop.sampler, true, {stop.text});
  expect_call(Way::Generate, advance(Way::Generate, generated, k + kMore), r, 0, k + 1,
              PHOTON_STOP_STRING);
  expect_call(Way::Pull, advance(Way::Pull, generated, 2), r, k + 1, k + 3, PHOTON_STOP_LENGTH);
}

TEST_P(StopRules, LengthAndCallbackStopsGoOnWithTheRun) {
  const Reference& r = run({1.0f, 1});
  for (Way way : kWays) {
    SCOPED_TRACE(way_name(way));
    photon_session* s = prompted(r.sampler, true);
    expect_call(way, advance(way, s, 7), r, 0, 7, PHOTON_STOP_LENGTH);
    if (way == Way::Pull) {  // no callback: the loop stops pulling
      expect_call(way, advance(way, s, kMore, 2), r, 7, 10, PHOTON_STOP_LENGTH);
    } else {
      expect_call(way, advance(way, s, kMore, 2), r, 7, 10, PHOTON_STOP_CALLBACK);
    }
    expect_call(way, advance(way, s, 5), r, 10, 15, PHOTON_STOP_LENGTH);
    expect_call(way, advance(way, s, 0), r, 15, 15, PHOTON_STOP_LENGTH);
  }
}

TEST_P(StopRules, CancelStopsBeforeTheNextTokenAndIsAnsweredOnce) {
  const Reference& r = run({1.0f, 2});
  for (Way way : kWays) {
    SCOPED_TRACE(way_name(way));
    photon_session* s = prompted(r.sampler, true);
    // A request made while the call runs (from its callback; between two pulls).
    expect_call(way, advance(way, s, 20, -1, 4), r, 0, 5, PHOTON_STOP_CANCELLED);
    // The call it stopped answered it: the next call goes on with the run.
    expect_call(way, advance(way, s, 5), r, 5, 10, PHOTON_STOP_LENGTH);
    // A request made before a call: generate calls discard it, a pull answers it.
    photon_session_cancel(s);
    if (way == Way::Pull) {
      expect_call(way, advance(way, s, 5), r, 10, 10, PHOTON_STOP_CANCELLED);
      expect_call(way, advance(way, s, 5), r, 10, 15, PHOTON_STOP_LENGTH);
    } else {
      expect_call(way, advance(way, s, 5), r, 10, 15, PHOTON_STOP_LENGTH);
    }
    // A prefill (of nothing, here) discards it too.
    photon_session_cancel(s);
    ASSERT_EQ(photon_session_prefill(s, nullptr, 0), PHOTON_OK);
    expect_call(way, advance(way, s, 5), r, 15, 20, PHOTON_STOP_LENGTH);
  }
}

TEST_P(StopRules, ContextFullStopsEveryLaterCall) {
  const Reference& r = run({1.0f, 3});
  const int room = 7;
  const auto context = static_cast<int32_t>(prompt_.size()) + room;
  for (Way way : kWays) {
    SCOPED_TRACE(way_name(way));
    photon_session* s = prompted(r.sampler, true, {}, context);
    expect_call(way, advance(way, s, 20), r, 0, room, PHOTON_STOP_CONTEXT_FULL);
    expect_call(way, advance(way, s, 5), r, room, room, PHOTON_STOP_CONTEXT_FULL);
    // A budget that ends where the context does stops for the budget first.
    photon_session* exact = prompted(r.sampler, true, {}, context);
    expect_call(way, advance(way, exact, room), r, 0, room, PHOTON_STOP_LENGTH);
    expect_call(way, advance(way, exact, 5), r, room, room, PHOTON_STOP_CONTEXT_FULL);
  }
}

// A prefill interrupts the generated text: a stop string does not span it. The stop string is
// the end of the text before the prefill and the start of the text after it.
TEST_P(StopRules, APrefillStartsTheGeneratedTextAfresh) {
  const std::vector<int32_t> turn = tokenize(" And God said", false);
  const int before = 8;  // tokens generated before the prefill
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const Reference& r = run({1.0f, seed});
    // The last character before the prefill, complete and not held back.
    const std::string& head = r.text[before - 1];
    if (head.empty() || r.text[before].compare(0, head.size(), head) != 0) continue;
    const std::string last = head.substr(char_before(head, head.size()));
    if (!clean(last)) continue;
    // The continuation after the prefill, from a session that takes the same steps.
    photon_session* mirror = prompted(r.sampler, true);
    ASSERT_EQ(photon_session_generate(mirror, before, nullptr, nullptr, nullptr), PHOTON_OK);
    ASSERT_EQ(photon_session_prefill(mirror, turn.data(), turn.size()), PHOTON_OK);
    photon::testing::Generated g;
    ASSERT_EQ(photon_session_generate(mirror, 2 * kMore, photon::testing::collect, &g, nullptr),
              PHOTON_OK);
    std::vector<int32_t> history = prompt_;
    history.insert(history.end(), r.tokens.begin(), r.tokens.begin() + before);
    history.insert(history.end(), turn.begin(), turn.end());
    const Reference after{r.sampler, g.tokens, texts(history, g.tokens)};
    const std::string first = after.added(0);
    if (first.empty()) continue;
    const std::string stop =
        last + first.substr(0, utf8_length(static_cast<unsigned char>(first[0])));
    const int in_run = r.stop_at(stop), at = after.stop_at(stop);
    if (!clean(stop) || (in_run >= 0 && in_run < before) || at == 0) continue;
    SCOPED_TRACE("stop string \"" + stop + "\"");
    for (Way way : kWays) {
      SCOPED_TRACE(way_name(way));
      photon_session* s = prompted(r.sampler, true, {stop});
      expect_call(way, advance(way, s, before), r, 0, before, PHOTON_STOP_LENGTH);
      ASSERT_EQ(photon_session_prefill(s, turn.data(), turn.size()), PHOTON_OK);
      const bool stops = at >= 0 && at < 2 * kMore;
      expect_call(way, advance(way, s, 2 * kMore), after, 0, stops ? at + 1 : 2 * kMore,
                  stops ? PHOTON_STOP_STRING : PHOTON_STOP_LENGTH);
    }
    return;
  }
  FAIL() << "no run of " << kSeeds << " seeds has text on both sides of the prefill";
}

// A saved state carries the generated text: a stop string begun before the save, in whole
// characters or in the first bytes of one, completes after the restore where it would have.
TEST_P(StopRules, RestoredSessionsContinueTheTextOfTheirStopStrings) {
  const Stop stops[] = {
      find_stop(1.0f, spanning_two_pieces, "a stop string that spans two pieces"),
      find_stop(1.0f, ending_in_a_split_character, "a character split across tokens"),
  };
  for (const Stop& stop : stops) {
    ASSERT_GE(stop.at, 0);
    const Reference& r = run(stop.sampler);
    SCOPED_TRACE("stop string \"" + stop.text + "\" at token " + std::to_string(stop.at));
    photon_session* s = prompted(stop.sampler, true, {stop.text});
    expect_call(Way::Generate, advance(Way::Generate, s, stop.at), r, 0, stop.at,
                PHOTON_STOP_LENGTH);
    const std::vector<uint8_t> state = save_state(s);
    for (Way way : kWays) {
      SCOPED_TRACE(way_name(way));
      photon_session* restored = nullptr;
      ASSERT_EQ(photon_session_restore(model_, state.data(), state.size(), &restored), PHOTON_OK)
          << photon_last_error();
      sessions_.push_back(restored);
      EXPECT_EQ(photon_session_stop_reason(restored), PHOTON_STOP_NONE);
      expect_call(way, advance(way, restored, kMore), r, stop.at, stop.at + 1, PHOTON_STOP_STRING);
    }
  }
}

// photon_session_cancel from another thread. The call waits, at its third token, until the other
// thread has cancelled, so that the request lands inside the call however the threads are
// scheduled; every wait is bounded.
TEST_P(StopRules, CancelFromAnotherThreadStopsEveryWayOfGenerating) {
  const Reference& r = run({1.0f, 4});
  for (Way way : kWays) {
    SCOPED_TRACE(way_name(way));
    photon_session* s = prompted(r.sampler, true);
    std::atomic<int> step{0};  // 1: the call holds its third token; 2: the other thread cancelled
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto reach = [&](int value) {
      while (step.load() < value && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      return step.load() >= value;
    };
    std::thread canceller([&] {
      if (reach(1)) photon_session_cancel(s);
      step.store(2);
    });
    const Call call = advance(way, s, kRunLength - kMore, -1, 2, [&] {
      step.store(1);
      EXPECT_TRUE(reach(2)) << "the other thread did not cancel within a minute";
    });
    if (step.load() == 0) step.store(1);  // the call ended early: let the thread go
    canceller.join();
    expect_call(way, call, r, 0, 3, PHOTON_STOP_CANCELLED);
    expect_call(way, advance(way, s, 5), r, 3, 8, PHOTON_STOP_LENGTH);
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& param) {
  return param.param.name;
}

INSTANTIATE_TEST_SUITE_P(Modes, StopRules,
                         ::testing::Values(Case{"vanilla", 0, PHOTON_MODE_HIERGEN},
                                           Case{"hiergen", 2, PHOTON_MODE_HIERGEN},
                                           Case{"recgen", 2, PHOTON_MODE_RECGEN},
                                           Case{"recgen_l3", 3, PHOTON_MODE_RECGEN}),
                         CaseName);

}  // namespace
