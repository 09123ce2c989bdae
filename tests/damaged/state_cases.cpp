// The damaged session states of damage_cases.h. Every field of the current format
// (schemas/session.fbs) is damaged in states this build saves; every field of format versions 1
// and 2 (schemas/session_v2.fbs; cases named "v2.Table.field") in states that the release of those
// versions saved (tests/states/saved/damage_*.phss), which must still be refused as strictly, with
// the same messages, as when they were current.
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>

#include "core/dtype.h"
#include "damage_cases.h"
#include "format/data_hash.h"
#include "session_obj_generated.h"
#include "session_v2_obj_generated.h"
#include "tiny_models.h"

namespace photon::hardening {

namespace {

namespace fbo = photon::fbobj;
namespace fbo2 = photon::fbobj::v2;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

constexpr size_t kHashBytes = 8;  // the integrity hash after a session state
constexpr photon_status kCorrupt = PHOTON_ERR_CORRUPT;

void put_le32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}

// ---- packing ----------------------------------------------------------------------------------
// The object API drops empty vectors, but a state's caches, windows and plans must be present
// even when empty; so these tables are packed here, keeping every vector they hold. Versions 1 and
// 2 have tables of the same fields in a namespace of their own.

template <typename T, typename Pack>
auto pack_all(FlatBufferBuilder& b, const std::vector<std::unique_ptr<T>>& items, Pack pack) {
  std::vector<decltype(pack(b, items[0].get()))> offsets;
  for (const auto& item : items) offsets.push_back(pack(b, item.get()));
  return offsets.empty() ? 0 : b.CreateVector(offsets);
}

Offset<fbo::Cache> pack(FlatBufferBuilder& b, const fbo::CacheT* c) {
  if (c == nullptr) return 0;
  const auto k = b.CreateVector(c->k), v = b.CreateVector(c->v);
  const auto k16 = b.CreateVector(c->k16), v16 = b.CreateVector(c->v16);
  return fbo::CreateCache(b, c->layers, c->kv_dim, c->capacity, c->len, k, v, k16, v16);
}

Offset<fbo2::Cache> pack(FlatBufferBuilder& b, const fbo2::CacheT* c) {
  if (c == nullptr) return 0;
  const auto k = b.CreateVector(c->k), v = b.CreateVector(c->v);
  const auto k16 = b.CreateVector(c->k16), v16 = b.CreateVector(c->v16);
  return fbo2::CreateCache(b, c->layers, c->kv_dim, c->capacity, c->len, k, v, k16, v16);
}

Offset<fbo::WindowState> pack(FlatBufferBuilder& b, const fbo::WindowStateT* w) {
  if (w == nullptr) return 0;
  const auto cache = pack(b, w->cache.get());
  const auto outputs = b.CreateVector(w->outputs);
  return fbo::CreateWindowState(b, cache, outputs, w->n_outputs, w->consumed);
}

Offset<fbo2::WindowState> pack(FlatBufferBuilder& b, const fbo2::WindowStateT* w) {
  if (w == nullptr) return 0;
  const auto cache = pack(b, w->cache.get());
  const auto outputs = b.CreateVector(w->outputs);
  return fbo2::CreateWindowState(b, cache, outputs, w->n_outputs, w->consumed);
}

Offset<fbo::LevelState> pack(FlatBufferBuilder& b, const fbo::LevelStateT* l) {
  const auto encoder = pack(b, l->encoder.get());
  const auto pending = b.CreateVector(l->pending);
  const auto window = pack(b, l->window.get());
  return fbo::CreateLevelState(b, encoder, pending, l->n_pending, window);
}

Offset<fbo2::LevelState> pack(FlatBufferBuilder& b, const fbo2::LevelStateT* l) {
  const auto encoder = pack(b, l->encoder.get());
  const auto pending = b.CreateVector(l->pending);
  const auto window = pack(b, l->window.get());
  return fbo2::CreateLevelState(b, encoder, pending, l->n_pending, window);
}

Offset<fbo::Plan> pack(FlatBufferBuilder& b, const fbo::PlanT* p) {
  return fbo::CreatePlan(b, b.CreateVector(p->values));
}

Offset<fbo2::Plan> pack(FlatBufferBuilder& b, const fbo2::PlanT* p) {
  return fbo2::CreatePlan(b, b.CreateVector(p->values));
}

template <typename T>
auto pack_each(FlatBufferBuilder& b, const std::vector<std::unique_ptr<T>>& items) {
  return pack_all(b, items, [](FlatBufferBuilder& fbb, const T* item) { return pack(fbb, item); });
}

// The mode's table, which may be absent while its type is set.
Offset<void> pack_mode(FlatBufferBuilder& b, const fbo::ModeStateUnion& mode) {
  if (const fbo::HierGenStateT* h = mode.AsHierGenState()) {
    const auto levels = pack_each(b, h->levels);
    const auto top_last = b.CreateVector(h->top_last);
    return fbo::CreateHierGenState(b, h->consumed, levels, top_last).Union();
  }
  if (const fbo::RecGenStateT* r = mode.AsRecGenState()) {
    const auto top = pack(b, r->top.get());
    const auto top_last = b.CreateVector(r->top_last);
    const auto plans = pack_each(b, r->plans);
    const auto group = pack_each(b, r->group);
    return fbo::CreateRecGenState(b, top, top_last, plans, group, r->group_start, r->generated)
        .Union();
  }
  if (const fbo::VanillaStateT* v = mode.AsVanillaState()) {
    const auto cache = pack(b, v->cache.get());
    const auto hidden = b.CreateVector(v->hidden);
    return fbo::CreateVanillaState(b, cache, hidden).Union();
  }
  return 0;
}

// The vectors and strings that every version has.
struct CommonFields {
  Offset<flatbuffers::String> config_json;
  Offset<flatbuffers::Vector<int32_t>> tokens;
  Offset<flatbuffers::Vector<uint8_t>> utf8_pending;
  Offset<flatbuffers::String> recent_text;
};

template <typename State>
CommonFields pack_common(FlatBufferBuilder& b, const State& st) {
  return {st.config_json.empty() ? 0 : b.CreateString(st.config_json),
          st.tokens.empty() ? 0 : b.CreateVector(st.tokens), b.CreateVector(st.utf8_pending),
          b.CreateString(st.recent_text)};
}

std::vector<uint8_t> framed(FlatBufferBuilder& b) {
  std::vector<uint8_t> state(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  state.resize(state.size() + kHashBytes);
  rehash_state(state);
  return state;
}

std::vector<uint8_t> pack_state(const fbo::SessionStateT& st) {
  FlatBufferBuilder b;
  const auto mode = pack_mode(b, st.mode);
  const auto common = pack_common(b, st);
  const auto sampler = st.sampler ? fbo::Sampler::Pack(b, st.sampler.get()) : 0;
  const auto root = fbo::CreateSessionState(b, st.format_version, st.model_hash, common.config_json,
                                            st.tokenizer_hash, st.context_length, common.tokens,
                                            sampler, common.utf8_pending, common.recent_text,
                                            st.kv_type, st.mode.type, mode);
  fbo::FinishSizePrefixedSessionStateBuffer(b, root);
  return framed(b);
}

std::vector<uint8_t> pack_state(const fbo2::SessionStateT& st) {
  FlatBufferBuilder b;
  const auto levels = pack_each(b, st.levels);
  const auto plans = pack_each(b, st.plans);
  const auto group = pack_each(b, st.group);
  const auto common = pack_common(b, st);
  const auto sampler = st.sampler ? fbo2::Sampler::Pack(b, st.sampler.get()) : 0;
  const auto top_last = b.CreateVector(st.top_last);
  const auto top = pack(b, st.top.get());
  const auto cache = pack(b, st.cache.get());
  const auto hidden = b.CreateVector(st.hidden);
  const auto root = fbo2::CreateSessionState(
      b, st.format_version, st.model_hash, common.config_json, st.tokenizer_hash, st.kind,
      st.context_length, common.tokens, st.consumed, sampler, common.utf8_pending,
      common.recent_text, levels, top_last, st.has_top, top, plans, group, st.group_start,
      st.generated, cache, hidden, st.kv_type);
  fbo2::FinishSizePrefixedSessionStateBuffer(b, root);
  return framed(b);
}

fbo::SessionStateT unpack_state(const std::vector<uint8_t>& state) {
  fbo::SessionStateT st;
  fbo::GetSizePrefixedSessionState(state.data())->UnPackTo(&st);
  return st;
}

template <typename State>
State unpack(const std::vector<uint8_t>& state);
template <>
fbo::SessionStateT unpack(const std::vector<uint8_t>& state) {
  return unpack_state(state);
}
template <>
fbo2::SessionStateT unpack(const std::vector<uint8_t>& state) {
  fbo2::SessionStateT st;
  fbo2::GetSizePrefixedSessionState(state.data())->UnPackTo(&st);
  return st;
}

// ---- the cases --------------------------------------------------------------------------------

enum Base { kHier, kRec, kVanilla };

// Damaged copies of the bases of one format version (State: its root table's object type).
template <typename State>
class StateCases {
 public:
  StateCases(const StateBases& bases, std::string prefix, std::vector<DamageCase>& cases)
      : bases_(bases), prefix_(std::move(prefix)), cases_(cases) {}

  // A case of field "Table.field" (named with this version's prefix).
  void edit(Base base, const std::string& field, const std::string& damage,
            const std::function<void(State&)>& change, photon_status status,
            const std::string& message) {
    State st = unpack<State>(bytes_of(base));
    change(st);
    cases_.push_back({prefix_ + field, damage, pack_state(st), status, message, model_of(base)});
  }
  void raw(Base base, const std::string& field, const std::string& damage,
           const std::function<void(std::vector<uint8_t>&)>& change, photon_status status,
           const std::string& message) {
    std::vector<uint8_t> bytes = bytes_of(base);
    change(bytes);
    cases_.push_back({field, damage, std::move(bytes), status, message, model_of(base)});
  }

 private:
  const std::vector<uint8_t>& bytes_of(Base base) const {
    return base == kHier ? bases_.hiergen : base == kRec ? bases_.recgen : bases_.vanilla;
  }
  static int model_of(Base base) { return base == kVanilla ? kVanillaModel : kPhotonModel; }
  const StateBases& bases_;
  const std::string prefix_;
  std::vector<DamageCase>& cases_;
};

using S = fbo::SessionStateT;
using S2 = fbo2::SessionStateT;

// The framing is the same in every version.
void add_framing_cases(StateCases<S>& s) {
  s.raw(
      kHier, "file.size", "empty", [](auto& b) { b.clear(); }, PHOTON_ERR_TRUNCATED,
      "is too short to be a session state");
  s.raw(
      kHier, "file.identifier", "PHSX instead of PHSS", [](auto& b) { b[11] = 'X'; },
      PHOTON_ERR_BAD_IDENTIFIER, "not a PHOTON session state");
  s.raw(
      kHier, "file.size", "the last byte cut off", [](auto& b) { b.pop_back(); },
      PHOTON_ERR_TRUNCATED, "truncated (");
  s.raw(
      kHier, "file.size", "a byte appended", [](auto& b) { b.push_back(0); }, kCorrupt,
      "1 unexpected bytes after the state");
  s.raw(
      kHier, "file.hash", "a byte of the state changed, hash kept",
      [](auto& b) { b[b.size() / 2] ^= 0x10; }, kCorrupt, "the integrity hash does not match");
  s.raw(
      kHier, "file.root_offset", "points past the state (hash updated)",
      [](auto& b) {
        put_le32(b.data() + 4, 0x7ffffff0);
        rehash_state(b);
      },
      kCorrupt, "the FlatBuffers verifier rejected the state");
}

// The message that refuses a sampler setting out of its range.
std::string range(const char* setting) {
  return std::string("the sampler's ") + setting + " is out of range";
}

// The fields every version has.
template <typename State>
void add_common_cases(StateCases<State>& s) {
  s.edit(
      kHier, "SessionState.format_version", "0", [](State& st) { st.format_version = 0; }, kCorrupt,
      "format version 0 is invalid");
  s.edit(
      kHier, "SessionState.format_version", "5 (newer)", [](State& st) { st.format_version = 5; },
      PHOTON_ERR_UNSUPPORTED_VERSION, "format version 5 is newer");
  const std::string other_model = "it was saved with a different model or tokenizer";
  s.edit(
      kHier, "SessionState.model_hash", "changed", [](State& st) { st.model_hash ^= 1; },
      PHOTON_ERR_WRONG_MODEL, other_model);
  s.edit(
      kHier, "SessionState.config_json", "absent", [](State& st) { st.config_json.clear(); },
      PHOTON_ERR_WRONG_MODEL, other_model);
  s.edit(
      kHier, "SessionState.tokenizer_hash", "changed", [](State& st) { st.tokenizer_hash ^= 1; },
      PHOTON_ERR_WRONG_MODEL, other_model);
  s.edit(
      kHier, "SessionState.context_length", "0", [](State& st) { st.context_length = 0; }, kCorrupt,
      "the context length is out of range");
  s.edit(
      kHier, "SessionState.context_length", "above the model's",
      [](State& st) { st.context_length = 65; }, kCorrupt, "the context length is out of range");
  s.edit(
      kHier, "SessionState.tokens", "absent", [](State& st) { st.tokens.clear(); }, kCorrupt,
      "the token history is missing");
  s.edit(
      kHier, "SessionState.tokens", "longer than the context",
      [](State& st) { st.tokens.resize(static_cast<size_t>(st.context_length) + 1, 5); }, kCorrupt,
      "the history is longer than the context");
  s.edit(
      kHier, "SessionState.tokens", "an id equal to vocab_size",
      [](State& st) { st.tokens[1] = kTinyVocab; }, kCorrupt,
      "a token id is outside the vocabulary");
  s.edit(
      kHier, "SessionState.tokens", "a negative id", [](State& st) { st.tokens[0] = -1; }, kCorrupt,
      "a token id is outside the vocabulary");
  s.edit(
      kHier, "SessionState.sampler", "absent", [](State& st) { st.sampler.reset(); }, kCorrupt,
      "the sampler settings are missing");
  s.edit(
      kHier, "Sampler.temperature", "-1", [](State& st) { st.sampler->temperature = -1; }, kCorrupt,
      range("temperature"));
  s.edit(
      kHier, "Sampler.temperature", "NaN",
      [](State& st) { st.sampler->temperature = std::nanf(""); }, kCorrupt, range("temperature"));
  s.edit(
      kHier, "Sampler.top_k", "-1", [](State& st) { st.sampler->top_k = -1; }, kCorrupt,
      range("top_k"));
  s.edit(
      kHier, "Sampler.top_p", "0", [](State& st) { st.sampler->top_p = 0; }, kCorrupt,
      range("top_p"));
  s.edit(
      kHier, "Sampler.top_p", "1.5", [](State& st) { st.sampler->top_p = 1.5f; }, kCorrupt,
      range("top_p"));
  s.edit(
      kHier, "Sampler.min_p", "1", [](State& st) { st.sampler->min_p = 1; }, kCorrupt,
      range("min_p"));
  s.edit(
      kHier, "Sampler.repetition_penalty", "0.5",
      [](State& st) { st.sampler->repetition_penalty = 0.5f; }, kCorrupt,
      range("repetition_penalty"));
  s.edit(
      kHier, "Sampler.repetition_penalty", "infinite",
      [](State& st) { st.sampler->repetition_penalty = INFINITY; }, kCorrupt,
      range("repetition_penalty"));
  s.edit(
      kHier, "Sampler.repetition_last_n", "-1",
      [](State& st) { st.sampler->repetition_last_n = -1; }, kCorrupt, range("repetition_last_n"));
  s.edit(
      kHier, "Sampler.seed", "any value", [](State& st) { st.sampler->seed = ~uint64_t{0}; },
      PHOTON_OK, "");
  s.edit(
      kHier, "Sampler.ignore_eos", "flipped",
      [](State& st) { st.sampler->ignore_eos = !st.sampler->ignore_eos; }, PHOTON_OK, "");
  s.edit(
      kHier, "Sampler.stop_strings", "an empty string",
      [](State& st) {
        st.sampler->stop_strings = {"x", ""};
      },
      kCorrupt, "a stop string is empty");
  s.edit(
      kHier, "SessionState.utf8_pending", "4 bytes",
      [](State& st) {
        st.utf8_pending = {0xf0, 0x9f, 0x98, 0x80};
      },
      kCorrupt, "the held-back UTF-8 bytes are too many");
  s.edit(
      kHier, "SessionState.utf8_pending", "3 bytes that start no character",
      [](State& st) {
        st.utf8_pending = {0x41, 0xff, 0x80};
      },
      PHOTON_OK, "");
  // Only matched against stop strings; any text is a text the session could have produced.
  s.edit(
      kHier, "SessionState.recent_text", "any bytes",
      [](State& st) { st.recent_text = "\xff\x00z"; }, PHOTON_OK, "");
}

// HierGen's fields: `part` gives the table that holds them (named `table`).
template <typename State, typename Part>
void add_hiergen_cases(StateCases<State>& s, const std::string& table, Part part) {
  s.edit(
      kHier, table + ".consumed", "-1", [part](State& st) { part(st).consumed = -1; }, kCorrupt,
      "the consumed count is invalid");
  s.edit(
      kHier, table + ".consumed", "more than the history",
      [part](State& st) { part(st).consumed = static_cast<int64_t>(st.tokens.size()) + 1; },
      kCorrupt, "the consumed count is invalid");
  s.edit(
      kHier, table + ".levels", "one level missing",
      [part](State& st) { part(st).levels.pop_back(); }, kCorrupt, "the level states are missing");
  s.edit(
      kHier, "LevelState.encoder", "absent",
      [part](State& st) { part(st).levels[0]->encoder.reset(); }, kCorrupt,
      "level 1 encoder cache is missing");
  s.edit(
      kHier, "Cache.layers", "2", [part](State& st) { part(st).levels[0]->encoder->layers = 2; },
      kCorrupt, "level 1 encoder cache has the wrong shape");
  s.edit(
      kHier, "Cache.kv_dim", "+1", [part](State& st) { part(st).levels[1]->encoder->kv_dim += 1; },
      kCorrupt, "level 2 encoder cache has the wrong shape");
  s.edit(
      kHier, "Cache.capacity", "+1",
      [part](State& st) { part(st).levels[0]->encoder->capacity += 1; }, kCorrupt,
      "level 1 encoder cache has the wrong shape");
  s.edit(
      kHier, "Cache.len", "above the capacity",
      [part](State& st) {
        auto& encoder = *part(st).levels[0]->encoder;
        encoder.len = encoder.capacity + 1;
      },
      kCorrupt, "level 1 encoder cache holds more positions than its capacity");
  s.edit(
      kHier, "Cache.len", "one more than the history needs",
      [part](State& st) { part(st).levels[0]->encoder->len += 1; }, kCorrupt,
      "positions, expected");
  s.edit(
      kHier, "Cache.k", "one value too many",
      [part](State& st) { part(st).levels[0]->encoder->k.push_back(0); }, kCorrupt,
      "level 1 encoder cache has the wrong size");
  s.edit(
      kHier, "Cache.v", "a single value",
      [part](State& st) { part(st).levels[1]->encoder->v.assign(1, 0); }, kCorrupt,
      "level 2 encoder cache has the wrong size");
  s.edit(
      kHier, "LevelState.pending", "one value too many",
      [part](State& st) { part(st).levels[0]->pending.push_back(0); }, kCorrupt,
      "level 1 pending children: wrong size");
  s.edit(
      kHier, "LevelState.n_pending", "+1",
      [part](State& st) { part(st).levels[1]->n_pending += 1; }, kCorrupt,
      "level 2 has the wrong number of pending children");
  s.edit(
      kHier, "LevelState.window", "absent",
      [part](State& st) { part(st).levels[1]->window.reset(); }, kCorrupt,
      "level 2 window is missing");
  s.edit(
      kHier, "WindowState.n_outputs", "above chunk_len",
      [part](State& st) { part(st).levels[0]->window->n_outputs = 3; }, kCorrupt,
      "level 1 window has an invalid output count");
  s.edit(
      kHier, "WindowState.consumed", "-1",
      [part](State& st) { part(st).levels[0]->window->consumed = -1; }, kCorrupt,
      "level 1 window has an invalid child count");
  s.edit(
      kHier, "WindowState.cache", "absent",
      [part](State& st) { part(st).levels[0]->window->cache.reset(); }, kCorrupt,
      "level 1 window cache is missing");
  s.edit(
      kHier, "WindowState.outputs", "one value too many",
      [part](State& st) { part(st).levels[1]->window->outputs.push_back(0); }, kCorrupt,
      "level 2 window outputs: wrong size");
  s.edit(
      kHier, table + ".top_last", "one value too many",
      [part](State& st) { part(st).top_last.push_back(0); }, kCorrupt,
      "the last top-level state: wrong size");
  s.edit(
      kHier, "Cache.k", "a NaN", [part](State& st) { part(st).levels[0]->encoder->k.back() = NAN; },
      kCorrupt, "level 1 encoder cache holds a NaN or infinite key (layer");
  s.edit(
      kHier, table + ".top_last", "an infinity",
      [part](State& st) { part(st).top_last.back() = -INFINITY; }, kCorrupt,
      "the last top-level state: a NaN or infinite value (row 0)");
}

// RecGen's fields: `part` gives the table that holds them (named `table`), whose plans of levels
// 2 .. L start at index first_plan.
template <typename State, typename Part>
void add_recgen_cases(StateCases<State>& s, const std::string& table, size_t first_plan,
                      Part part) {
  s.edit(
      kRec, table + ".group_start", "not on a level-2 boundary",
      [part](State& st) { part(st).group_start += 1; }, kCorrupt,
      "the open unit does not match the history");
  s.edit(
      kRec, table + ".group_start", "past the history",
      [part](State& st) { part(st).group_start += 4; }, kCorrupt,
      "the open unit does not match the history");
  s.edit(
      kRec, table + ".top", "absent", [part](State& st) { part(st).top.reset(); }, kCorrupt,
      "the top-level cache is missing");
  s.edit(
      kRec, "Cache.len", "one more than the history needs (RecGen top)",
      [part](State& st) { part(st).top->len += 1; }, kCorrupt, "the top-level cache holds");
  s.edit(
      kRec, table + ".top_last", "one value too many (RecGen)",
      [part](State& st) { part(st).top_last.push_back(0); }, kCorrupt,
      "the last top-level state: wrong size");
  s.edit(
      kRec, table + ".plans", "one plan missing", [part](State& st) { part(st).plans.pop_back(); },
      kCorrupt, "the plans are missing");
  s.edit(
      kRec, "Plan.values", "one value too many",
      [part, first_plan](State& st) { part(st).plans[first_plan]->values.push_back(0); }, kCorrupt,
      "the plan of level 2: wrong size");
  s.edit(
      kRec, table + ".group", "one window missing",
      [part](State& st) { part(st).group.pop_back(); }, kCorrupt,
      "the level-1 windows are missing");
  s.edit(
      kRec, "WindowState.n_outputs", "-1 (RecGen)",
      [part](State& st) { part(st).group[0]->n_outputs = -1; }, kCorrupt,
      "level-1 window 0 has an invalid output count");
  s.edit(
      kRec, "WindowState.consumed", "above chunk_len (RecGen)",
      [part](State& st) { part(st).group[1]->consumed = 3; }, kCorrupt,
      "level-1 window 1 has an invalid child count");
  s.edit(
      kRec, "WindowState.n_outputs", "0 for a window that is open (RecGen)",
      [part](State& st) {
        auto& w = *part(st).group[1];
        w.n_outputs = w.consumed = 0;
        w.outputs.clear();
        w.cache->len = 0;
        w.cache->k.clear();
        w.cache->v.clear();
      },
      kCorrupt, "level-1 window 1 does not match the history");
  s.edit(
      kRec, "WindowState.outputs", "absent (RecGen)",
      [part](State& st) { part(st).group[0]->outputs.clear(); }, kCorrupt,
      "level-1 window 0 outputs: wrong size");
  // Whether the session has generated only decides whether more prompt is refused.
  s.edit(
      kRec, table + ".generated", "flipped",
      [part](State& st) { part(st).generated = !part(st).generated; }, PHOTON_OK, "");
}

// Vanilla's fields: `part` gives the table that holds them (named `table`).
template <typename State, typename Part>
void add_vanilla_cases(StateCases<State>& s, const std::string& table, Part part) {
  s.edit(
      kVanilla, table + ".cache", "absent", [part](State& st) { part(st).cache.reset(); }, kCorrupt,
      "the KV cache is missing");
  s.edit(
      kVanilla, table + ".hidden", "one value too many",
      [part](State& st) { part(st).hidden.push_back(0); }, kCorrupt,
      "the last hidden state: wrong size");
}

// A cache's K and V in 16 bits, as a session with bf16 KV caches saves them.
template <typename Cache>
void narrow(Cache* c) {
  if (c == nullptr) return;
  for (auto [from, to] : {std::pair{&c->k, &c->k16}, std::pair{&c->v, &c->v16}}) {
    to->resize(from->size());
    convert_from_f32(DType::BF16, from->data(), to->data(), from->size());
    from->clear();
  }
}

// The cases of the KV cache type.
void add_kv_type_cases(StateCases<S>& s) {
  auto to_bf16 = [](S& st) {
    if (fbo::HierGenStateT* h = st.mode.AsHierGenState())
      for (auto& level : h->levels) {
        narrow(level->encoder.get());
        if (level->window) narrow(level->window->cache.get());
      }
    if (fbo::RecGenStateT* r = st.mode.AsRecGenState()) {
      narrow(r->top.get());
      for (auto& window : r->group) narrow(window->cache.get());
    }
    if (fbo::VanillaStateT* v = st.mode.AsVanillaState()) narrow(v->cache.get());
    st.kv_type = fbo::KvType::BF16;
  };
  s.edit(kHier, "SessionState.kv_type", "bf16, every cache in 16 bits", to_bf16, PHOTON_OK, "");
  s.edit(kRec, "SessionState.kv_type", "bf16 (RecGen)", to_bf16, PHOTON_OK, "");
  s.edit(kVanilla, "SessionState.kv_type", "bf16 (vanilla)", to_bf16, PHOTON_OK, "");
  s.edit(
      kHier, "SessionState.kv_type", "9",
      [to_bf16](S& st) {
        to_bf16(st);
        st.kv_type = static_cast<fbo::KvType>(9);
      },
      kCorrupt, "unknown KV cache type 9");
  s.edit(
      kHier, "SessionState.kv_type", "bf16 over f32 caches",
      [](S& st) { st.kv_type = fbo::KvType::BF16; }, kCorrupt,
      "level 1 encoder cache has the wrong size");
  s.edit(
      kHier, "Cache.k16", "one value too many",
      [to_bf16](S& st) {
        to_bf16(st);
        st.mode.AsHierGenState()->levels[0]->encoder->k16.push_back(0);
      },
      kCorrupt, "level 1 encoder cache has the wrong size");
  s.edit(
      kHier, "Cache.v16", "a bf16 infinity",
      [to_bf16](S& st) {
        to_bf16(st);
        st.mode.AsHierGenState()->levels[0]->encoder->v16.front() = 0x7f80;
      },
      kCorrupt, "level 1 encoder cache holds a NaN or infinite value (layer 0, position 0)");
  s.edit(
      kRec, "Cache.v16", "a single value (RecGen top)",
      [to_bf16](S& st) {
        to_bf16(st);
        st.mode.AsRecGenState()->top->v16.assign(1, 0);
      },
      kCorrupt, "the top-level cache has the wrong size");
}

// The mode's table of the current version.
// The sampler settings of format version 4.
void add_sampler_v4_cases(StateCases<S>& s) {
  s.edit(
      kHier, "Sampler.top_logprobs", "21", [](S& st) { st.sampler->top_logprobs = 21; }, kCorrupt,
      range("top_logprobs"));
  s.edit(
      kHier, "Sampler.top_logprobs", "-1", [](S& st) { st.sampler->top_logprobs = -1; }, kCorrupt,
      range("top_logprobs"));
  s.edit(
      kHier, "Sampler.presence_penalty", "NaN",
      [](S& st) { st.sampler->presence_penalty = std::nanf(""); }, kCorrupt,
      range("presence_penalty"));
  s.edit(
      kHier, "Sampler.frequency_penalty", "infinite",
      [](S& st) { st.sampler->frequency_penalty = -INFINITY; }, kCorrupt,
      range("frequency_penalty"));
  s.edit(
      kHier, "Sampler.logit_bias_tokens", "outside the vocabulary",
      [](S& st) {
        st.sampler->logit_bias_tokens = {3, kTinyVocab};
        st.sampler->logit_bias_values = {1.0f, 2.0f};
      },
      kCorrupt,
      "the logit bias's token " + std::to_string(kTinyVocab) + " is outside the vocabulary");
  s.edit(
      kHier, "Sampler.logit_bias_tokens", "twice",
      [](S& st) {
        st.sampler->logit_bias_tokens = {3, 3};
        st.sampler->logit_bias_values = {1.0f, 2.0f};
      },
      kCorrupt, "the logit bias's tokens are not ascending and distinct");
  s.edit(
      kHier, "Sampler.logit_bias_values", "fewer than the tokens",
      [](S& st) {
        st.sampler->logit_bias_tokens = {3, 7};
        st.sampler->logit_bias_values = {1.0f};
      },
      kCorrupt, "the logit bias has a different number of tokens and values");
  s.edit(
      kHier, "Sampler.logit_bias_values", "NaN",
      [](S& st) {
        st.sampler->logit_bias_tokens = {3};
        st.sampler->logit_bias_values = {std::nanf("")};
      },
      kCorrupt, range("logit bias"));
}

void add_mode_cases(StateCases<S>& s) {
  s.edit(
      kHier, "SessionState.mode", "absent", [](S& st) { st.mode.Reset(); }, kCorrupt,
      "the session kind is missing");
  s.edit(
      kHier, "SessionState.mode", "of type 9",
      [](S& st) {
        st.mode.Reset();
        st.mode.type = static_cast<fbo::ModeState>(9);
      },
      kCorrupt, "unknown session kind 9");
  s.edit(
      kHier, "SessionState.mode", "of HierGen's type without its table",
      [](S& st) {
        st.mode.Reset();
        st.mode.type = fbo::ModeState::HierGenState;
      },
      kCorrupt, "the HierGen state is missing");
  s.edit(
      kHier, "SessionState.mode", "vanilla for a PHOTON model",
      [](S& st) { st.mode.Set(fbo::VanillaStateT()); }, kCorrupt,
      "the session kind does not fit the model");
  s.edit(
      kVanilla, "SessionState.mode", "HierGen for a vanilla model",
      [](S& st) { st.mode.Set(fbo::HierGenStateT()); }, kCorrupt,
      "the session kind does not fit the model");
  s.edit(
      kVanilla, "Cache.len", "more than the history (vanilla)",
      [](S& st) {
        st.mode.AsVanillaState()->cache->len = static_cast<int32_t>(st.tokens.size()) + 1;
      },
      kCorrupt, "the KV cache holds");
}

// The fields of versions 1 and 2 that version 3 derives or holds elsewhere.
void add_v2_cases(StateCases<S2>& s) {
  s.edit(
      kHier, "SessionState.kind", "9", [](S2& st) { st.kind = static_cast<fbo2::SessionKind>(9); },
      kCorrupt, "unknown session kind");
  s.edit(
      kHier, "SessionState.kind", "vanilla for a PHOTON model",
      [](S2& st) { st.kind = fbo2::SessionKind::Vanilla; }, kCorrupt,
      "the session kind does not fit the model");
  s.edit(
      kVanilla, "SessionState.kind", "HierGen for a vanilla model",
      [](S2& st) { st.kind = fbo2::SessionKind::HierGen; }, kCorrupt,
      "the session kind does not fit the model");
  s.edit(
      kRec, "SessionState.consumed", "not the whole history (RecGen)",
      [](S2& st) { st.consumed -= 1; }, kCorrupt, "the consumed count is invalid");
  s.edit(
      kVanilla, "Cache.len", "one more than consumed (vanilla)", [](S2& st) { st.cache->len += 1; },
      kCorrupt, "the KV cache holds");
  s.edit(
      kHier, "SessionState.has_top", "flipped", [](S2& st) { st.has_top = !st.has_top; }, kCorrupt,
      "the top-level flag does not match the history");
  s.edit(
      kRec, "SessionState.has_top", "flipped (RecGen)", [](S2& st) { st.has_top = !st.has_top; },
      kCorrupt, "the top-level flag does not match the history");
  // Every cache in 16 bits, as a session with bf16 KV caches saved it (version 2).
  auto to_bf16 = [](S2& st) {
    for (auto& level : st.levels) {
      narrow(level->encoder.get());
      if (level->window) narrow(level->window->cache.get());
    }
    for (auto& window : st.group) narrow(window->cache.get());
    narrow(st.top.get());
    narrow(st.cache.get());
    st.format_version = 2;
    st.kv_type = fbo2::KvType::BF16;
  };
  s.edit(kHier, "SessionState.kv_type", "bf16, every cache in 16 bits", to_bf16, PHOTON_OK, "");
  s.edit(kRec, "SessionState.kv_type", "bf16 (RecGen)", to_bf16, PHOTON_OK, "");
  s.edit(kVanilla, "SessionState.kv_type", "bf16 (vanilla)", to_bf16, PHOTON_OK, "");
  s.edit(
      kHier, "SessionState.kv_type", "9",
      [to_bf16](S2& st) {
        to_bf16(st);
        st.kv_type = static_cast<fbo2::KvType>(9);
      },
      kCorrupt, "unknown KV cache type 9");
  s.edit(
      kHier, "SessionState.kv_type", "bf16 in a version 1 state",
      [to_bf16](S2& st) {
        to_bf16(st);
        st.format_version = 1;
      },
      kCorrupt, "16-bit KV caches in a format version 1 state");
  s.edit(
      kHier, "SessionState.kv_type", "bf16 over f32 caches",
      [](S2& st) {
        st.format_version = 2;
        st.kv_type = fbo2::KvType::BF16;
      },
      kCorrupt, "level 1 encoder cache has the wrong size");
  s.edit(
      kHier, "Cache.k16", "one value too many",
      [to_bf16](S2& st) {
        to_bf16(st);
        st.levels[0]->encoder->k16.push_back(0);
      },
      kCorrupt, "level 1 encoder cache has the wrong size");
  s.edit(
      kRec, "Cache.v16", "a single value (RecGen top)",
      [to_bf16](S2& st) {
        to_bf16(st);
        st.top->v16.assign(1, 0);
      },
      kCorrupt, "the top-level cache has the wrong size");
}

std::vector<uint8_t> saved_state(photon_model* model, photon_mode mode, int prompt_len,
                                 int generate) {
  auto check = [](photon_status status, const char* what) {
    if (status != PHOTON_OK)
      throw std::runtime_error(std::string("base state: ") + what + ": " + photon_last_error());
  };
  photon_session_options* options = nullptr;
  check(photon_session_options_create(&options), "options");
  photon_session_options_set_mode(options, mode);
  photon_session_options_set_ignore_eos(options, 1);
  photon_session* session = nullptr;
  const photon_status created = photon_session_create(model, options, &session);
  photon_session_options_free(options);
  check(created, "create");
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(i == 0 ? 1 : 5 + (i * 37) % 300);
  std::vector<uint8_t> state;
  try {
    check(photon_session_prefill(session, prompt.data(), prompt.size()), "prefill");
    check(photon_session_generate(session, generate, nullptr, nullptr, nullptr), "generate");
    size_t size = 0;
    photon_session_save(session, nullptr, 0, &size);
    state.resize(size);
    check(photon_session_save(session, state.data(), state.size(), &size), "save");
  } catch (...) {
    photon_session_free(session);
    throw;
  }
  photon_session_free(session);
  return state;
}

uint32_t format_version(const std::vector<uint8_t>& state) {
  return fbo::GetSizePrefixedSessionState(state.data())->format_version();
}

}  // namespace

StateBases base_states(photon_model* photon, photon_model* vanilla) {
  StateBases bases;
  bases.hiergen = saved_state(photon, PHOTON_MODE_HIERGEN, 5, 2);
  bases.recgen = saved_state(photon, PHOTON_MODE_RECGEN, 5, 0);
  bases.vanilla = saved_state(vanilla, PHOTON_MODE_AUTO, 4, 1);
  return bases;
}

StateBases released_bases() {
  const std::string dir = PHOTON_SOURCE_DIR "/tests/states/saved/";
  return {read_file(dir + "damage_hiergen.phss"), read_file(dir + "damage_recgen.phss"),
          read_file(dir + "damage_vanilla.phss")};
}

std::vector<DamageCase> damaged_session_states(const StateBases& bases) {
  std::vector<DamageCase> cases;
  StateCases<S> s(bases, "", cases);
  add_framing_cases(s);
  add_common_cases(s);
  add_mode_cases(s);
  add_sampler_v4_cases(s);
  add_hiergen_cases(
      s, "HierGenState", [](S & st) -> auto& { return *st.mode.AsHierGenState(); });
  add_recgen_cases(
      s, "RecGenState", 0, [](S & st) -> auto& { return *st.mode.AsRecGenState(); });
  add_vanilla_cases(
      s, "VanillaState", [](S & st) -> auto& { return *st.mode.AsVanillaState(); });
  add_kv_type_cases(s);
  const StateBases released = released_bases();
  StateCases<S2> v2(released, "v2.", cases);
  auto root = [](S2& st) -> S2& { return st; };
  add_common_cases(v2);
  add_hiergen_cases(v2, "SessionState", root);
  add_recgen_cases(v2, "SessionState", 2, root);
  add_vanilla_cases(v2, "SessionState", root);
  add_v2_cases(v2);
  return cases;
}

std::vector<uint8_t> rebuilt_state(const std::vector<uint8_t>& state) {
  return format_version(state) <= 2 ? pack_state(unpack<S2>(state)) : pack_state(unpack<S>(state));
}

void rehash_state(std::vector<uint8_t>& state) {
  const size_t body = state.size() - kHashBytes;
  const uint64_t hash = hash_data_section(state.data(), body);
  for (size_t i = 0; i < kHashBytes; ++i) state[body + i] = static_cast<uint8_t>(hash >> (8 * i));
}

}  // namespace photon::hardening
