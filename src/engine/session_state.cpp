#include "engine/session_state.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "engine/session_state_v2.h"
#include "format/data_hash.h"

namespace photon {

namespace {

constexpr size_t kHashBytes = 8;
// FlatBuffers cannot address more; refuse before building rather than fail inside the builder.
constexpr uint64_t kMaxStateBytes = (uint64_t{1} << 31) - (uint64_t{1} << 24);

[[noreturn]] void corrupt(const std::string& what) {
  fail(PHOTON_ERR_CORRUPT, "session state: " + what);
}

FbOffset<fb::Sampler> put_sampler(flatbuffers::FlatBufferBuilder& b, const SamplerConfig& c) {
  std::vector<int32_t> bias_tokens;
  std::vector<float> bias_values;
  for (const LogitBias& entry : c.logit_bias) {
    bias_tokens.push_back(entry.token);
    bias_values.push_back(entry.bias);
  }
  return fb::CreateSampler(
      b, c.temperature, c.top_k, c.top_p, c.min_p, c.repetition_penalty, c.repetition_last_n,
      c.seed, c.ignore_eos, b.CreateVectorOfStrings(c.stop_strings), c.presence_penalty,
      c.frequency_penalty, c.logit_bias.empty() ? 0 : b.CreateVector(bias_tokens),
      c.logit_bias.empty() ? 0 : b.CreateVector(bias_values), c.top_logprobs);
}

SamplerConfig get_sampler(const fb::Sampler* in, int32_t vocab) {
  StateReader::expect(in != nullptr, "the sampler settings are missing");
  SamplerConfig c;
  c.temperature = in->temperature();
  c.top_k = in->top_k();
  c.top_p = in->top_p();
  c.min_p = in->min_p();
  c.repetition_penalty = in->repetition_penalty();
  c.repetition_last_n = in->repetition_last_n();
  c.seed = in->seed();
  c.ignore_eos = in->ignore_eos();
  // Each setting is checked on its own, so that the message names the one that is wrong.
  const auto in_range = [](bool ok, const char* setting, double value, const char* range) {
    std::ostringstream message;
    message << "the sampler's " << setting << " is out of range: " << value << " (" << range << ")";
    StateReader::expect(ok, message.str());
  };
  in_range(std::isfinite(c.temperature) && c.temperature >= 0.0f, "temperature", c.temperature,
           "finite, >= 0");
  in_range(c.top_k >= 0, "top_k", c.top_k, ">= 0");
  in_range(c.top_p > 0.0f && c.top_p <= 1.0f, "top_p", c.top_p, "in (0, 1]");
  in_range(c.min_p >= 0.0f && c.min_p < 1.0f, "min_p", c.min_p, "in [0, 1)");
  in_range(std::isfinite(c.repetition_penalty) && c.repetition_penalty >= 1.0f,
           "repetition_penalty", c.repetition_penalty, "finite, >= 1");
  in_range(c.repetition_last_n >= 0, "repetition_last_n", c.repetition_last_n, ">= 0");
  if (in->stop_strings())
    for (const auto* s : *in->stop_strings()) {
      StateReader::expect(s && s->size() > 0, "a stop string is empty");
      c.stop_strings.push_back(s->str());
    }
  c.top_logprobs = in->top_logprobs();
  in_range(c.top_logprobs >= 0 && c.top_logprobs <= kMaxTopLogprobs, "top_logprobs", c.top_logprobs,
           ("0 to " + std::to_string(kMaxTopLogprobs)).c_str());
  c.presence_penalty = in->presence_penalty();
  c.frequency_penalty = in->frequency_penalty();
  in_range(std::isfinite(c.presence_penalty), "presence_penalty", c.presence_penalty, "finite");
  in_range(std::isfinite(c.frequency_penalty), "frequency_penalty", c.frequency_penalty, "finite");
  const auto* tokens = in->logit_bias_tokens();
  const auto* values = in->logit_bias_values();
  const size_t biased = tokens ? tokens->size() : 0;
  StateReader::expect(biased == (values ? values->size() : 0),
                      "the logit bias has a different number of tokens and values");
  for (size_t i = 0; i < biased; ++i) {
    const int32_t token = tokens->Get(static_cast<flatbuffers::uoffset_t>(i));
    const float bias = values->Get(static_cast<flatbuffers::uoffset_t>(i));
    StateReader::expect(
        token >= 0 && token < vocab,
        "the logit bias's token " + std::to_string(token) + " is outside the vocabulary");
    StateReader::expect(i == 0 || token > c.logit_bias.back().token,
                        "the logit bias's tokens are not ascending and distinct");
    in_range(std::isfinite(bias), "logit bias", bias, "finite");
    c.logit_bias.push_back({token, bias});
  }
  return c;
}

uint64_t tokenizer_hash(const Model& model) {
  const std::string& t = model.file().tokenizer_model();
  return hash_data_section(t.data(), t.size());
}

}  // namespace

// ---- writing ----------------------------------------------------------------------------------

void StateWriter::expect_bytes(uint64_t bytes) {
  estimate_ += bytes;
  check(estimate_ < kMaxStateBytes, PHOTON_ERR_UNSUPPORTED,
        "session state of about " + std::to_string(estimate_) +
            " bytes exceeds the format's 2 GiB limit");
}

namespace {

// The filled positions of a cache's keys (or values), [layers][len][kv_dim] in its storage type,
// downloaded straight into a vector of the builder.
template <typename T>
FbVector<T> cache_vector(flatbuffers::FlatBufferBuilder& b, Backend& backend, const KvCache& c,
                         bool keys) {
  const size_t row = static_cast<size_t>(c.len) * c.kv_dim;
  T* out = nullptr;
  const FbVector<T> vector = b.CreateUninitializedVector(row * c.layers, &out);
  for (int layer = 0; row > 0 && layer < c.layers; ++layer) {
    const Tensor& all = keys ? c.k_layer(layer) : c.v_layer(layer);
    backend.download(out + layer * row, all.slice(0, c.len));
  }
  return vector;
}

}  // namespace

FbOffset<fb::Cache> StateWriter::cache(const KvCache& c) {
  if (c.dtype == DType::F32) {
    const FbVector<float> k = cache_vector<float>(b_, backend_, c, true);
    const FbVector<float> v = cache_vector<float>(b_, backend_, c, false);
    return fb::CreateCache(b_, c.layers, c.kv_dim, c.capacity, c.len, k, v);
  }
  const FbVector<uint16_t> k = cache_vector<uint16_t>(b_, backend_, c, true);
  const FbVector<uint16_t> v = cache_vector<uint16_t>(b_, backend_, c, false);
  return fb::CreateCache(b_, c.layers, c.kv_dim, c.capacity, c.len, 0, 0, k, v);
}

FbOffset<fb::WindowState> StateWriter::window(const Window& w) {
  const auto cache_state = cache(w.cache);
  const auto outputs = floats(w.outputs.slice(0, w.n_outputs));
  return fb::CreateWindowState(b_, cache_state, outputs, w.n_outputs, w.consumed);
}

FbVector<float> StateWriter::floats(const Tensor& values) {
  std::vector<float> host(static_cast<size_t>(values.rows) * values.cols);
  if (!host.empty()) backend_.download(host.data(), values);
  return b_.CreateVector(host);
}

std::vector<uint8_t> save_session(Session& s, std::string_view who) {
  s.stream.require_usable(who);
  s.stream.require_nothing_held(who);
  s.discard_ahead();
  const Model& model = s.model;
  const uint64_t estimate = s.history.size() * sizeof(int32_t) + (uint64_t{1} << 16);
  StateWriter w(model.backend(), estimate,
                static_cast<size_t>(std::min(estimate + s.cache_bytes(), kMaxStateBytes)));
  s.runner->save(s, w);
  flatbuffers::FlatBufferBuilder& b = w.builder();
  const std::string& pending = s.stream.utf8.pending();
  const auto state = fb::CreateSessionState(
      b, s.sampler.beyond_format_3() ? kSessionFormatVersion : 3, model.file().data_hash(),
      b.CreateString(model.config_json()), tokenizer_hash(model), s.context,
      b.CreateVector(s.history), put_sampler(b, s.sampler),
      b.CreateVector(reinterpret_cast<const uint8_t*>(pending.data()), pending.size()),
      b.CreateString(s.stream.recent), static_cast<fb::KvType>(s.kv_type), w.mode_type(), w.mode());
  fb::FinishSizePrefixedSessionStateBuffer(b, state);
  std::vector<uint8_t> blob;
  blob.reserve(b.GetSize() + kHashBytes);
  blob.assign(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  const uint64_t hash = hash_data_section(blob.data(), blob.size());
  for (size_t i = 0; i < kHashBytes; ++i) blob.push_back(static_cast<uint8_t>(hash >> (8 * i)));
  return blob;
}

// ---- reading ----------------------------------------------------------------------------------

void StateReader::expect(bool ok, const std::string& what) {
  if (!ok) corrupt(what);
}

void StateReader::cache(const fb::Cache* in, KvCache& c, int64_t expected_len,
                        const std::string& what) const {
  expect(in != nullptr, what + " is missing");
  expect(in->layers() == c.layers && in->kv_dim() == c.kv_dim && in->capacity() == c.capacity,
         what + " has the wrong shape for this model and context");
  expect(in->len() >= 0 && in->len() <= c.capacity,
         what + " holds more positions than its capacity");
  expect(expected_len < 0 || in->len() == expected_len,
         what + " holds " + std::to_string(in->len()) + " positions, expected " +
             std::to_string(expected_len));
  c.reserve(backend_, in->len());
  const size_t row = static_cast<size_t>(in->len()) * c.kv_dim;
  const size_t n = row * c.layers;
  // The cache was allocated in the state's kv type: its stored bits go back unchanged, once
  // known to be finite (a NaN would spread to every later token's result).
  auto fill = [&](const auto* k, const auto* v) {
    expect(k && v && k->size() == n && v->size() == n, what + " has the wrong size");
    for (const auto& [values, name] : {std::pair{k, "key"}, std::pair{v, "value"}}) {
      const int64_t bad = first_non_finite(c.dtype, values->data(), n);
      if (bad >= 0)
        corrupt(what + " holds a NaN or infinite " + name + " (layer " +
                std::to_string(bad / static_cast<int64_t>(row)) + ", position " +
                std::to_string(bad % static_cast<int64_t>(row) / c.kv_dim) + ")");
    }
    for (int layer = 0; row > 0 && layer < c.layers; ++layer) {
      backend_.upload(c.k_layer(layer).slice(0, in->len()), k->data() + layer * row);
      backend_.upload(c.v_layer(layer).slice(0, in->len()), v->data() + layer * row);
    }
  };
  if (c.dtype == DType::F32)
    fill(in->k(), in->v());
  else
    fill(in->k16(), in->v16());
  c.len = in->len();
}

void StateReader::window(const fb::WindowState* in, Window& w, const std::string& what) const {
  expect(in != nullptr, what + " is missing");
  const int n = in->n_outputs(), consumed = in->consumed();
  expect(n >= 0 && n <= w.chunk_len, what + " has an invalid output count");
  expect(consumed >= 0 && consumed <= w.chunk_len && (n == 0 || consumed >= n - 1),
         what + " has an invalid child count");
  cache(in->cache(), w.cache, n == 0 ? 0 : w.prefix_len + n - 1, what + " cache");
  floats(in->outputs(), w.outputs.slice(0, n), what + " outputs");
  w.n_outputs = n;
  w.consumed = consumed;
}

void StateReader::floats(const flatbuffers::Vector<float>* in, const Tensor& dst,
                         const std::string& what) const {
  expect(in && in->size() == static_cast<size_t>(dst.rows) * dst.cols, what + ": wrong size");
  const int64_t bad = first_non_finite(DType::F32, in->data(), in->size());
  if (bad >= 0)
    corrupt(what + ": a NaN or infinite value (row " + std::to_string(bad / dst.cols) + ")");
  if (in->size() > 0) backend_.upload(dst, in->data());
}

namespace {

// The mode whose table a version 3 state holds.
Mode mode_of(fb::ModeState type) {
  switch (type) {
    case fb::ModeState::HierGenState: return Mode::HierGen;
    case fb::ModeState::RecGenState: return Mode::RecGen;
    case fb::ModeState::VanillaState: return Mode::Vanilla;
    case fb::ModeState::NONE: corrupt("the session kind is missing");
  }
  corrupt("unknown session kind " + std::to_string(static_cast<int>(type)));
}

}  // namespace

std::unique_ptr<Session> restore_session(const Model& model, std::span<const uint8_t> blob) {
  using R = StateReader;
  // Framing: [u32 size][FlatBuffer: root offset, "PHSS", ...][u64 hash].
  check(blob.size() >= 12, PHOTON_ERR_TRUNCATED,
        "session state: " + std::to_string(blob.size()) +
            " bytes is too short to be a session state");
  check(flatbuffers::BufferHasIdentifier(blob.data() + 4, fb::SessionStateIdentifier()),
        PHOTON_ERR_BAD_IDENTIFIER,
        "session state: not a PHOTON session state (identifier is not \"PHSS\")");
  uint32_t size = 0;
  std::memcpy(&size, blob.data(), 4);
  const uint64_t framed = uint64_t{4} + size + kHashBytes;
  check(blob.size() >= framed, PHOTON_ERR_TRUNCATED,
        "session state: truncated (" + std::to_string(blob.size()) + " of " +
            std::to_string(framed) + " bytes)");
  R::expect(blob.size() == framed,
            std::to_string(blob.size() - framed) + " unexpected bytes after the state");
  uint64_t stored = 0;
  for (size_t i = 0; i < kHashBytes; ++i)
    stored |= static_cast<uint64_t>(blob[4 + size + i]) << (8 * i);
  R::expect(hash_data_section(blob.data(), 4 + size) == stored,
            "the integrity hash does not match (the state is damaged)");
  // The common fields keep their ids in every version, so this table reads them in all.
  const std::span<const uint8_t> buffer = blob.first(4 + size);
  flatbuffers::Verifier verifier(buffer.data(), buffer.size(), 64, 1u << 22);
  R::expect(fb::VerifySizePrefixedSessionStateBuffer(verifier),
            "the FlatBuffers verifier rejected the state");
  const fb::SessionState* st = fb::GetSizePrefixedSessionState(buffer.data());

  check(st->format_version() <= kSessionFormatVersion, PHOTON_ERR_UNSUPPORTED_VERSION,
        "session state: format version " + std::to_string(st->format_version()) +
            " is newer than this build's " + std::to_string(kSessionFormatVersion));
  R::expect(st->format_version() >= 1, "format version 0 is invalid");
  const bool same_model = st->model_hash() == model.file().data_hash() && st->config_json() &&
                          st->config_json()->str() == model.config_json() &&
                          st->tokenizer_hash() == tokenizer_hash(model);
  check(same_model, PHOTON_ERR_WRONG_MODEL,
        "session state: it was saved with a different model or tokenizer than " +
            model.file().path());

  const ModelConfig& c = model.config();
  const int L = c.arch == Arch::Vanilla ? 0 : c.num_levels();
  const fb::v2::SessionState* v2 = st->format_version() <= 2 ? v2_state(buffer) : nullptr;
  const Mode mode = v2 ? v2_mode(*v2) : mode_of(st->mode_type());
  R::expect(
      (mode == Mode::Vanilla) == (c.arch == Arch::Vanilla) && (mode != Mode::RecGen || L >= 2),
      "the session kind does not fit the model");
  const int context = st->context_length();
  R::expect(context >= 1 && context <= c.max_seq_len, "the context length is out of range");
  R::expect(st->tokens() != nullptr, "the token history is missing");
  const int64_t n = st->tokens()->size();
  R::expect(n <= context, "the history is longer than the context");
  for (int32_t t : *st->tokens())
    R::expect(t >= 0 && t < c.vocab_size, "a token id is outside the vocabulary");

  const fb::KvType kv = st->kv_type();
  R::expect(kv == fb::KvType::F32 || kv == fb::KvType::BF16 || kv == fb::KvType::F16,
            "unknown KV cache type " + std::to_string(static_cast<int>(kv)));
  R::expect(kv == fb::KvType::F32 || st->format_version() >= 2,
            "16-bit KV caches in a format version 1 state");
  std::unique_ptr<Session> s = Session::create(
      model, mode, context, get_sampler(st->sampler(), c.vocab_size), static_cast<DType>(kv));
  s->history.assign(st->tokens()->begin(), st->tokens()->end());
  if (v2) {
    const V2ModeTable table(*v2, mode, c);
    s->runner->restore(*s, StateReader(model.backend(), table.type(), table.table()));
  } else {
    s->runner->restore(*s, StateReader(model.backend(), st->mode_type(), st->mode()));
  }
  if (st->utf8_pending()) {
    R::expect(st->utf8_pending()->size() < 4, "the held-back UTF-8 bytes are too many");
    s->stream.utf8.set_pending(std::string(st->utf8_pending()->begin(), st->utf8_pending()->end()));
  }
  if (st->recent_text()) s->stream.recent = st->recent_text()->str();
  return s;
}

}  // namespace photon
