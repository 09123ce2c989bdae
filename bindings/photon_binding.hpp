// photon_binding.hpp -- the C++ layer that SWIG wraps for Java, C#, Go and Python.
//
// It sits on the public C API only (include/photon.h) and gives the generated bindings what the
// C API leaves to its caller: ownership (a Session keeps its model alive, so a model closed or
// collected before its sessions is freed only after the last one), idempotent close(), status
// codes turned into PhotonError, buffers sized by the library's two-call protocol, a token
// listener that a managed runtime can implement (SWIG directors) and that may throw, and a check
// that turns overlapping calls on one session (photon.h: one thread at a time) into a PhotonError.
//
// Header-only: every language's generated wrapper includes it. Its namespace is photon_binding,
// not photon: the library's internals have classes of the same names (photon::Model,
// photon::Session), and two definitions of one qualified name in one process break the
// one-definition rule (the dynamic linker may bind one's calls to the other's code).
#ifndef PHOTON_BINDING_HPP
#define PHOTON_BINDING_HPP

#include <photon.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace photon_binding {

using Bytes = std::vector<std::uint8_t>;
using TokenIds = std::vector<std::int32_t>;
using Logprobs = std::vector<float>;

#ifndef SWIG  // the C++-only part: each language's .i turns PhotonError into its own error

// A failed C call: its status code and the library's message.
class PhotonError : public std::runtime_error {
 public:
  PhotonError(int status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }
  std::string status_name() const {
    return photon_status_name(static_cast<photon_status>(status_));
  }

 private:
  int status_;
};

namespace detail {

inline void check(photon_status status) {
  if (status != PHOTON_OK) throw PhotonError(status, photon_last_error());
}

[[noreturn]] inline void closed(const char* what) {
  throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT, std::string("photon: the ") + what + " is closed");
}

// Runs a call of the library's two-call protocol: `call(buffer, capacity, &needed)` may answer
// PHOTON_ERR_BUFFER_TOO_SMALL with the size it needs, and is then repeated with that size.
template <typename Buffer, typename Call>
Buffer fill(std::size_t first_guess, std::size_t terminator, Call call) {
  Buffer buffer(first_guess + terminator);
  std::size_t needed = 0;
  photon_status status = call(buffer.data(), buffer.size(), &needed);
  if (status == PHOTON_ERR_BUFFER_TOO_SMALL) {
    buffer.resize(needed + terminator);
    status = call(buffer.data(), buffer.size(), &needed);
  }
  check(status);
  buffer.resize(needed);
  return buffer;
}

// A KV cache storage type by its binding name: "f32", "bf16" or "f16" (photon_dtype).
inline photon_dtype kv_type(const std::string& name) {
  if (name == "f32") return PHOTON_DTYPE_F32;
  if (name == "bf16") return PHOTON_DTYPE_BF16;
  if (name == "f16") return PHOTON_DTYPE_F16;
  throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT,
                    "photon: kv_type '" + name + "' is not one of f32, bf16, f16");
}
inline std::string kv_type_name(photon_dtype kv_type) {
  switch (kv_type) {
    case PHOTON_DTYPE_BF16: return "bf16";
    case PHOTON_DTYPE_F16: return "f16";
    case PHOTON_DTYPE_F32:
    case PHOTON_DTYPE_Q8: break;  // q8 stores weights only, never a session's caches
  }
  return "f32";
}

inline TokenIds tokenize(const photon_model* model, const std::string& text, bool add_bos) {
  return fill<TokenIds>(text.size() + 8, 0,
                        [&](std::int32_t* out, std::size_t capacity, std::size_t* needed) {
                          return photon_model_tokenize(model, text.data(), text.size(),
                                                       add_bos ? 1 : 0, out, capacity, needed);
                        });
}

// Score options with the sliding windows `stride` tokens apart (photon_score_options_set_stride).
struct ScoreOptionsFree {
  void operator()(photon_score_options* options) const { photon_score_options_free(options); }
};
inline std::unique_ptr<photon_score_options, ScoreOptionsFree> score_options(int stride) {
  photon_score_options* raw = nullptr;
  check(photon_score_options_create(&raw));
  std::unique_ptr<photon_score_options, ScoreOptionsFree> options(raw);
  check(photon_score_options_set_stride(options.get(), stride));
  return options;
}

// The alternatives of the token last delivered to this thread (photon_last_top_logprobs): the k
// most likely ids of its position and their log-probabilities, the most likely first; empty for
// a session without alternatives. Read where the token arrives (inside the C callback, or right
// after the pull on the same thread): a later token on this thread replaces them.
struct TopLogprobs {
  TokenIds tokens;
  Logprobs logprobs;

  void fetch() {
    std::int32_t ids[PHOTON_MAX_TOP_LOGPROBS];
    float values[PHOTON_MAX_TOP_LOGPROBS];
    std::size_t n = 0;
    check(photon_last_top_logprobs(ids, values, PHOTON_MAX_TOP_LOGPROBS, &n));
    n = n < PHOTON_MAX_TOP_LOGPROBS ? n : PHOTON_MAX_TOP_LOGPROBS;
    tokens.assign(ids, ids + n);
    logprobs.assign(values, values + n);
  }
  void clear() {
    tokens.clear();
    logprobs.clear();
  }
};

}  // namespace detail

#endif  // SWIG

// Values mirror photon_mode / photon_stop_reason (checked below).
enum class Mode { AUTO = 0, HIERGEN = 1, RECGEN = 2 };
enum class StopReason {
  NONE = 0,
  LENGTH = 1,
  EOS = 2,
  STOP_STRING = 3,
  CALLBACK = 4,
  CANCELLED = 5,
  CONTEXT_FULL = 6,
  ERROR = 7
};

#ifndef SWIG
static_assert(static_cast<int>(Mode::RECGEN) == PHOTON_MODE_RECGEN);
static_assert(static_cast<int>(StopReason::CONTEXT_FULL) == PHOTON_STOP_CONTEXT_FULL);
#endif

// Receives each generated token; implemented in the target language through a SWIG director.
// Return false to stop generation. An exception thrown here stops generation too and is rethrown
// to the caller of Session::generate once the library has returned.
//
// While on_token runs, top_tokens() and top_logprobs() hold its token's alternatives (see
// SessionOptions::set_top_logprobs): the k most likely ids of the token's position and their
// log-probabilities, the most likely first; empty when the session computes none.
class TokenListener {
 public:
  virtual ~TokenListener() = default;
  virtual bool on_token(int token, const std::string& piece, float logprob) = 0;
  TokenIds top_tokens() const { return top_.tokens; }
  Logprobs top_logprobs() const { return top_.logprobs; }

#ifndef SWIG
  // The C callbacks call this before on_token, on the thread that delivers the token.
  void fetch_top_logprobs() {
    top_.fetch();
  }

 private:
  detail::TopLogprobs top_;
#endif
};

// Receives the tokens of Session::generate_batch; session_index is the session's place in the
// batch. Return false to stop that session (the others go on); an exception stops them all and is
// rethrown to the caller of generate_batch.
// top_tokens() and top_logprobs() are on_token's token's alternatives, as TokenListener's.
class BatchListener {
 public:
  virtual ~BatchListener() = default;
  virtual bool on_token(int session_index, int token, const std::string& piece, float logprob) = 0;
  TokenIds top_tokens() const { return top_.tokens; }
  Logprobs top_logprobs() const { return top_.logprobs; }

#ifndef SWIG
  // The C callback calls this before on_token, on the thread that delivers the token.
  void fetch_top_logprobs() {
    top_.fetch();
  }

 private:
  detail::TopLogprobs top_;
#endif
};

// Told once that an engine's request has finished, and why (Request::when_finished); implemented
// in the target language through a SWIG director. It runs on the thread that runs the engine's
// steps (or that closes the engine, for a request the close cancels), after the request's last
// token, or at once on the registering thread for a request that has finished already. It may
// read and close the request but not wait for it; an exception it throws on the engine's thread
// is rethrown by Request::wait.
class FinishListener {
 public:
  virtual ~FinishListener() = default;
  virtual void on_finish(StopReason reason) = 0;
};

// Settings of a session: mode, context length, KV cache type and sampler. May be discarded once a
// session has been created from it.
class SessionOptions {
 public:
  SessionOptions() {
    photon_session_options* raw = nullptr;
    detail::check(photon_session_options_create(&raw));
    options_.reset(raw);
  }
  SessionOptions& set_mode(Mode mode) {
    detail::check(photon_session_options_set_mode(get(), static_cast<photon_mode>(mode)));
    return *this;
  }
  SessionOptions& set_context_length(int context_length) {
    detail::check(photon_session_options_set_context_length(get(), context_length));
    return *this;
  }
  // Storage of the session's KV caches: "f32" (the default, exact), "bf16" or "f16" (half the
  // cache memory; log-probabilities differ by a few 1e-3). See photon_session_options_set_kv_type.
  SessionOptions& set_kv_type(const std::string& kv_type) {
    detail::check(photon_session_options_set_kv_type(get(), detail::kv_type(kv_type)));
    return *this;
  }
  SessionOptions& set_seed(std::uint64_t seed) {
    detail::check(photon_session_options_set_seed(get(), seed));
    return *this;
  }
  SessionOptions& set_temperature(float temperature) {
    detail::check(photon_session_options_set_temperature(get(), temperature));
    return *this;
  }
  SessionOptions& set_top_k(int top_k) {
    detail::check(photon_session_options_set_top_k(get(), top_k));
    return *this;
  }
  SessionOptions& set_top_p(float top_p) {
    detail::check(photon_session_options_set_top_p(get(), top_p));
    return *this;
  }
  SessionOptions& set_min_p(float min_p) {
    detail::check(photon_session_options_set_min_p(get(), min_p));
    return *this;
  }
  // last_n is the window of every penalty, the presence and frequency ones included.
  SessionOptions& set_repetition_penalty(float penalty, int last_n) {
    detail::check(photon_session_options_set_repetition_penalty(get(), penalty, last_n));
    return *this;
  }
  // An id that occurs c times in the penalty window loses presence + c * frequency from its
  // logit (0: off; photon_session_options_set_presence_penalty).
  SessionOptions& set_presence_penalty(float presence) {
    detail::check(photon_session_options_set_presence_penalty(get(), presence));
    return *this;
  }
  SessionOptions& set_frequency_penalty(float frequency) {
    detail::check(photon_session_options_set_frequency_penalty(get(), frequency));
    return *this;
  }
  // Replaces the logit biases: biases[i] is added to the logit of tokens[i] (distinct ids);
  // empty lists clear them (photon_session_options_set_logit_bias).
  SessionOptions& set_logit_bias(const TokenIds& tokens, const Logprobs& biases) {
    // The C call takes one count for both arrays: a shorter one would be read past its end.
    if (tokens.size() != biases.size()) {
      throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT,
                        "photon: logit bias for " + std::to_string(tokens.size()) +
                            " tokens with " + std::to_string(biases.size()) +
                            " biases (one per token)");
    }
    detail::check(
        photon_session_options_set_logit_bias(get(), tokens.data(), biases.data(), tokens.size()));
    return *this;
  }
  // Each generated token reports its position's k most likely ids and their log-probabilities
  // (0, the default: none; at most PHOTON_MAX_TOP_LOGPROBS): the listeners' top_tokens() /
  // top_logprobs() and the pulls' last_top_tokens() / last_top_logprobs() hold them
  // (photon_session_options_set_top_logprobs).
  SessionOptions& set_top_logprobs(int k) {
    detail::check(photon_session_options_set_top_logprobs(get(), k));
    return *this;
  }
  SessionOptions& set_ignore_eos(bool ignore_eos) {
    detail::check(photon_session_options_set_ignore_eos(get(), ignore_eos ? 1 : 0));
    return *this;
  }
  SessionOptions& add_stop_string(const std::string& stop) {
    detail::check(photon_session_options_add_stop_string(get(), stop.c_str()));
    return *this;
  }
  // true: generation goes on past a full context, keeping the last half of the tokens and
  // prefilling them again (photon_session_options_set_context_shift).
  SessionOptions& set_context_shift(bool context_shift) {
    detail::check(photon_session_options_set_context_shift(get(), context_shift ? 1 : 0));
    return *this;
  }

#ifndef SWIG
  photon_session_options* get() const {
    return options_.get();
  }
#endif

 private:
  struct Free {
    void operator()(photon_session_options* options) const { photon_session_options_free(options); }
  };
  std::unique_ptr<photon_session_options, Free> options_;
};

class Session;

// The result of Model::score_top: the scored tokens, each one's teacher-forced log-probability
// (logprobs()[i] = log p(tokens()[i] | the tokens before it), NaN at 0), and at each position the
// k most likely ids with their log-probabilities, the most likely first (the lower id first on
// ties), row by row: top_tokens()[i * k + j] and top_logprobs()[i * k + j] for j < k. Row 0 holds
// -1 and NaN (the first token is not predicted). Where tokens()[i] is among its row, its value
// there equals logprobs()[i] bit for bit, so "was it the greedy choice" is a comparison.
class TopScores {
 public:
  TokenIds tokens() const { return tokens_; }
  Logprobs logprobs() const { return logprobs_; }
  int k() const { return k_; }
  TokenIds top_tokens() const { return top_tokens_; }
  Logprobs top_logprobs() const { return top_logprobs_; }

#ifndef SWIG
 private:
  friend class Model;

  TokenIds tokens_;
  Logprobs logprobs_;
  int k_ = 0;
  TokenIds top_tokens_;
  Logprobs top_logprobs_;
#endif
};

// A loaded model. close() (or the garbage collector) drops this handle; the native model is freed
// once no session of it remains either. Calls may come from many threads at once (Python releases
// its interpreter lock during them): each holds the model while it runs, so a close() on another
// thread cannot free it under the call.
class Model {
 public:
  explicit Model(const std::string& path) : Model(path, "cpu", 0) {}
  // On a device: "cpu", "cuda", "cuda:N" or "auto" (photon_load_options_set_device).
  Model(const std::string& path, const std::string& device) : Model(path, device, 0) {}
  // precision: how products of activations and weights compute, "exact", "bf16" or "int8"; ""
  // leaves it to the device ("exact" on the CPU, "bf16" on a GPU). See
  // photon_load_options_set_precision.
  Model(const std::string& path, const std::string& device, const std::string& precision)
      : Model(path, device, 0, false, precision) {}
  // threads: the most CPU threads one call computes with (0: every core); see
  // photon_load_options_set_threads.
  Model(const std::string& path, int threads) : Model(path, "cpu", threads) {}
  Model(const std::string& path, const std::string& device, int threads)
      : Model(path, device, threads, false) {}
  // verify: also read every weight, refusing NaN, infinities and data changed since the file was
  // written (photon_load_options_set_verify).
  Model(const std::string& path, const std::string& device, int threads, bool verify)
      : Model(path, device, threads, verify, std::string()) {}
  Model(const std::string& path, const std::string& device, int threads, bool verify,
        const std::string& precision) {
    photon_load_options* raw_options = nullptr;
    detail::check(photon_load_options_create(&raw_options));
    const std::unique_ptr<photon_load_options, void (*)(photon_load_options*)> options(
        raw_options, photon_load_options_free);
    detail::check(photon_load_options_set_device(options.get(), device.c_str()));
    if (!precision.empty()) {
      detail::check(photon_load_options_set_precision(options.get(), precision.c_str()));
    }
    detail::check(photon_load_options_set_threads(options.get(), threads));
    detail::check(photon_load_options_set_verify(options.get(), verify ? 1 : 0));
    photon_model* raw = nullptr;
    detail::check(photon_model_load(path.c_str(), options.get(), &raw));
    model_.reset(raw, photon_model_free);
  }
  void close() {
    std::shared_ptr<photon_model> released;
    std::lock_guard<std::mutex> lock(mutex_);
    released.swap(model_);
  }
  bool is_closed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !model_;
  }

  static std::string version() { return photon_version(); }

  // "cpu" or "cuda:N": where the model runs (photon_model_device).
  std::string device() const { return photon_model_device(shared().get()); }
  // "exact", "bf16" or "int8": how the model's products compute (photon_model_precision).
  std::string precision() const { return photon_model_precision(shared().get()); }
  std::string arch() const { return photon_model_arch(shared().get()); }
  int levels() const { return photon_model_levels(shared().get()); }
  std::uint64_t parameter_count() const { return photon_model_parameter_count(shared().get()); }
  int vocab_size() const { return photon_model_vocab_size(shared().get()); }
  int context_length() const { return photon_model_context_length(shared().get()); }
  int bos() const { return photon_model_bos(shared().get()); }
  int eos() const { return photon_model_eos(shared().get()); }
  std::string config_json() const { return photon_model_config_json(shared().get()); }

  // Token ids of UTF-8 text, with BOS first when add_bos.
  TokenIds tokenize(const std::string& text, bool add_bos = true) const {
    return detail::tokenize(shared().get(), text, add_bos);
  }

  std::string detokenize(const TokenIds& tokens) const {
    const std::shared_ptr<photon_model> model = shared();
    std::vector<char> text = detail::fill<std::vector<char>>(
        tokens.size() * 8, 1, [&](char* out, std::size_t capacity, std::size_t* needed) {
          return photon_model_detokenize(model.get(), tokens.data(), tokens.size(), out, capacity,
                                         needed);
        });
    return std::string(text.begin(), text.end());
  }

  // The raw bytes token adds to generated text after the token previous (-1, or a token without
  // text, at the start of the text): a piece before a character split across tokens is put
  // together, so it may be part of a UTF-8 character (photon_model_token_piece). For naming
  // alternatives.
  Bytes token_piece(int token, int previous) const {
    const std::shared_ptr<photon_model> model = shared();
    return detail::fill<Bytes>(
        16, 1, [&](std::uint8_t* out, std::size_t capacity, std::size_t* needed) {
          return photon_model_token_piece(model.get(), token, previous,
                                          reinterpret_cast<char*>(out), capacity, needed);
        });
  }

  // The embedded tokenizer: a sentencepiece .model file's bytes (photon_model_tokenizer_model).
  Bytes tokenizer_model() const {
    const std::shared_ptr<photon_model> model = shared();
    return detail::fill<Bytes>(
        0, 0, [&](std::uint8_t* out, std::size_t capacity, std::size_t* needed) {
          return photon_model_tokenizer_model(model.get(), out, capacity, needed);
        });
  }

  // Teacher-forced log-probabilities: element i is log p(tokens[i] | tokens[0..i-1]); element 0
  // is NaN (the first token is not predicted). Longer than the context: in sliding windows half
  // a context apart (photon_model_score).
  Logprobs score(const TokenIds& tokens) const { return score_with_stride(tokens, 0); }
  // As score, with the sliding windows `stride` tokens apart (1 <= stride < the context; 0: half
  // the context), photon_score_options_set_stride.
  Logprobs score_with_stride(const TokenIds& tokens, int stride) const {
    const std::shared_ptr<photon_model> model = shared();
    const auto options = detail::score_options(stride);
    Logprobs logprobs(tokens.size());
    detail::check(photon_model_score_with(model.get(), tokens.data(), tokens.size(), options.get(),
                                          logprobs.data()));
    return logprobs;
  }
  // As score, also giving each position's k most likely ids and their log-probabilities
  // (1 <= k <= the vocabulary; see TopScores), photon_model_score_top.
  TopScores score_top(const TokenIds& tokens, int k) const {
    return score_top_with_stride(tokens, k, 0);
  }
  // As score_top, with the sliding windows `stride` tokens apart (as score_with_stride).
  TopScores score_top_with_stride(const TokenIds& tokens, int k, int stride) const {
    const std::shared_ptr<photon_model> model = shared();
    const auto options = detail::score_options(stride);
    // A k outside the vocabulary sizes no rows: the library refuses it before it writes any.
    const bool valid = k >= 1 && k <= photon_model_vocab_size(model.get());
    const std::size_t cells = tokens.size() * (valid ? static_cast<std::size_t>(k) : 0);
    TopScores scores;
    scores.tokens_ = tokens;
    scores.k_ = k;
    scores.logprobs_.resize(tokens.size());
    // At least one cell, so that an empty input fails on its own count, not on a NULL row.
    scores.top_tokens_.resize(cells > 0 ? cells : 1);
    scores.top_logprobs_.resize(cells > 0 ? cells : 1);
    detail::check(photon_model_score_top(model.get(), tokens.data(), tokens.size(), options.get(),
                                         k, scores.logprobs_.data(), scores.top_tokens_.data(),
                                         scores.top_logprobs_.data()));
    return scores;
  }

#ifndef SWIG
  std::shared_ptr<photon_model> shared() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!model_) detail::closed("model");
    return model_;
  }
#endif

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<photon_model> model_;
};

// One generation stream over a model. close() (or the garbage collector) frees it; it keeps its
// model alive until then.
//
// A session serves one call at a time (photon.h). The bindings let any thread call, so a call that
// would overlap a running one on another thread, or change the session from inside its own token
// callback, fails with PhotonError instead. cancel() is meant to come from another thread; the
// getters of plain values (position, mode, kv type, stop reason) are not checked, for callbacks to
// read.
class Session {
 public:
  // The engine takes a session over (submit) and a finished request gives one back.
  friend class Engine;
  friend class Request;

  explicit Session(const Model& model) : Session(model, nullptr) {}
  Session(const Model& model, const SessionOptions& options) : Session(model, &options) {}

  // A session restored from the bytes of save() (made by any language binding or the C API).
  static Session* restore(const Model& model, const Bytes& state) {
    std::shared_ptr<photon_model> shared = model.shared();
    photon_session* raw = nullptr;
    detail::check(photon_session_restore(shared.get(), state.data(), state.size(), &raw));
    return new Session(std::move(shared), raw);
  }
  static Session* restore_file(const Model& model, const std::string& path) {
    std::shared_ptr<photon_model> shared = model.shared();
    photon_session* raw = nullptr;
    detail::check(photon_session_restore_file(shared.get(), path.c_str(), &raw));
    return new Session(std::move(shared), raw);
  }

  void close() {
    Use use(*this, Use::CHANGE);
    session_.reset();
    model_.reset();
  }
  bool is_closed() const { return !session_; }

  Mode mode() const { return static_cast<Mode>(photon_session_mode(get())); }
  // "f32", "bf16" or "f16": the storage of the session's KV caches (a restored session keeps the
  // type its state was saved with).
  std::string kv_type() const { return detail::kv_type_name(photon_session_kv_type(get())); }
  StopReason stop_reason() const {
    return static_cast<StopReason>(photon_session_stop_reason(get()));
  }
  int position() const { return photon_session_position(get()); }

  // The token history: prompt and generated tokens.
  TokenIds history() const {
    Use use(*this, Use::READ);
    const photon_session* session = get();
    const auto size = static_cast<std::size_t>(photon_session_position(session));
    return detail::fill<TokenIds>(
        size, 0, [&](std::int32_t* out, std::size_t capacity, std::size_t* needed) {
          return photon_session_tokens(session, out, capacity, needed);
        });
  }

  void prefill(const TokenIds& tokens) {
    Use use(*this, Use::CHANGE);
    detail::check(photon_session_prefill(get(), tokens.data(), tokens.size()));
  }
  // Tokenizes text (BOS first when the session is still empty) and prefills it.
  void prefill(const std::string& text) {
    Use use(*this, Use::CHANGE);
    const bool empty = photon_session_position(get()) == 0;
    const TokenIds tokens = detail::tokenize(model_.get(), text, empty);
    detail::check(photon_session_prefill(get(), tokens.data(), tokens.size()));
  }

  // Generates up to max_tokens tokens; returns how many were delivered.
  int generate(int max_tokens) {
    Use use(*this, Use::CHANGE);
    std::int32_t generated = 0;
    detail::check(photon_session_generate(get(), max_tokens, nullptr, nullptr, &generated));
    return generated;
  }
  int generate(int max_tokens, TokenListener& listener) {
    Use use(*this, Use::CHANGE);
    Call call{&listener, nullptr};
    std::int32_t generated = 0;
    const photon_status status =
        photon_session_generate(get(), max_tokens, &Session::deliver, &call, &generated);
    if (call.error) std::rethrow_exception(call.error);
    detail::check(status);
    return generated;
  }

  // Advances sessions of one model together, each by up to max_tokens tokens, with the matrix
  // products of all of them batched; each produces exactly the tokens generate() would have.
  // Returns how many tokens each session delivered.
  static TokenIds generate_batch(const std::vector<Session*>& sessions, int max_tokens) {
    return run_batch(sessions, max_tokens, nullptr);
  }
  static TokenIds generate_batch(const std::vector<Session*>& sessions, int max_tokens,
                                 BatchListener& listener) {
    return run_batch(sessions, max_tokens, &listener);
  }

  // Consumes tokens[i] into sessions[i] for sessions of one model, with the prompts of all of
  // them sharing each matrix product; each session ends as prefill(tokens[i]) would leave it.
  // Every session's tokens are checked first: a bad token or a full context leaves all sessions
  // unchanged.
  static void prefill_batch(const std::vector<Session*>& sessions,
                            const std::vector<TokenIds>& tokens) {
    if (sessions.size() != tokens.size()) {
      throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT,
                        "photon: a batch of " + std::to_string(sessions.size()) +
                            " sessions with " + std::to_string(tokens.size()) +
                            " token lists (one per session)");
    }
    std::vector<photon_session*> handles;
    std::vector<std::unique_ptr<Use>> uses;
    claim_batch(sessions, handles, uses);
    std::vector<const std::int32_t*> token_data;
    std::vector<std::size_t> token_counts;
    token_data.reserve(tokens.size());
    token_counts.reserve(tokens.size());
    for (const TokenIds& ids : tokens) {
      token_data.push_back(ids.data());
      token_counts.push_back(ids.size());
    }
    detail::check(photon_session_prefill_batch(handles.data(), handles.size(), token_data.data(),
                                               token_counts.data()));
  }

  // Pull-style generation: the next token's id, or -1 once generation stopped (stop_reason()
  // says why). last_piece(), last_logprob() and last_top_tokens() / last_top_logprobs() describe
  // the token just returned.
  int next_token() {
    Use use(*this, Use::CHANGE);
    std::int32_t token = -1;
    std::size_t piece_len = 0;
    photon_status status = photon_session_next_token(get(), &token, piece_.data(), piece_.size(),
                                                     &piece_len, &logprob_);
    if (status == PHOTON_ERR_BUFFER_TOO_SMALL) {  // the token is kept: ask again with room
      piece_.resize(piece_len + 1);
      status = photon_session_next_token(get(), &token, piece_.data(), piece_.size(), &piece_len,
                                         &logprob_);
    }
    detail::check(status);
    last_piece_.assign(piece_.data(), token < 0 ? 0 : piece_len);
    if (token < 0) {
      last_top_.clear();
    } else {
      last_top_.fetch();  // this thread's, of the token just pulled
    }
    return token;
  }
  std::string last_piece() const { return last_piece_; }
  float last_logprob() const { return logprob_; }
  // The alternatives of the token just returned (see SessionOptions::set_top_logprobs).
  TokenIds last_top_tokens() const { return last_top_.tokens; }
  Logprobs last_top_logprobs() const { return last_top_.logprobs; }

  // Asks the session to stop generating: a running generate at its next token, a pull loop
  // (next_token) at its next pull, even when asked before the loop (photon_session_cancel).
  // Callable from any thread.
  void cancel() { photon_session_cancel(session_.get()); }

  void set_sampler(const SessionOptions& options) {
    Use use(*this, Use::CHANGE);
    detail::check(photon_session_set_sampler(get(), options.get()));
  }

  Bytes save() {
    Use use(*this, Use::CHANGE);  // a save rolls back tokens sampled ahead
    photon_session* session = get();
    return detail::fill<Bytes>(0, 0,
                               [&](std::uint8_t* out, std::size_t capacity, std::size_t* needed) {
                                 return photon_session_save(session, out, capacity, needed);
                               });
  }
  void save_file(const std::string& path) {
    Use use(*this, Use::CHANGE);
    detail::check(photon_session_save_file(get(), path.c_str()));
  }

#ifndef SWIG
  photon_session* get() const {
    if (!session_) detail::closed("session");
    return session_.get();
  }

 private:
  // Claims the session for a call. CHANGE needs it idle; READ also runs inside a call of the same
  // thread (a token callback reading the history).
  class Use {
   public:
    enum Kind { READ, CHANGE };
    Use(const Session& session, Kind kind) : session_(session) {
      const std::thread::id self = std::this_thread::get_id();
      std::thread::id idle;
      if (session.user_.compare_exchange_strong(idle, self)) {
        claimed_ = true;
      } else if (kind == CHANGE || idle != self) {
        throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT,
                          idle == self ? "photon: the session cannot be changed from inside its "
                                         "own token callback"
                                       : "photon: the session is busy with a call on another "
                                         "thread (a session serves one call at a time)");
      }
    }
    ~Use() {
      if (claimed_) session_.user_.store(std::thread::id());
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    const Session& session_;
    bool claimed_ = false;
  };

  struct Call {
    TokenListener* listener;
    std::exception_ptr error;
  };

  struct BatchCall {
    BatchListener* listener;
    std::exception_ptr error;
  };

  // The C callbacks: no exception may cross the C library, so one is kept for the caller.
  static int deliver(void* user_data, std::int32_t token, const char* piece, std::size_t piece_len,
                     float logprob) {
    Call* call = static_cast<Call*>(user_data);
    try {
      call->listener->fetch_top_logprobs();
      return call->listener->on_token(token, std::string(piece, piece_len), logprob) ? 0 : 1;
    } catch (...) {
      call->error = std::current_exception();
      return 1;
    }
  }
  static int deliver_batch(void* user_data, std::size_t session_index, std::int32_t token,
                           const char* piece, std::size_t piece_len, float logprob) {
    BatchCall* call = static_cast<BatchCall*>(user_data);
    if (call->error) return 1;  // a callback threw: stop the other sessions too
    try {
      call->listener->fetch_top_logprobs();
      return call->listener->on_token(static_cast<int>(session_index), token,
                                      std::string(piece, piece_len), logprob)
                 ? 0
                 : 1;
    } catch (...) {
      call->error = std::current_exception();
      return 1;
    }
  }

  // Claims each session of a batch for the call (its Use guard, once per session) and collects
  // the handles.
  static void claim_batch(const std::vector<Session*>& sessions,
                          std::vector<photon_session*>& handles,
                          std::vector<std::unique_ptr<Use>>& uses) {
    for (const Session* session : sessions) {
      if (!session) throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT, "photon: a null session");
      bool repeated = false;  // the library names a session given twice
      for (const photon_session* handle : handles) repeated = repeated || handle == session->get();
      if (!repeated) uses.push_back(std::make_unique<Use>(*session, Use::CHANGE));
      handles.push_back(session->get());
    }
  }

  static TokenIds run_batch(const std::vector<Session*>& sessions, int max_tokens,
                            BatchListener* listener) {
    std::vector<photon_session*> handles;
    std::vector<std::unique_ptr<Use>> uses;
    claim_batch(sessions, handles, uses);
    TokenIds generated(sessions.size());
    BatchCall call{listener, nullptr};
    const photon_status status = photon_session_generate_batch(
        handles.data(), handles.size(), max_tokens, listener ? &Session::deliver_batch : nullptr,
        &call, generated.data());
    if (call.error) std::rethrow_exception(call.error);
    detail::check(status);
    return generated;
  }

  Session(const Model& model, const SessionOptions* options) : model_(model.shared()) {
    photon_session* raw = nullptr;
    detail::check(photon_session_create(model_.get(), options ? options->get() : nullptr, &raw));
    session_.reset(raw);
  }
  Session(std::shared_ptr<photon_model> model, photon_session* session)
      : model_(std::move(model)), session_(session) {}

  struct Free {
    void operator()(photon_session* session) const { photon_session_free(session); }
  };
  // Declared first so that it is destroyed last: the session must go before its model.
  std::shared_ptr<photon_model> model_;
  std::unique_ptr<photon_session, Free> session_;
  mutable std::atomic<std::thread::id> user_{};  // the thread of the running call, if any
  std::vector<char> piece_ = std::vector<char>(64);
  std::string last_piece_;
  float logprob_ = 0.0f;
  detail::TopLogprobs last_top_;
#endif
};

// ---- Serving many requests: the engine (photon.h, "Serving many requests") ----------------------
//
// Ownership: a Request keeps its engine's native part alive, and an Engine (like a Session) its
// model's, so that any of them may be closed or collected first; the native engine goes, stopping
// its worker, once neither the Engine nor any of its requests holds it. A request's token listener
// is owned by the request and deleted after the library's last call to it.

// Values mirror photon_request_state (checked below).
enum class RequestState { WAITING = 0, RUNNING = 1, PAUSED = 2, FINISHED = 3 };

#ifndef SWIG
static_assert(static_cast<int>(StopReason::ERROR) == PHOTON_STOP_ERROR);
static_assert(static_cast<int>(RequestState::FINISHED) == PHOTON_REQUEST_FINISHED);
#endif

// A request's statistics at one moment (photon_request_stat); times not reached yet are NaN.
struct RequestStats {
  std::int64_t prompt_tokens = 0;     // prompt tokens consumed
  std::int64_t reused_tokens = 0;     // tokens of the continued state or session, or of the
                                      // prompt restored from the prefix cache
  std::int64_t generated_tokens = 0;  // tokens delivered
  std::int64_t pauses = 0;            // times paused for the memory budget
  double queue_seconds = 0;           // from submit to admission
  double first_token_seconds = 0;     // from submit to the first delivered token
  double decode_seconds = 0;          // from the first token to the end (or now)
  double paused_seconds = 0;          // time spent paused
};

// An engine's statistics at one moment (photon_engine_stat).
struct EngineStats {
  std::int64_t waiting = 0;           // requests waiting for admission now
  std::int64_t running = 0;           // requests running now
  std::int64_t paused = 0;            // requests paused now
  std::int64_t submitted = 0;         // requests accepted, in all
  std::int64_t refused = 0;           // submissions refused as busy, in all
  std::int64_t finished = 0;          // requests ended (any reason), in all
  std::int64_t failed = 0;            // of those, ended by an error
  std::int64_t cancelled = 0;         // of those, cancelled
  std::int64_t prompt_tokens = 0;     // prompt tokens consumed, in all
  std::int64_t reused_tokens = 0;     // tokens continued or restored from the prefix cache, in all
  std::int64_t generated_tokens = 0;  // tokens delivered, in all
  std::int64_t pauses = 0;            // times a request was paused, in all
  std::int64_t steps = 0;             // steps that did work, in all
  std::uint64_t memory_in_use = 0;    // bytes the requests' sessions hold now
  std::uint64_t memory_peak = 0;      // the most of those at any time
  double tokens_per_second = 0;       // tokens delivered per second over the last 10 seconds
  std::int64_t prefix_hits = 0;       // requests restored from the prefix cache, in all
  std::uint64_t prefix_bytes = 0;     // bytes the prefix cache holds now
};

#ifndef SWIG
namespace detail {

// The engine whose token callback runs on this thread, if any: a call that would wait for that
// engine's step (wait, next_token, stop) fails instead of waiting forever, and the engine is not
// freed on its own worker thread.
inline thread_local const photon_engine* delivering = nullptr;

class DeliveringScope {
 public:
  explicit DeliveringScope(const photon_engine* engine) : outer_(delivering) {
    delivering = engine;
  }
  ~DeliveringScope() { delivering = outer_; }
  DeliveringScope(const DeliveringScope&) = delete;
  DeliveringScope& operator=(const DeliveringScope&) = delete;

 private:
  const photon_engine* outer_;
};

inline void not_delivering(const photon_engine* engine, const char* call) {
  if (delivering == engine) {
    throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT,
                      std::string("photon: ") + call +
                          " inside a token or finish callback of the same engine would wait for "
                          "the step the callback is part of");
  }
}

// Frees an engine and then lets go of its model. On the engine's own worker thread (the last
// reference dropped inside one of its token callbacks) the worker cannot join itself: another
// thread frees it once the callback has returned.
struct EngineFree {
  std::shared_ptr<photon_model> model;
  void operator()(photon_engine* engine) const {
    if (delivering != engine) {
      photon_engine_free(engine);
      return;
    }
    try {
      std::thread([engine, model = model] { photon_engine_free(engine); }).detach();
    } catch (const std::system_error&) {
      // No thread to be had: the engine stays (freeing it here would deadlock).
    }
  }
};

// The user data of a request's C callback: the listener (owned) and an exception it threw.
class Delivery : public std::enable_shared_from_this<Delivery> {
 public:
  Delivery(const photon_engine* engine, std::unique_ptr<TokenListener> listener)
      : engine_(engine), listener_(std::move(listener)) {}

  static int deliver(void* user_data, std::int32_t token, const char* piece, std::size_t piece_len,
                     float logprob) {
    Delivery& self = *static_cast<Delivery*>(user_data);
    const DeliveringScope scope(self.engine_);  // declared first: it ends after `hold`
    // Held for the call: a request closed from its own callback deletes its listener only after
    // the callback has returned.
    const std::shared_ptr<Delivery> hold = self.shared_from_this();
    try {
      self.listener_->fetch_top_logprobs();
      return self.listener_->on_token(token, std::string(piece, piece_len), logprob) ? 0 : 1;
    } catch (...) {  // no exception may cross the C library: keep the first for wait()
      std::lock_guard<std::mutex> lock(self.mutex_);
      if (!self.error_) self.error_ = std::current_exception();
      return 1;
    }
  }

  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  const photon_engine* engine_;
  std::unique_ptr<TokenListener> listener_;
  mutable std::mutex mutex_;
  std::exception_ptr error_;
};

// The user data of a request's C finish callback: the request's end once it came, and the finish
// listeners (owned) still to tell.
class Completion : public std::enable_shared_from_this<Completion> {
 public:
  explicit Completion(const photon_engine* engine) : engine_(engine) {}

  static void finished(void* user_data, photon_stop_reason reason, photon_status) {
    Completion& self = *static_cast<Completion*>(user_data);
    // Held for the call: a listener may close the request, which deletes this object.
    const std::shared_ptr<Completion> hold = self.shared_from_this();
    self.end(static_cast<StopReason>(reason));
  }

  // The request was freed before it told its end (the free cancelled it, or came as it finished):
  // the listeners not told yet learn CANCELLED.
  void freed() { end(StopReason::CANCELLED); }

  // Keeps listener until the request finishes, or tells it now (on this thread) if it has.
  void add(std::unique_ptr<FinishListener> listener) {
    StopReason reason = StopReason::NONE;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (reason_ == StopReason::NONE) {
        listeners_.push_back(std::move(listener));
        return;
      }
      reason = reason_;
    }
    listener->on_finish(reason);
  }

  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  // Records the end and tells the listeners waiting for it, on this thread.
  void end(StopReason reason) {
    const DeliveringScope scope(engine_);
    std::vector<std::unique_ptr<FinishListener>> listeners;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (reason_ == StopReason::NONE) reason_ = reason;
      listeners.swap(listeners_);
    }
    for (const auto& listener : listeners) {
      try {
        listener->on_finish(reason);
      } catch (...) {  // no exception may cross the C library: keep the first for wait()
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  const photon_engine* engine_;
  mutable std::mutex mutex_;  // guards what follows
  StopReason reason_ = StopReason::NONE;
  std::vector<std::unique_ptr<FinishListener>> listeners_;
  std::exception_ptr error_;
};

}  // namespace detail
#endif  // SWIG

// Settings of an engine: the most requests that run at once (max_running, default 64) and that
// wait (max_waiting, default 1024; a submit beyond it fails as busy), the memory budget of the
// running requests in bytes (0, the default: none), the most prompt tokens a step consumes
// (step_tokens, default 512) and the bytes of its prefix cache (prefix_cache, default 0: none).
// May be discarded once an engine was created from it.
class EngineOptions {
 public:
  EngineOptions() {
    photon_engine_options* raw = nullptr;
    detail::check(photon_engine_options_create(&raw));
    options_.reset(raw);
  }
  EngineOptions& set_max_running(int max_running) {
    detail::check(photon_engine_options_set_max_running(get(), max_running));
    return *this;
  }
  EngineOptions& set_max_waiting(int max_waiting) {
    detail::check(photon_engine_options_set_max_waiting(get(), max_waiting));
    return *this;
  }
  EngineOptions& set_memory_budget(std::uint64_t bytes) {
    detail::check(photon_engine_options_set_memory_budget(get(), bytes));
    return *this;
  }
  EngineOptions& set_step_tokens(int step_tokens) {
    detail::check(photon_engine_options_set_step_tokens(get(), step_tokens));
    return *this;
  }
  // The prefix cache: up to `bytes` of saved sessions of prompts the engine has read (host
  // memory, outside the memory budget; 0, the default: none). A request whose prompt begins with
  // a saved one starts from that save, its tokens counted as reused, with the results of reading
  // its whole prompt (photon_engine_options_set_prefix_cache).
  EngineOptions& set_prefix_cache(std::uint64_t bytes) {
    detail::check(photon_engine_options_set_prefix_cache(get(), bytes));
    return *this;
  }

#ifndef SWIG
  photon_engine_options* get() const {
    return options_.get();
  }
#endif

 private:
  struct Free {
    void operator()(photon_engine_options* options) const { photon_engine_options_free(options); }
  };
  std::unique_ptr<photon_engine_options, Free> options_;
};

// What a request asks for: a prompt (token ids, or text tokenized at submit with BOS first unless
// the request continues a state or a session), a saved state or a session to continue, session
// options (the sampler of a continued one), and the most tokens to generate (-1, the default: up to
// the context). Everything is copied when set, except the session: it must stay open until submit,
// which takes it over (the Session is closed then; Request::take_session gives it back). Serves one
// submit at a time.
class RequestOptions {
 public:
  RequestOptions() {
    photon_request_options* raw = nullptr;
    detail::check(photon_request_options_create(&raw));
    options_.reset(raw);
  }
  RequestOptions& set_prompt(const TokenIds& tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    detail::check(photon_request_options_set_prompt(options_.get(), tokens.data(), tokens.size()));
    text_ = false;
    return *this;
  }
  RequestOptions& set_prompt_text(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    detail::check(
        photon_request_options_set_prompt_text(options_.get(), text.data(), text.size(), 1));
    text_ = true;
    prompt_text_ = text;
    return *this;
  }
  RequestOptions& set_state(const Bytes& state) {
    std::lock_guard<std::mutex> lock(mutex_);
    detail::check(photon_request_options_set_state(options_.get(), state.data(), state.size()));
    continues_state_ = !state.empty();
    return *this;
  }
  RequestOptions& set_session(Session& session) {
    std::lock_guard<std::mutex> lock(mutex_);
    session_ = &session;
    return *this;
  }
  RequestOptions& set_options(const SessionOptions& options) {
    std::lock_guard<std::mutex> lock(mutex_);
    detail::check(photon_request_options_set_session_options(options_.get(), options.get()));
    return *this;
  }
  RequestOptions& set_max_tokens(int max_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    detail::check(photon_request_options_set_max_tokens(options_.get(), max_tokens));
    return *this;
  }

 private:
  friend class Engine;

  struct Free {
    void operator()(photon_request_options* options) const { photon_request_options_free(options); }
  };
  mutable std::mutex mutex_;  // guards what follows; held through a submit
  std::unique_ptr<photon_request_options, Free> options_;
  bool text_ = false;  // the prompt is prompt_text_, whose BOS submit decides
  std::string prompt_text_;
  bool continues_state_ = false;
  Session* session_ = nullptr;
};

// One request of an engine. close() (or the garbage collector) frees it, cancelling it if it has
// not finished; it keeps its engine alive until then. Any thread may call, at any time; tokens are
// pulled (next_token) by one thread at a time.
class Request {
 public:
  // Cancels an unfinished request and releases it; calls running on other threads finish first.
  // Idempotent.
  void close() {
    std::shared_ptr<Handle> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released.swap(handle_);
    }
    if (released) photon_request_cancel(released->request.get());
  }
  bool is_closed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !handle_;
  }

  // Asks the request to end (at the engine's next step, PHOTON_STOP_CANCELLED); any thread.
  void cancel() { photon_request_cancel(handle()->request.get()); }

  RequestState state() const {
    return static_cast<RequestState>(photon_request_get_state(handle()->request.get()));
  }
  // Why the request ended; NONE while it has not.
  StopReason stop_reason() const {
    return static_cast<StopReason>(photon_request_stop_reason(handle()->request.get()));
  }
  // The error that ended the request (stop reason ERROR): its photon_status (0 if none), the
  // status's name and the library's message ("" if none).
  int error_status() const { return photon_request_status(handle()->request.get()); }
  std::string error_status_name() const {
    return photon_status_name(static_cast<photon_status>(error_status()));
  }
  std::string error_message() const { return photon_request_error(handle()->request.get()); }

  // Waits until the request has finished, at most timeout_ms milliseconds (-1: no limit); false
  // when it has not by then. Once it has, an exception its token listener threw is rethrown here.
  bool wait(int timeout_ms) {
    const std::shared_ptr<Handle> h = handle();
    if (timeout_ms != 0) detail::not_delivering(h->engine.get(), "waiting for a request");
    const photon_status status = photon_request_wait(h->request.get(), timeout_ms);
    if (status == PHOTON_ERR_TIMEOUT) return false;
    detail::check(status);
    if (h->delivery) {
      if (const std::exception_ptr error = h->delivery->error()) std::rethrow_exception(error);
    }
    if (const std::exception_ptr error = h->completion->error()) std::rethrow_exception(error);
    return true;
  }

  // Tells listener once the request has finished (see FinishListener); the request owns it
  // (deleted after its call, also when this fails). Any number may be added.
  void when_finished(FinishListener* listener) {
    std::unique_ptr<FinishListener> owned(listener);
    if (!owned) throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT, "photon: a null finish listener");
    handle()->completion->add(std::move(owned));
  }

  // Pull-style delivery, for a request submitted without a listener: the next token's id, waiting
  // at most timeout_ms milliseconds (-1: no limit; PhotonError PHOTON_ERR_TIMEOUT when none came),
  // or -1 once the request has finished and every token was taken. A request that ended by an
  // error throws it then. last_piece(), last_logprob() and last_top_tokens() /
  // last_top_logprobs() describe the token just returned.
  int next_token(int timeout_ms) {
    const std::shared_ptr<Handle> h = handle();
    if (timeout_ms != 0) detail::not_delivering(h->engine.get(), "pulling a request's tokens");
    const Pull pull(*this);
    std::int32_t token = -1;
    std::size_t piece_len = 0;
    float logprob = 0.0f;
    photon_status status = photon_request_next_token(
        h->request.get(), timeout_ms, &token, piece_.data(), piece_.size(), &piece_len, &logprob);
    if (status == PHOTON_ERR_BUFFER_TOO_SMALL) {  // the token stays queued: ask again with room
      piece_.resize(piece_len + 1);
      status = photon_request_next_token(h->request.get(), 0, &token, piece_.data(), piece_.size(),
                                         &piece_len, &logprob);
    }
    detail::check(status);
    if (token < 0) {
      const photon_status failed = photon_request_status(h->request.get());
      if (failed != PHOTON_OK) throw PhotonError(failed, photon_request_error(h->request.get()));
    }
    detail::TopLogprobs top;
    if (token >= 0) top.fetch();  // this thread's, of the token just pulled
    std::lock_guard<std::mutex> lock(last_mutex_);
    last_piece_.assign(piece_.data(), token < 0 ? 0 : piece_len);
    last_logprob_ = logprob;
    last_top_ = std::move(top);
    return token;
  }
  std::string last_piece() const {
    std::lock_guard<std::mutex> lock(last_mutex_);
    return last_piece_;
  }
  float last_logprob() const {
    std::lock_guard<std::mutex> lock(last_mutex_);
    return last_logprob_;
  }
  // The alternatives of the token just returned (see SessionOptions::set_top_logprobs).
  TokenIds last_top_tokens() const {
    std::lock_guard<std::mutex> lock(last_mutex_);
    return last_top_.tokens;
  }
  Logprobs last_top_logprobs() const {
    std::lock_guard<std::mutex> lock(last_mutex_);
    return last_top_.logprobs;
  }

  RequestStats stats() const {
    const std::shared_ptr<Handle> h = handle();
    const auto stat = [&](photon_request_stat which) {
      double value = 0;
      detail::check(photon_request_get_stat(h->request.get(), which, &value));
      return value;
    };
    RequestStats s;
    s.prompt_tokens = static_cast<std::int64_t>(stat(PHOTON_REQUEST_PROMPT_TOKENS));
    s.reused_tokens = static_cast<std::int64_t>(stat(PHOTON_REQUEST_REUSED_TOKENS));
    s.generated_tokens = static_cast<std::int64_t>(stat(PHOTON_REQUEST_GENERATED_TOKENS));
    s.pauses = static_cast<std::int64_t>(stat(PHOTON_REQUEST_PAUSES));
    s.queue_seconds = stat(PHOTON_REQUEST_QUEUE_SECONDS);
    s.first_token_seconds = stat(PHOTON_REQUEST_FIRST_TOKEN_SECONDS);
    s.decode_seconds = stat(PHOTON_REQUEST_DECODE_SECONDS);
    s.paused_seconds = stat(PHOTON_REQUEST_PAUSED_SECONDS);
    return s;
  }

  // The finished request's session state (Session::save's bytes), to continue it later.
  Bytes save() {
    const std::shared_ptr<Handle> h = handle();
    return detail::fill<Bytes>(
        0, 0, [&](std::uint8_t* out, std::size_t capacity, std::size_t* needed) {
          return photon_request_save(h->request.get(), out, capacity, needed);
        });
  }
  // The finished request's session (the one it continued, or the one it made), once.
  Session* take_session() {
    const std::shared_ptr<Handle> h = handle();
    photon_session* raw = nullptr;
    detail::check(photon_request_take_session(h->request.get(), &raw));
    return new Session(h->model, raw);
  }

#ifndef SWIG
 private:
  friend class Engine;

  struct Free {
    void operator()(photon_request* request) const { photon_request_free(request); }
  };
  // Members are destroyed last first: the request, then its listeners, engine and model.
  struct Handle {
    Handle() = default;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() {
      if (!request) return;  // the submit failed: no request, nothing to tell
      request.reset();       // no callback comes from here on
      completion->freed();
    }

    std::shared_ptr<photon_model> model;
    std::shared_ptr<photon_engine> engine;
    std::shared_ptr<detail::Delivery> delivery;
    std::shared_ptr<detail::Completion> completion;
    std::unique_ptr<photon_request, Free> request;
  };

  // Claims the request's token queue for one next_token call.
  class Pull {
   public:
    explicit Pull(Request& request) : request_(request) {
      if (request.pulling_.exchange(true)) {
        throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT,
                          "photon: the request's tokens are being pulled by another thread (one "
                          "thread at a time)");
      }
    }
    ~Pull() { request_.pulling_.store(false); }
    Pull(const Pull&) = delete;
    Pull& operator=(const Pull&) = delete;

   private:
    Request& request_;
  };

  explicit Request(std::shared_ptr<Handle> handle) : handle_(std::move(handle)) {}

  // Held by each call, so that a close() on another thread frees the request only after it.
  std::shared_ptr<Handle> handle() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!handle_) detail::closed("request");
    return handle_;
  }

  mutable std::mutex mutex_;
  std::shared_ptr<Handle> handle_;
  std::atomic<bool> pulling_{false};
  std::vector<char> piece_ = std::vector<char>(64);  // used under a Pull
  mutable std::mutex last_mutex_;                    // guards what follows
  std::string last_piece_;
  float last_logprob_ = 0.0f;
  detail::TopLogprobs last_top_;
#endif
};

// Serves generation requests over one model with continuous batching (photon_engine): requests
// submitted from any thread run together, stepped by the engine's own worker (start / stop) or by
// the caller's loop (step). close() (or the garbage collector) drops this handle; the native engine
// goes once its requests are closed too (stop() first to drain or cancel them). Calls may come from
// many threads at once.
class Engine {
 public:
  explicit Engine(const Model& model) : Engine(model, nullptr) {}
  Engine(const Model& model, const EngineOptions& options) : Engine(model, &options) {}

  void close() {
    std::shared_ptr<photon_engine> engine;
    std::shared_ptr<photon_model> model;
    std::lock_guard<std::mutex> lock(mutex_);
    engine.swap(engine_);
    model.swap(model_);
  }
  bool is_closed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !engine_;
  }

  // Starts the engine's worker thread, which runs steps while there is work.
  void start() { detail::check(photon_engine_start(shared().get())); }
  // Stops the worker and returns once it has ended: drain finishes every request submitted so
  // far (and those submitted while it drains), otherwise every unfinished request is cancelled.
  void stop(bool drain) {
    const std::shared_ptr<photon_engine> engine = shared();
    detail::not_delivering(engine.get(), "stopping the engine");
    detail::check(
        photon_engine_stop(engine.get(), drain ? PHOTON_ENGINE_DRAIN : PHOTON_ENGINE_CANCEL));
  }
  // Runs one step on the calling thread (not while the worker runs); returns the number of
  // requests not finished yet.
  int step() {
    const std::shared_ptr<photon_engine> engine = shared();
    std::int32_t unfinished = 0;
    detail::check(photon_engine_step(engine.get(), &unfinished));
    return unfinished;
  }

  // Submits a request whose tokens are pulled with Request::next_token. PhotonError
  // PHOTON_ERR_BUSY when max_waiting requests wait already.
  Request* submit(const RequestOptions& options) { return submit_with(options, nullptr); }
  // Submits a request whose tokens go to listener, on the thread that runs the steps; the request
  // owns listener (deleted after its last call, also when the submit fails). Returning false stops
  // this request only; an exception thrown by it stops the request and is rethrown by
  // Request::wait.
  Request* submit(const RequestOptions& options, TokenListener* listener) {
    std::unique_ptr<TokenListener> owned(listener);
    if (!owned) throw PhotonError(PHOTON_ERR_INVALID_ARGUMENT, "photon: a null token listener");
    return submit_with(options, std::move(owned));
  }

  EngineStats stats() const {
    const std::shared_ptr<photon_engine> engine = shared();
    const auto stat = [&](photon_engine_stat which) {
      double value = 0;
      detail::check(photon_engine_get_stat(engine.get(), which, &value));
      return value;
    };
    const auto count = [&](photon_engine_stat which) {
      return static_cast<std::int64_t>(stat(which));
    };
    EngineStats s;
    s.waiting = count(PHOTON_ENGINE_WAITING);
    s.running = count(PHOTON_ENGINE_RUNNING);
    s.paused = count(PHOTON_ENGINE_PAUSED);
    s.submitted = count(PHOTON_ENGINE_SUBMITTED);
    s.refused = count(PHOTON_ENGINE_REFUSED);
    s.finished = count(PHOTON_ENGINE_FINISHED);
    s.failed = count(PHOTON_ENGINE_FAILED);
    s.cancelled = count(PHOTON_ENGINE_CANCELLED);
    s.prompt_tokens = count(PHOTON_ENGINE_PROMPT_TOKENS);
    s.reused_tokens = count(PHOTON_ENGINE_REUSED_TOKENS);
    s.generated_tokens = count(PHOTON_ENGINE_GENERATED_TOKENS);
    s.pauses = count(PHOTON_ENGINE_PAUSES);
    s.steps = count(PHOTON_ENGINE_STEPS);
    s.memory_in_use = static_cast<std::uint64_t>(stat(PHOTON_ENGINE_MEMORY_IN_USE));
    s.memory_peak = static_cast<std::uint64_t>(stat(PHOTON_ENGINE_MEMORY_PEAK));
    s.tokens_per_second = stat(PHOTON_ENGINE_TOKENS_PER_SECOND);
    s.prefix_hits = count(PHOTON_ENGINE_PREFIX_HITS);
    s.prefix_bytes = static_cast<std::uint64_t>(stat(PHOTON_ENGINE_PREFIX_BYTES));
    return s;
  }

#ifndef SWIG
  std::shared_ptr<photon_engine> shared() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!engine_) detail::closed("engine");
    return engine_;
  }

 private:
  Engine(const Model& model, const EngineOptions* options) {
    std::shared_ptr<photon_model> shared_model = model.shared();
    photon_engine* raw = nullptr;
    detail::check(
        photon_engine_create(shared_model.get(), options ? options->get() : nullptr, &raw));
    engine_.reset(raw, detail::EngineFree{shared_model});
    model_ = std::move(shared_model);
  }

  Request* submit_with(const RequestOptions& options, std::unique_ptr<TokenListener> listener) {
    auto handle = std::make_shared<Request::Handle>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!engine_) detail::closed("engine");
      handle->engine = engine_;
      handle->model = model_;
    }
    if (listener) {
      handle->delivery =
          std::make_shared<detail::Delivery>(handle->engine.get(), std::move(listener));
    }
    handle->completion = std::make_shared<detail::Completion>(handle->engine.get());
    std::lock_guard<std::mutex> lock(options.mutex_);
    photon_request_options* o = options.options_.get();
    Session* session = options.session_;
    std::unique_ptr<Session::Use> use;
    if (session) use = std::make_unique<Session::Use>(*session, Session::Use::CHANGE);
    const bool continues = session || options.continues_state_;
    if (options.text_) {
      const std::string& text = options.prompt_text_;
      detail::check(
          photon_request_options_set_prompt_text(o, text.data(), text.size(), continues ? 0 : 1));
    }
    detail::check(photon_request_options_set_callback(
        o, handle->delivery ? &detail::Delivery::deliver : nullptr, handle->delivery.get()));
    detail::check(photon_request_options_set_finish_callback(o, &detail::Completion::finished,
                                                             handle->completion.get()));
    detail::check(photon_request_options_set_session(o, session ? session->get() : nullptr));
    photon_request* raw = nullptr;
    const photon_status status = photon_engine_submit(handle->engine.get(), o, &raw);
    // The options keep neither the callbacks nor the session for a later submit.
    photon_request_options_set_callback(o, nullptr, nullptr);
    photon_request_options_set_finish_callback(o, nullptr, nullptr);
    photon_request_options_set_session(o, nullptr);
    detail::check(status);
    handle->request.reset(raw);
    if (session) {  // the request holds it now
      session->session_.release();
      session->model_.reset();
    }
    return new Request(std::move(handle));
  }

  mutable std::mutex mutex_;  // guards what follows
  std::shared_ptr<photon_engine> engine_;
  std::shared_ptr<photon_model> model_;  // for the sessions its requests give back
#endif
};

}  // namespace photon_binding

#endif  // PHOTON_BINDING_HPP
