// Failure injection (docs/security.md): the Nth host allocation fails, for every N, through model
// load, session create, prefill, generate (single, batched and pull), save, restore, tokenization,
// scoring and model writing. Every such call must return a status (PHOTON_ERR_OUT_OF_MEMORY), never
// abort, and leave its objects usable: a failed call followed by the same call without the failure
// must give exactly what an undisturbed run gives; or, for a session that failed in the middle of
// a step, refuse every later call and free cleanly. Leaks are caught by LeakSanitizer in the
// sanitizer build. Two modes: only the Nth allocation fails, or every allocation from the Nth on
// (which also checks that reporting an error does not itself need memory).
//
// Host allocations only: the global operator new of this executable is replaced. malloc from C
// code (zlib, libomp) is not injected, and no GPU backend exists to inject into.
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "photon.h"
#include "tiny_models.h"

// ---- the allocation hook ----------------------------------------------------------------------

namespace {

enum Mode : int { kOff, kOnce, kFromThenOn };
std::atomic<int> g_mode{kOff};
std::atomic<long> g_countdown{0};
std::atomic<bool> g_fired{false};
std::atomic<long> g_deferred{0};  // allocations let through before the failure (see below)

// Three libraries cannot survive a failing allocation at some points (docs/security.md):
// protobuf-lite (inside libsentencepiece) leaves a half-built message whose destructor crashes,
// nlohmann::json allocates inside its noexcept destructor, and LLVM's libomp (the OpenMP runtime of
// clang builds) keeps its initialization lock when an exception leaves its start-up, so that the
// next OpenMP call waits forever. Their allocations (seen within the 24 innermost frames)
// are let through, and the failure moves to the next allocation outside them. (The executable
// exports its symbols for dladdr.)
bool unsafe_frame(void* frame) {
  // dladdr is slow, and the same frames come back run after run: remember each answer.
  constexpr size_t kSlots = 1 << 14;
  static std::atomic<uintptr_t> keys[kSlots];
  static std::atomic<uint8_t> answers[kSlots];  // 1: safe, 2: unsafe
  const auto key = reinterpret_cast<uintptr_t>(frame);
  size_t slot = (key * 0x9e3779b97f4a7c15ull) >> 50;
  for (int probe = 0; probe < 8; ++probe, slot = (slot + 1) % kSlots) {
    if (keys[slot].load() == key && answers[slot].load() != 0) return answers[slot].load() == 2;
    if (keys[slot].load() == 0) break;
  }
  Dl_info info;
  const bool unsafe =
      ::dladdr(frame, &info) != 0 && info.dli_sname != nullptr &&
      (std::strstr(info.dli_sname, "protobuf") || std::strstr(info.dli_sname, "nlohmann") ||
       std::strncmp(info.dli_sname, "__kmp", 5) == 0);
  uintptr_t empty = 0;
  if (keys[slot].compare_exchange_strong(empty, key)) answers[slot].store(unsafe ? 2 : 1);
  return unsafe;
}

bool inside_unsafe_library() {
  void* frames[24];
  const int n = ::backtrace(frames, 24);
  for (int i = 0; i < n; ++i)
    if (unsafe_frame(frames[i])) return true;
  return false;
}

bool inject_failure() {
  const int mode = g_mode.load(std::memory_order_relaxed);
  if (mode == kOff) return false;
  const long left = g_countdown.fetch_sub(1, std::memory_order_relaxed) - 1;
  if (left > 0 || (left < 0 && mode == kOnce)) return false;
  if (inside_unsafe_library()) {
    if (left == 0) g_countdown.fetch_add(1, std::memory_order_relaxed);
    if (!g_fired.load()) g_deferred.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  g_fired.store(true);
  return true;
}

void* allocate(std::size_t size, std::size_t alignment) {
  if (inject_failure()) throw std::bad_alloc();
  if (size == 0) size = 1;
  void* p = alignment <= alignof(std::max_align_t)
                ? std::malloc(size)
                : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* allocate_nothrow(std::size_t size, std::size_t alignment) noexcept {
  try {
    return allocate(size, alignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

}  // namespace

void* operator new(std::size_t n) {
  return allocate(n, 0);
}
void* operator new[](std::size_t n) {
  return allocate(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, 0);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace photon::hardening {
namespace {

// Allocation n (1-based) from now on fails, and with kFromThenOn every one after it, until stop().
class Injection {
 public:
  Injection(long n, Mode mode) {
    g_fired.store(false);
    g_deferred.store(0);
    g_countdown.store(n);
    g_mode.store(mode);
  }
  ~Injection() { stop(); }
  Injection(const Injection&) = delete;
  Injection& operator=(const Injection&) = delete;
  // Ends the injection; true if the failure happened.
  bool stop() {
    g_mode.store(kOff);
    return g_fired.load();
  }
};

constexpr long kMaxAllocations = 100000;

std::string what(const std::string& call, long n, Mode mode) {
  return call + " with allocation " + std::to_string(n) +
         (mode == kOnce ? " failing" : " on failing");
}

// A call under injection returns PHOTON_ERR_OUT_OF_MEMORY, or PHOTON_OK if it did not need the
// failed allocation after all (a library may recover); without a failure it succeeds.
void expect_status(photon_status status, bool fired, const std::string& call) {
  if (!fired) {
    EXPECT_EQ(status, PHOTON_OK) << call << " (no failure injected): " << photon_last_error();
  } else if (status != PHOTON_OK) {
    EXPECT_EQ(status, PHOTON_ERR_OUT_OF_MEMORY)
        << call << ": " << photon_status_name(status) << ": " << photon_last_error();
  }
}

// After a failure in the middle of a step, a session may refuse every later call (its caches may
// be half-updated) instead of continuing; it must then say so with the failure's status, the same
// for every call, and still free cleanly. Returns whether it still works.
bool usable(photon_session* s, const std::string& call) {
  size_t size = 0;
  const photon_status status = photon_session_save(s, nullptr, 0, &size);
  if (status == PHOTON_ERR_BUFFER_TOO_SMALL) return true;
  EXPECT_EQ(status, PHOTON_ERR_OUT_OF_MEMORY) << call << ": " << photon_last_error();
  EXPECT_NE(std::string(photon_last_error()).find("unusable"), std::string::npos) << call;
  const int32_t token = 1;
  EXPECT_EQ(photon_session_prefill(s, &token, 1), status) << call;
  EXPECT_EQ(photon_session_generate(s, 1, nullptr, nullptr, nullptr), status) << call;
  return false;
}

struct Stream {
  std::vector<int32_t> tokens;
};

int collect(void* user, int32_t token, const char*, size_t, float) {
  static_cast<Stream*>(user)->tokens.push_back(token);
  return 0;
}

int collect_batch(void* user, size_t index, int32_t token, const char*, size_t, float) {
  static_cast<Stream*>(user)[index].tokens.push_back(token);
  return 0;
}

struct SessionCase {
  const char* name;
  int model;  // index into models_
  photon_mode mode;
};

constexpr int kPhoton = 0, kVanilla = 1;
const SessionCase kSessionCases[] = {{"HierGen", kPhoton, PHOTON_MODE_HIERGEN},
                                     {"RecGen", kPhoton, PHOTON_MODE_RECGEN},
                                     {"vanilla", kVanilla, PHOTON_MODE_AUTO}};
constexpr int32_t kGenerate = 6;

class FailureInjection : public ::testing::TestWithParam<Mode> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    write_tiny_model(dir_->file("photon.photon"), tiny_config(2));
    write_tiny_model(dir_->file("vanilla.photon"), tiny_config(0));
    write_tiny_model(dir_->file("photon-f16.photon"), tiny_config(2), DType::F16);
    ModelConfig long_context = tiny_config(0);
    long_context.max_seq_len = 512;  // enough work for the threaded attention path
    write_tiny_model(dir_->file("long.photon"), long_context);
    const char* names[] = {"photon.photon", "vanilla.photon"};
    for (int m : {kPhoton, kVanilla})
      ASSERT_EQ(photon_model_load(dir_->file(names[m]).c_str(), nullptr, &models_[m]), PHOTON_OK);
    for (int i = 0; i < 5; ++i) prompt_.push_back(i == 0 ? 1 : 5 + (i * 37) % 300);
  }
  static void TearDownTestSuite() {
    for (photon_model*& m : models_) photon_model_free(m), m = nullptr;
    delete dir_;
  }

  // Sampling with a temperature, so that a disturbed random state would show in the tokens.
  static photon_session_options* options_for(const SessionCase& c) {
    photon_session_options* o = nullptr;
    photon_session_options_create(&o);
    photon_session_options_set_mode(o, c.mode);
    photon_session_options_set_temperature(o, 0.8f);
    photon_session_options_set_seed(o, 7);
    photon_session_options_set_ignore_eos(o, 1);
    return o;
  }
  static photon_session* create(const SessionCase& c) {
    photon_session_options* o = options_for(c);
    photon_session* s = nullptr;
    EXPECT_EQ(photon_session_create(models_[c.model], o, &s), PHOTON_OK) << photon_last_error();
    photon_session_options_free(o);
    return s;
  }
  static photon_session* prefilled(const SessionCase& c) {
    photon_session* s = create(c);
    EXPECT_EQ(photon_session_prefill(s, prompt_.data(), prompt_.size()), PHOTON_OK);
    return s;
  }
  static std::vector<int32_t> generate(photon_session* s, int32_t n) {
    Stream out;
    EXPECT_EQ(photon_session_generate(s, n, collect, &out, nullptr), PHOTON_OK)
        << photon_last_error();
    return out.tokens;
  }
  // The tokens an undisturbed session of this case generates after the prompt.
  static std::vector<int32_t> reference(const SessionCase& c) {
    photon_session* s = prefilled(c);
    const std::vector<int32_t> tokens = generate(s, kGenerate);
    photon_session_free(s);
    return tokens;
  }

  // Calls attempt(n) for n = 1, 2, ...: attempt makes allocation n fail during the call under test
  // and returns whether it did; the loop ends with the first run that needed no more allocations.
  // The n whose failure was moved past let-through allocations are skipped: they would fail the
  // same allocation again. A hook that injected nothing would end the loop at once and pass, so at
  // least `min_failures` runs must have failed (floors of about a quarter of what the calls
  // allocate today: enough to tell a working hook from a broken one, loose enough for the engine
  // to allocate less).
  static void every_allocation(long min_failures, const std::function<bool(long)>& attempt) {
    long n = 1, failures = 0;
    while (attempt(n) && !HasFatalFailure()) {
      ++failures;
      ASSERT_LT(n += 1 + g_deferred.load(), kMaxAllocations);
    }
    std::printf("[          ] %ld allocations counted, %ld failures injected\n", n - 1, failures);
    EXPECT_GE(failures, min_failures) << "the allocation hook injected too few failures";
  }

  static TempDir* dir_;
  static photon_model* models_[2];
  static std::vector<int32_t> prompt_;
};

TempDir* FailureInjection::dir_ = nullptr;
photon_model* FailureInjection::models_[2] = {};
std::vector<int32_t> FailureInjection::prompt_;

TEST_P(FailureInjection, LoadModel) {
  const std::string path = dir_->file("photon.photon");
  every_allocation(230, [&](long n) {
    photon_model* model = nullptr;
    Injection injection(n, GetParam());
    const photon_status status = photon_model_load(path.c_str(), nullptr, &model);
    const bool fired = injection.stop();
    expect_status(status, fired, what("photon_model_load", n, GetParam()));
    if (status == PHOTON_OK)
      EXPECT_EQ(photon_model_vocab_size(model), kTinyVocab);
    else
      EXPECT_EQ(model, nullptr);
    photon_model_free(model);
    return fired;
  });
}

TEST_P(FailureInjection, FirstUseOfAnF16Model) {
  // f16 weights are widened on first use, inside whichever call needs them first.
  const std::string path = dir_->file("photon-f16.photon");
  std::vector<int32_t> expected;
  every_allocation(90, [&](long n) {
    photon_model* model = nullptr;
    EXPECT_EQ(photon_model_load(path.c_str(), nullptr, &model), PHOTON_OK);
    photon_session* s = nullptr;
    Stream got;
    Injection injection(n, GetParam());
    photon_status status = photon_session_create(model, nullptr, &s);
    if (status == PHOTON_OK) status = photon_session_prefill(s, prompt_.data(), prompt_.size());
    if (status == PHOTON_OK) status = photon_session_generate(s, kGenerate, collect, &got, nullptr);
    const bool fired = injection.stop();
    expect_status(status, fired, what("first use of an f16 model", n, GetParam()));
    photon_session_free(s);
    // The model must work after the failure, exactly as it does without one.
    s = nullptr;
    EXPECT_EQ(photon_session_create(model, nullptr, &s), PHOTON_OK) << photon_last_error();
    EXPECT_EQ(photon_session_prefill(s, prompt_.data(), prompt_.size()), PHOTON_OK);
    const std::vector<int32_t> tokens = generate(s, kGenerate);
    if (expected.empty()) expected = tokens;
    EXPECT_EQ(tokens, expected) << what("first use of an f16 model", n, GetParam());
    photon_session_free(s);
    photon_model_free(model);
    return fired;
  });
}

TEST_P(FailureInjection, CreateSession) {
  for (const SessionCase& c : kSessionCases) {
    const std::vector<int32_t> expected = reference(c);
    photon_session_options* options = options_for(c);
    every_allocation(2, [&](long n) {
      photon_session* s = nullptr;
      Injection injection(n, GetParam());
      const photon_status status = photon_session_create(models_[c.model], options, &s);
      const bool fired = injection.stop();
      const std::string call = what(std::string("create ") + c.name, n, GetParam());
      expect_status(status, fired, call);
      if (status != PHOTON_OK) {
        EXPECT_EQ(s, nullptr) << call;
        return fired;
      }
      EXPECT_EQ(photon_session_prefill(s, prompt_.data(), prompt_.size()), PHOTON_OK);
      EXPECT_EQ(generate(s, kGenerate), expected) << call;
      photon_session_free(s);
      return fired;
    });
    photon_session_options_free(options);
  }
}

TEST_P(FailureInjection, Prefill) {
  for (const SessionCase& c : kSessionCases) {
    const std::vector<int32_t> expected = reference(c);
    every_allocation(5, [&](long n) {
      photon_session* s = create(c);
      Injection injection(n, GetParam());
      const photon_status status = photon_session_prefill(s, prompt_.data(), prompt_.size());
      const bool fired = injection.stop();
      const std::string call = what(std::string("prefill ") + c.name, n, GetParam());
      expect_status(status, fired, call);
      if (status != PHOTON_OK && !usable(s, call)) {
        photon_session_free(s);
        return fired;
      }
      if (status != PHOTON_OK) {
        // A failed prefill may keep a prefix of the prompt (slices consumed before the failure).
        const size_t kept =
            std::min(static_cast<size_t>(photon_session_position(s)), prompt_.size());
        EXPECT_LE(static_cast<size_t>(photon_session_position(s)), prompt_.size()) << call;
        std::vector<int32_t> history(kept);
        size_t n_history = 0;
        EXPECT_EQ(photon_session_tokens(s, history.data(), history.size(), &n_history), PHOTON_OK)
            << call;
        EXPECT_TRUE(std::equal(history.begin(), history.end(), prompt_.begin())) << call;
        EXPECT_EQ(photon_session_prefill(s, prompt_.data() + kept, prompt_.size() - kept),
                  PHOTON_OK)
            << call;
      }
      EXPECT_EQ(generate(s, kGenerate), expected) << call;
      photon_session_free(s);
      return fired;
    });
  }
}

TEST_P(FailureInjection, Generate) {
  for (const SessionCase& c : kSessionCases) {
    const std::vector<int32_t> expected = reference(c);
    every_allocation(30, [&](long n) {
      photon_session* s = prefilled(c);
      Stream got;
      int32_t delivered = -1;
      Injection injection(n, GetParam());
      const photon_status status = photon_session_generate(s, kGenerate, collect, &got, &delivered);
      const bool fired = injection.stop();
      const std::string call = what(std::string("generate ") + c.name, n, GetParam());
      expect_status(status, fired, call);
      if (status != PHOTON_OK && !usable(s, call)) {
        photon_session_free(s);
        return fired;
      }
      // Delivered tokens are part of the history; a later call continues from them.
      const int32_t rest = kGenerate - static_cast<int32_t>(got.tokens.size());
      for (int32_t t : generate(s, rest)) got.tokens.push_back(t);
      EXPECT_EQ(got.tokens, expected) << call;
      photon_session_free(s);
      return fired;
    });
  }
}

TEST_P(FailureInjection, NextToken) {
  for (const SessionCase& c : kSessionCases) {
    const std::vector<int32_t> expected = reference(c);
    every_allocation(40, [&](long n) {
      photon_session* s = prefilled(c);
      std::vector<int32_t> got;
      got.reserve(expected.size());  // the test's own allocations happen outside the injection
      char piece[64];
      size_t piece_len = 0;
      int32_t token = -1;
      photon_status status = PHOTON_OK;
      Injection injection(n, GetParam());
      while (got.size() < expected.size() &&
             (status = photon_session_next_token(s, &token, piece, sizeof piece, &piece_len,
                                                 nullptr)) == PHOTON_OK)
        got.push_back(token);
      const bool fired = injection.stop();
      const std::string call = what(std::string("next_token ") + c.name, n, GetParam());
      expect_status(status, fired, call);
      if (status != PHOTON_OK && !usable(s, call)) {
        photon_session_free(s);
        return fired;
      }
      while (got.size() < expected.size()) {
        EXPECT_EQ(photon_session_next_token(s, &token, piece, sizeof piece, &piece_len, nullptr),
                  PHOTON_OK);
        got.push_back(token);
      }
      EXPECT_EQ(got, expected) << call;
      photon_session_free(s);
      return fired;
    });
  }
}

TEST_P(FailureInjection, GenerateBatch) {
  const SessionCase& hier = kSessionCases[0];
  const SessionCase& rec = kSessionCases[1];
  const std::vector<int32_t> expected[] = {reference(hier), reference(rec)};
  every_allocation(80, [&](long n) {
    photon_session* sessions[] = {prefilled(hier), prefilled(rec)};
    Stream got[2];
    Injection injection(n, GetParam());
    const photon_status status =
        photon_session_generate_batch(sessions, 2, kGenerate, collect_batch, got, nullptr);
    const bool fired = injection.stop();
    const std::string call = what("generate_batch", n, GetParam());
    expect_status(status, fired, call);
    for (int i = 0; i < 2; ++i) {
      if (status != PHOTON_OK && !usable(sessions[i], call)) {
        photon_session_free(sessions[i]);
        continue;
      }
      for (int32_t t :
           generate(sessions[i], kGenerate - static_cast<int32_t>(got[i].tokens.size())))
        got[i].tokens.push_back(t);
      EXPECT_EQ(got[i].tokens, expected[i]) << call << ", session " << i;
      photon_session_free(sessions[i]);
    }
    return fired;
  });
}

TEST_P(FailureInjection, SaveAndRestore) {
  for (const SessionCase& c : kSessionCases) {
    const std::vector<int32_t> expected = reference(c);
    const std::vector<int32_t> rest(expected.begin() + 2, expected.end());
    photon_session* original = prefilled(c);
    ASSERT_EQ(generate(original, 2).size(), 2u);
    size_t size = 0;
    photon_session_save(original, nullptr, 0, &size);
    std::vector<uint8_t> state(size);
    ASSERT_EQ(photon_session_save(original, state.data(), state.size(), &size), PHOTON_OK);
    photon_session_free(original);

    every_allocation(2, [&](long n) {  // save
      photon_session* s = nullptr;
      EXPECT_EQ(photon_session_restore(models_[c.model], state.data(), state.size(), &s),
                PHOTON_OK);
      std::vector<uint8_t> saved(state.size());
      size_t saved_size = 0;
      Injection injection(n, GetParam());
      const photon_status status = photon_session_save(s, saved.data(), saved.size(), &saved_size);
      const bool fired = injection.stop();
      const std::string call = what(std::string("save ") + c.name, n, GetParam());
      expect_status(status, fired, call);
      if (status == PHOTON_OK) {
        EXPECT_EQ(saved, state) << call;
      }
      EXPECT_EQ(generate(s, kGenerate - 2), rest) << call;
      photon_session_free(s);
      return fired;
    });
    every_allocation(10, [&](long n) {  // restore
      photon_session* s = nullptr;
      Injection injection(n, GetParam());
      const photon_status status =
          photon_session_restore(models_[c.model], state.data(), state.size(), &s);
      const bool fired = injection.stop();
      const std::string call = what(std::string("restore ") + c.name, n, GetParam());
      expect_status(status, fired, call);
      if (status == PHOTON_OK)
        EXPECT_EQ(generate(s, kGenerate - 2), rest) << call;
      else
        EXPECT_EQ(s, nullptr) << call;
      photon_session_free(s);
      return fired;
    });
  }
}

TEST_P(FailureInjection, TokenizeDetokenizeScore) {
  const std::string text = "In the beginning \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 and the end";
  photon_model* model = models_[kPhoton];
  std::vector<int32_t> tokens(256);
  size_t n_tokens = 0;
  ASSERT_EQ(photon_model_tokenize(model, text.data(), text.size(), 1, tokens.data(), tokens.size(),
                                  &n_tokens),
            PHOTON_OK);
  tokens.resize(n_tokens);
  std::vector<float> expected_logprobs(n_tokens);
  ASSERT_EQ(photon_model_score(model, tokens.data(), n_tokens, expected_logprobs.data()),
            PHOTON_OK);
  every_allocation(80, [&](long n) {
    std::vector<int32_t> got(256);
    size_t n_got = 0;
    char decoded[512];
    size_t decoded_len = 0;
    std::vector<float> logprobs(n_tokens);
    Injection injection(n, GetParam());
    photon_status status =
        photon_model_tokenize(model, text.data(), text.size(), 1, got.data(), got.size(), &n_got);
    if (status == PHOTON_OK)
      status = photon_model_detokenize(model, tokens.data(), n_tokens, decoded, sizeof decoded,
                                       &decoded_len);
    if (status == PHOTON_OK)
      status = photon_model_score(model, tokens.data(), n_tokens, logprobs.data());
    const bool fired = injection.stop();
    const std::string call = what("tokenize, detokenize and score", n, GetParam());
    expect_status(status, fired, call);
    if (status == PHOTON_OK) {
      EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + static_cast<long>(n_got)), tokens)
          << call;
      EXPECT_EQ(std::string(decoded, decoded_len), text) << call;
      for (size_t i = 1; i < n_tokens; ++i) EXPECT_EQ(logprobs[i], expected_logprobs[i]) << call;
    }
    return fired;
  });
}

TEST_P(FailureInjection, ScoreALongSequence) {
  // Long enough that attention runs in an OpenMP parallel region.
  photon_model* model = nullptr;
  ASSERT_EQ(photon_model_load(dir_->file("long.photon").c_str(), nullptr, &model), PHOTON_OK);
  std::vector<int32_t> tokens(512);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(5 + (i * 53) % 300);
  std::vector<float> expected(tokens.size());
  ASSERT_EQ(photon_model_score(model, tokens.data(), tokens.size(), expected.data()), PHOTON_OK);
  every_allocation(5, [&](long n) {
    std::vector<float> logprobs(tokens.size());
    Injection injection(n, GetParam());
    const photon_status status =
        photon_model_score(model, tokens.data(), tokens.size(), logprobs.data());
    const bool fired = injection.stop();
    expect_status(status, fired, what("score of 512 tokens", n, GetParam()));
    if (status == PHOTON_OK) {
      EXPECT_TRUE(std::equal(logprobs.begin() + 1, logprobs.end(), expected.begin() + 1));
    }
    return fired;
  });
  photon_model_free(model);
}

TEST_P(FailureInjection, WriteARandomModel) {
  const std::string config =
      R"({"arch": "vanilla", "vocab_size": 320, "dim": 8, "layers": 1, "heads": 2, "kv_heads": 1,
          "head_dim": 4, "ffn_dim": 12, "max_seq_len": 64})";
  const std::string out = dir_->file("written.photon");
  const std::string tokenizer = std::string(PHOTON_SOURCE_DIR) + "/tests/data/tiny.model";
  every_allocation(250, [&](long n) {
    photon_write_options* options = nullptr;
    EXPECT_EQ(photon_write_options_create(&options), PHOTON_OK);
    EXPECT_EQ(photon_write_options_set_tokenizer_file(options, tokenizer.c_str()), PHOTON_OK);
    Injection injection(n, GetParam());
    const photon_status status = photon_model_init_random(config.c_str(), out.c_str(), options);
    const bool fired = injection.stop();
    const std::string call = what("photon_model_init_random", n, GetParam());
    expect_status(status, fired, call);
    photon_write_options_free(options);
    // A failed write leaves nothing behind, not even its temporary file.
    EXPECT_EQ(std::filesystem::exists(out), status == PHOTON_OK) << call;
    EXPECT_FALSE(std::filesystem::exists(out + ".tmp")) << call;
    std::filesystem::remove(out);
    return fired;
  });
}

// The serving engine: an allocation failing during a step ends only the requests that step was
// working on, each with PHOTON_STOP_ERROR, PHOTON_ERR_OUT_OF_MEMORY and a message (a batched
// decode step works on every running request at once); a request the step did not touch, and one
// submitted afterwards, get exactly their undisturbed tokens.
TEST_P(FailureInjection, EngineStep) {
  const SessionCase* cases[] = {&kSessionCases[0], &kSessionCases[1], &kSessionCases[0]};
  const std::vector<int32_t> expected[] = {reference(*cases[0]), reference(*cases[1])};
  every_allocation(10, [&](long n) {
    photon_engine_options* eo = nullptr;
    photon_engine_options_create(&eo);
    photon_engine_options_set_max_running(eo, 2);
    photon_engine* engine = nullptr;
    EXPECT_EQ(photon_engine_create(models_[kPhoton], eo, &engine), PHOTON_OK);
    photon_engine_options_free(eo);
    Stream got[4];
    photon_request* requests[4] = {};
    const auto submit = [&](int i) {
      const SessionCase& c = *cases[i % 3];
      photon_request_options* o = nullptr;
      photon_request_options_create(&o);
      photon_session_options* so = options_for(c);
      photon_request_options_set_session_options(o, so);
      photon_session_options_free(so);
      photon_request_options_set_prompt(o, prompt_.data(), prompt_.size());
      photon_request_options_set_max_tokens(o, kGenerate);
      got[i].tokens.reserve(kGenerate);  // the callback allocates nothing under the injection
      photon_request_options_set_callback(o, collect, &got[i]);
      EXPECT_EQ(photon_engine_submit(engine, o, &requests[i]), PHOTON_OK) << photon_last_error();
      photon_request_options_free(o);
    };
    for (int i = 0; i < 3; ++i) submit(i);  // the third waits: two run at a time
    for (int step = 0; step < 2; ++step) EXPECT_EQ(photon_engine_step(engine, nullptr), PHOTON_OK);
    Injection injection(n, GetParam());
    const photon_status status = photon_engine_step(engine, nullptr);
    const bool fired = injection.stop();
    const std::string call = what("engine step", n, GetParam());
    expect_status(status, fired, call);
    submit(3);
    int32_t left = 1;
    for (int step = 0; left > 0 && step < 1000; ++step)
      EXPECT_EQ(photon_engine_step(engine, &left), PHOTON_OK)
          << call << ": " << photon_last_error();
    EXPECT_EQ(left, 0) << call;
    for (int i = 0; i < 4; ++i) {
      photon_request* r = requests[i];
      EXPECT_EQ(photon_request_get_state(r), PHOTON_REQUEST_FINISHED) << call << ", request " << i;
      if (photon_request_stop_reason(r) == PHOTON_STOP_ERROR) {
        EXPECT_TRUE(fired) << call << ", request " << i;
        EXPECT_LT(i, 2) << call << ": request " << i << " was not in the failed step";
        EXPECT_EQ(photon_request_status(r), PHOTON_ERR_OUT_OF_MEMORY) << call;
        EXPECT_NE(std::string(photon_request_error(r)), "") << call;
      } else {
        EXPECT_EQ(got[i].tokens, expected[i % 3 == 1 ? 1 : 0]) << call << ", request " << i;
      }
      photon_request_free(r);
    }
    photon_engine_free(engine);
    return fired;
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, FailureInjection, ::testing::Values(kOnce, kFromThenOn),
                         [](const auto& test) {
                           return test.param == kOnce ? "NthFails" : "NthAndLaterFail";
                         });

}  // namespace
}  // namespace photon::hardening
