#include "engine/session_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/sessions.h"
#include "format/data_hash.h"
#include "session_generated.h"

namespace photon {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

constexpr size_t kHashBytes = 8;
// FlatBuffers cannot address more; refuse before building rather than fail inside the builder.
constexpr uint64_t kMaxStateBytes = (uint64_t{1} << 31) - (uint64_t{1} << 24);

// ---- saving -----------------------------------------------------------------------------------

uint64_t cache_bytes(const KvCache& c) {
  return uint64_t{2} * c.layers * c.len * c.kv_dim * sizeof(float);
}

Offset<fb::Cache> put_cache(FlatBufferBuilder& b, const KvCache& c) {
  std::vector<float> k(static_cast<size_t>(c.layers) * c.len * c.kv_dim), v(k.size());
  const size_t row = static_cast<size_t>(c.len) * c.kv_dim;
  for (int layer = 0; row > 0 && layer < c.layers; ++layer) {  // memcpy must not see null pointers
    const size_t from = static_cast<size_t>(layer) * c.capacity * c.kv_dim;
    std::memcpy(k.data() + layer * row, c.k.data() + from, row * sizeof(float));
    std::memcpy(v.data() + layer * row, c.v.data() + from, row * sizeof(float));
  }
  return fb::CreateCache(b, c.layers, c.kv_dim, c.capacity, c.len, b.CreateVector(k),
                         b.CreateVector(v));
}

Offset<fb::WindowState> put_window(FlatBufferBuilder& b, const Window& w) {
  const auto cache = put_cache(b, w.cache);
  const auto outputs = b.CreateVector(w.outputs.data(), static_cast<size_t>(w.n_outputs) * w.width);
  return fb::CreateWindowState(b, cache, outputs, w.n_outputs, w.consumed);
}

Offset<fb::Sampler> put_sampler(FlatBufferBuilder& b, const SamplerConfig& c) {
  return fb::CreateSampler(b, c.temperature, c.top_k, c.top_p, c.min_p, c.repetition_penalty,
                           c.repetition_last_n, c.seed, c.ignore_eos,
                           b.CreateVectorOfStrings(c.stop_strings));
}

// ---- restoring --------------------------------------------------------------------------------

[[noreturn]] void corrupt(const std::string& what) {
  fail(PHOTON_ERR_CORRUPT, "session state: " + what);
}

void expect(bool ok, const std::string& what) {
  if (!ok) corrupt(what);
}

void get_cache(const fb::Cache* in, KvCache& c, int64_t expected_len, const std::string& what) {
  expect(in != nullptr, what + " is missing");
  expect(in->layers() == c.layers && in->kv_dim() == c.kv_dim && in->capacity() == c.capacity,
         what + " has the wrong shape for this model and context");
  expect(in->len() >= 0 && in->len() <= c.capacity,
         what + " holds more positions than its capacity");
  expect(expected_len < 0 || in->len() == expected_len,
         what + " holds " + std::to_string(in->len()) + " positions, expected " +
             std::to_string(expected_len));
  const size_t row = static_cast<size_t>(in->len()) * c.kv_dim;
  const size_t n = row * c.layers;
  expect(in->k() && in->v() && in->k()->size() == n && in->v()->size() == n,
         what + " has the wrong size");
  for (int layer = 0; layer < c.layers; ++layer) {
    const size_t to = static_cast<size_t>(layer) * c.capacity * c.kv_dim;
    std::memcpy(c.k.data() + to, in->k()->data() + layer * row, row * sizeof(float));
    std::memcpy(c.v.data() + to, in->v()->data() + layer * row, row * sizeof(float));
  }
  c.len = in->len();
}

void get_window(const fb::WindowState* in, Window& w, const std::string& what) {
  expect(in != nullptr, what + " is missing");
  const int n = in->n_outputs(), consumed = in->consumed();
  expect(n >= 0 && n <= w.chunk_len, what + " has an invalid output count");
  expect(consumed >= 0 && consumed <= w.chunk_len && (n == 0 || consumed >= n - 1),
         what + " has an invalid child count");
  get_cache(in->cache(), w.cache, n == 0 ? 0 : w.prefix_len + n - 1, what + " cache");
  expect(in->outputs() && in->outputs()->size() == static_cast<size_t>(n) * w.width,
         what + " outputs have the wrong size");
  std::memcpy(w.outputs.data(), in->outputs()->data(), in->outputs()->size() * sizeof(float));
  w.n_outputs = n;
  w.consumed = consumed;
}

void get_floats(const flatbuffers::Vector<float>* in, std::vector<float>& out, size_t n,
                const std::string& what) {
  expect(in && in->size() == n, what + " has the wrong size");
  out.assign(in->begin(), in->end());
}

SamplerConfig get_sampler(const fb::Sampler* in) {
  expect(in != nullptr, "the sampler settings are missing");
  SamplerConfig c;
  c.temperature = in->temperature();
  c.top_k = in->top_k();
  c.top_p = in->top_p();
  c.min_p = in->min_p();
  c.repetition_penalty = in->repetition_penalty();
  c.repetition_last_n = in->repetition_last_n();
  c.seed = in->seed();
  c.ignore_eos = in->ignore_eos();
  expect(std::isfinite(c.temperature) && c.temperature >= 0.0f && c.top_k >= 0 && c.top_p > 0.0f &&
             c.top_p <= 1.0f && c.min_p >= 0.0f && c.min_p < 1.0f &&
             std::isfinite(c.repetition_penalty) && c.repetition_penalty >= 1.0f &&
             c.repetition_last_n >= 0,
         "the sampler settings are out of range");
  if (in->stop_strings())
    for (const auto* s : *in->stop_strings()) {
      expect(s && s->size() > 0, "a stop string is empty");
      c.stop_strings.push_back(s->str());
    }
  return c;
}

uint64_t tokenizer_hash(const Model& model) {
  const std::string& t = model.file().tokenizer_model();
  return hash_data_section(t.data(), t.size());
}

}  // namespace

std::vector<uint8_t> SessionCodec::save(const Session& session, const SamplerConfig& sampler,
                                        const DecodeState& decode) {
  const Model& model = session.model();
  const ModelConfig& c = model.config();
  uint64_t estimate = session.history().size() * sizeof(int32_t) + (uint64_t{1} << 16);
  FlatBufferBuilder b(1 << 16);
  fb::SessionKind kind = fb::SessionKind::Vanilla;
  int64_t consumed = 0;
  Offset<flatbuffers::Vector<Offset<fb::LevelState>>> levels;
  Offset<flatbuffers::Vector<float>> top_last, hidden;
  Offset<fb::Cache> top, cache;
  Offset<flatbuffers::Vector<Offset<fb::Plan>>> plans;
  Offset<flatbuffers::Vector<Offset<fb::WindowState>>> group;
  bool has_top = false, generated = false;
  int64_t group_start = 0;
  if (const auto* h = dynamic_cast<const HierGenSession*>(&session)) {
    kind = fb::SessionKind::HierGen;
    const HierState& st = h->state_;
    for (const HierLevel& lv : st.levels)
      estimate += cache_bytes(lv.encoder) + cache_bytes(lv.window.cache);
    check(estimate < kMaxStateBytes, PHOTON_ERR_UNSUPPORTED,
          "session state of about " + std::to_string(estimate) +
              " bytes exceeds the format's 2 GiB limit");
    std::vector<Offset<fb::LevelState>> ls;
    for (int l = 1; l <= c.num_levels(); ++l) {
      const HierLevel& lv = st.level(l);
      const auto enc = put_cache(b, lv.encoder);
      const auto pending = b.CreateVector(lv.pending.data(),
                                          static_cast<size_t>(lv.n_pending) * c.latent_dim(l - 1));
      const auto window = put_window(b, lv.window);
      ls.push_back(fb::CreateLevelState(b, enc, pending, lv.n_pending, window));
    }
    levels = b.CreateVector(ls);
    top_last = b.CreateVector(st.top_last);
    has_top = st.has_top;
    consumed = st.pos;
  } else if (const auto* r = dynamic_cast<const RecGenSession*>(&session)) {
    kind = fb::SessionKind::RecGen;
    estimate += cache_bytes(r->top_);
    check(estimate < kMaxStateBytes, PHOTON_ERR_UNSUPPORTED,
          "session state of about " + std::to_string(estimate) +
              " bytes exceeds the format's 2 GiB limit");
    top = put_cache(b, r->top_);
    top_last = b.CreateVector(r->top_last_);
    has_top = r->has_top_;
    std::vector<Offset<fb::Plan>> ps;
    for (const auto& p : r->plans_) ps.push_back(fb::CreatePlan(b, b.CreateVector(p)));
    plans = b.CreateVector(ps);
    std::vector<Offset<fb::WindowState>> ws;
    for (const Window& w : r->group_) ws.push_back(put_window(b, w));
    group = b.CreateVector(ws);
    group_start = r->group_start_;
    generated = r->generated_;
    consumed = static_cast<int64_t>(session.history().size());
  } else {
    const auto& v = dynamic_cast<const VanillaSession&>(session);
    estimate += cache_bytes(v.cache_);
    check(estimate < kMaxStateBytes, PHOTON_ERR_UNSUPPORTED,
          "session state of about " + std::to_string(estimate) +
              " bytes exceeds the format's 2 GiB limit");
    cache = put_cache(b, v.cache_);
    hidden = b.CreateVector(v.hidden_);
    consumed = v.cache_.len;
  }
  const std::string& pending = decode.utf8.pending();
  const auto state = fb::CreateSessionState(
      b, kSessionFormatVersion, model.file().data_hash(), b.CreateString(model.config_json()),
      tokenizer_hash(model), kind, session.context_length(), b.CreateVector(session.history()),
      consumed, put_sampler(b, sampler),
      b.CreateVector(reinterpret_cast<const uint8_t*>(pending.data()), pending.size()),
      b.CreateString(decode.recent), levels, top_last, has_top, top, plans, group, group_start,
      generated, cache, hidden);
  fb::FinishSizePrefixedSessionStateBuffer(b, state);
  std::vector<uint8_t> blob(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  const uint64_t hash = hash_data_section(blob.data(), blob.size());
  for (size_t i = 0; i < kHashBytes; ++i) blob.push_back(static_cast<uint8_t>(hash >> (8 * i)));
  return blob;
}

RestoredSession SessionCodec::restore(const Model& model, std::span<const uint8_t> blob) {
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
  expect(blob.size() == framed,
         std::to_string(blob.size() - framed) + " unexpected bytes after the state");
  uint64_t stored = 0;
  for (size_t i = 0; i < kHashBytes; ++i)
    stored |= static_cast<uint64_t>(blob[4 + size + i]) << (8 * i);
  expect(hash_data_section(blob.data(), 4 + size) == stored,
         "the integrity hash does not match (the state is damaged)");
  flatbuffers::Verifier verifier(blob.data(), 4 + size, 64, 1u << 22);
  expect(fb::VerifySizePrefixedSessionStateBuffer(verifier),
         "the FlatBuffers verifier rejected the state");
  const fb::SessionState* st = fb::GetSizePrefixedSessionState(blob.data());

  check(st->format_version() <= kSessionFormatVersion, PHOTON_ERR_UNSUPPORTED_VERSION,
        "session state: format version " + std::to_string(st->format_version()) +
            " is newer than this build's " + std::to_string(kSessionFormatVersion));
  expect(st->format_version() >= 1, "format version 0 is invalid");
  const bool same_model = st->model_hash() == model.file().data_hash() && st->config_json() &&
                          st->config_json()->str() == model.config_json() &&
                          st->tokenizer_hash() == tokenizer_hash(model);
  check(same_model, PHOTON_ERR_WRONG_MODEL,
        "session state: it was saved with a different model or tokenizer than " +
            model.file().path());

  const ModelConfig& c = model.config();
  const int L = c.arch == Arch::Vanilla ? 0 : c.num_levels();
  Mode mode = Mode::Vanilla;
  switch (st->kind()) {
    case fb::SessionKind::HierGen: mode = Mode::HierGen; break;
    case fb::SessionKind::RecGen: mode = Mode::RecGen; break;
    case fb::SessionKind::Vanilla: mode = Mode::Vanilla; break;
    default: corrupt("unknown session kind");
  }
  expect((mode == Mode::Vanilla) == (c.arch == Arch::Vanilla) && (mode != Mode::RecGen || L >= 2),
         "the session kind does not fit the model");
  const int context = st->context_length();
  expect(context >= 1 && context <= c.max_seq_len, "the context length is out of range");
  expect(st->tokens() != nullptr, "the token history is missing");
  const int64_t n = st->tokens()->size();
  expect(n <= context, "the history is longer than the context");
  for (int32_t t : *st->tokens())
    expect(t >= 0 && t < c.vocab_size, "a token id is outside the vocabulary");
  const int64_t consumed = st->consumed();
  expect(consumed >= 0 && consumed <= n && (mode != Mode::RecGen || consumed == n),
         "the consumed count is invalid");

  RestoredSession out;
  out.sampler = get_sampler(st->sampler());
  out.session = create_session(model, mode, context);
  Session& s = *out.session;
  s.history_.assign(st->tokens()->begin(), st->tokens()->end());
  if (auto* h = dynamic_cast<HierGenSession*>(&s)) {
    HierState& hs = h->state_;
    expect(st->levels() && st->levels()->size() == static_cast<size_t>(L),
           "the level states are missing");
    for (int l = 1; l <= L; ++l) {
      const fb::LevelState* in = st->levels()->Get(l - 1);
      HierLevel& lv = hs.level(l);
      const std::string name = "level " + std::to_string(l);
      expect(in != nullptr, name + " is missing");
      get_cache(in->encoder(), lv.encoder, consumed / c.block_tokens(l), name + " encoder cache");
      const int n_pending =
          static_cast<int>((consumed / c.block_tokens(l - 1)) % c.level(l).chunk_len);
      expect(in->n_pending() == n_pending, name + " has the wrong number of pending children");
      const size_t width = static_cast<size_t>(c.latent_dim(l - 1));
      expect(in->pending() && in->pending()->size() == n_pending * width,
             name + " pending children have the wrong size");
      std::memcpy(lv.pending.data(), in->pending()->data(), n_pending * width * sizeof(float));
      lv.n_pending = n_pending;
      get_window(in->window(), lv.window, name + " window");
      expect(consumed == 0 || lv.window.n_outputs == n_pending + 1,
             name + " window does not match its children");
    }
    get_floats(st->top_last(), hs.top_last, c.latent_dim(L), "the last top-level state");
    hs.has_top = st->has_top();
    expect(hs.has_top == (consumed >= c.block_tokens(L)),
           "the top-level flag does not match the history");
    hs.pos = consumed;
  } else if (auto* r = dynamic_cast<RecGenSession*>(&s)) {
    const int64_t b2 = c.block_tokens(2);
    r->group_start_ = st->group_start();
    expect(n >= 1 && r->group_start_ >= 0 && r->group_start_ % b2 == 0 && r->group_start_ <= n &&
               n <= r->group_start_ + b2,
           "the open unit does not match the history");
    get_cache(st->top(), r->top_, r->group_start_ / c.block_tokens(L), "the top-level cache");
    get_floats(st->top_last(), r->top_last_, c.latent_dim(L), "the last top-level state");
    r->has_top_ = st->has_top();
    expect(st->plans() && st->plans()->size() == static_cast<size_t>(L + 1),
           "the plans are missing");
    for (int l = 2; l <= L; ++l) {
      const fb::Plan* p = st->plans()->Get(l);
      expect(p != nullptr, "a plan is missing");
      get_floats(p->values(), r->plans_[l],
                 static_cast<size_t>(c.level(l).chunk_len) * c.latent_dim(l - 1),
                 "the plan of level " + std::to_string(l));
    }
    expect(st->group() && st->group()->size() == r->group_.size(),
           "the level-1 windows are missing");
    const int c1 = c.level(1).chunk_len;
    for (size_t j = 0; j < r->group_.size(); ++j) {
      const Window& w = r->group_[j];
      const std::string name = "level-1 window " + std::to_string(j);
      get_window(st->group()->Get(static_cast<flatbuffers::uoffset_t>(j)), r->group_[j], name);
      // Saving rolls every window back to the history; an unfinished one predicts from its last output.
      const int64_t start = r->group_start_ + static_cast<int64_t>(j) * c1;
      expect(w.consumed == std::clamp<int64_t>(n - start, 0, c1) &&
                 (w.n_outputs == std::min(w.consumed, c1 - 1) + 1 ||
                  (w.n_outputs == 0 && w.consumed == c1)),
             name + " does not match the history");
    }
    expect(r->has_top_ == (r->group_start_ >= c.block_tokens(L)),
           "the top-level flag does not match the history");
    r->generated_ = st->generated();
  } else {
    auto& v = dynamic_cast<VanillaSession&>(s);
    get_cache(st->cache(), v.cache_, consumed, "the KV cache");
    get_floats(st->hidden(), v.hidden_, c.dim, "the last hidden state");
  }
  if (st->utf8_pending()) {
    expect(st->utf8_pending()->size() < 4, "the held-back UTF-8 bytes are too many");
    out.decode.utf8.set_pending(
        std::string(st->utf8_pending()->begin(), st->utf8_pending()->end()));
  }
  if (st->recent_text()) out.decode.recent = st->recent_text()->str();
  return out;
}

}  // namespace photon
