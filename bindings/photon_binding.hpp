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
    case PHOTON_DTYPE_F32: break;
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
  CONTEXT_FULL = 6
};

#ifndef SWIG
static_assert(static_cast<int>(Mode::RECGEN) == PHOTON_MODE_RECGEN);
static_assert(static_cast<int>(StopReason::CONTEXT_FULL) == PHOTON_STOP_CONTEXT_FULL);
#endif

// Receives each generated token; implemented in the target language through a SWIG director.
// Return false to stop generation. An exception thrown here stops generation too and is rethrown
// to the caller of Session::generate once the library has returned.
class TokenListener {
 public:
  virtual ~TokenListener() = default;
  virtual bool on_token(int token, const std::string& piece, float logprob) = 0;
};

// Receives the tokens of Session::generate_batch; session_index is the session's place in the
// batch. Return false to stop that session (the others go on); an exception stops them all and is
// rethrown to the caller of generate_batch.
class BatchListener {
 public:
  virtual ~BatchListener() = default;
  virtual bool on_token(int session_index, int token, const std::string& piece, float logprob) = 0;
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
  SessionOptions& set_repetition_penalty(float penalty, int last_n) {
    detail::check(photon_session_options_set_repetition_penalty(get(), penalty, last_n));
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

// A loaded model. close() (or the garbage collector) drops this handle; the native model is freed
// once no session of it remains either. Calls may come from many threads at once (Python releases
// its interpreter lock during them): each holds the model while it runs, so a close() on another
// thread cannot free it under the call.
class Model {
 public:
  explicit Model(const std::string& path) : Model(path, "cpu", 0) {}
  // On a device: "cpu", "cuda", "cuda:N" or "auto" (photon_load_options_set_device).
  Model(const std::string& path, const std::string& device) : Model(path, device, 0) {}
  // threads: the most CPU threads one call computes with (0: every core); see
  // photon_load_options_set_threads.
  Model(const std::string& path, int threads) : Model(path, "cpu", threads) {}
  Model(const std::string& path, const std::string& device, int threads)
      : Model(path, device, threads, false) {}
  // verify: also read every weight, refusing NaN, infinities and data changed since the file was
  // written (photon_load_options_set_verify).
  Model(const std::string& path, const std::string& device, int threads, bool verify) {
    photon_load_options* raw_options = nullptr;
    detail::check(photon_load_options_create(&raw_options));
    const std::unique_ptr<photon_load_options, void (*)(photon_load_options*)> options(
        raw_options, photon_load_options_free);
    detail::check(photon_load_options_set_device(options.get(), device.c_str()));
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
    photon_score_options* raw_options = nullptr;
    detail::check(photon_score_options_create(&raw_options));
    const std::unique_ptr<photon_score_options, void (*)(photon_score_options*)> options(
        raw_options, photon_score_options_free);
    detail::check(photon_score_options_set_stride(options.get(), stride));
    Logprobs logprobs(tokens.size());
    detail::check(photon_model_score_with(model.get(), tokens.data(), tokens.size(), options.get(),
                                          logprobs.data()));
    return logprobs;
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
  // says why). last_piece() and last_logprob() describe the token just returned.
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
    return token;
  }
  std::string last_piece() const { return last_piece_; }
  float last_logprob() const { return logprob_; }

  // Asks a running generate on this session to stop; callable from any thread.
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
#endif
};

}  // namespace photon_binding

#endif  // PHOTON_BINDING_HPP
