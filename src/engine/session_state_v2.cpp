#include "engine/session_state_v2.h"

#include <string>
#include <vector>

#include "engine/session_state.h"

namespace photon {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// Copies of the tables that versions 1 and 2 share with version 3; absent stays absent.
template <typename T>
Offset<flatbuffers::Vector<T>> copy(FlatBufferBuilder& b, const flatbuffers::Vector<T>* v) {
  return v ? b.CreateVector(v->data(), v->size()) : 0;
}

Offset<fb::Cache> copy(FlatBufferBuilder& b, const fb::v2::Cache* c) {
  if (!c) return 0;
  const auto k = copy(b, c->k()), v = copy(b, c->v());
  const auto k16 = copy(b, c->k16()), v16 = copy(b, c->v16());
  return fb::CreateCache(b, c->layers(), c->kv_dim(), c->capacity(), c->len(), k, v, k16, v16);
}

Offset<fb::WindowState> copy(FlatBufferBuilder& b, const fb::v2::WindowState* w) {
  if (!w) return 0;
  const auto cache = copy(b, w->cache());
  const auto outputs = copy(b, w->outputs());
  return fb::CreateWindowState(b, cache, outputs, w->n_outputs(), w->consumed());
}

Offset<fb::LevelState> copy(FlatBufferBuilder& b, const fb::v2::LevelState* l) {
  const auto encoder = copy(b, l->encoder());
  const auto pending = copy(b, l->pending());
  const auto window = copy(b, l->window());
  return fb::CreateLevelState(b, encoder, pending, l->n_pending(), window);
}

// Every element of a vector of tables, or absent.
template <typename Out, typename In, typename Copy>
Offset<flatbuffers::Vector<Offset<Out>>> copy_all(FlatBufferBuilder& b,
                                                  const flatbuffers::Vector<Offset<In>>* items,
                                                  size_t first, Copy copy_one) {
  if (!items) return 0;
  std::vector<Offset<Out>> out;
  for (size_t i = first; i < items->size(); ++i)
    out.push_back(copy_one(b, items->Get(static_cast<flatbuffers::uoffset_t>(i))));
  return b.CreateVector(out);
}

}  // namespace

const fb::v2::SessionState* v2_state(std::span<const uint8_t> buffer) {
  flatbuffers::Verifier verifier(buffer.data(), buffer.size(), 64, 1u << 22);
  StateReader::expect(fb::v2::VerifySizePrefixedSessionStateBuffer(verifier),
                      "the FlatBuffers verifier rejected the state");
  return fb::v2::GetSizePrefixedSessionState(buffer.data());
}

Mode v2_mode(const fb::v2::SessionState& state) {
  switch (state.kind()) {
    case fb::v2::SessionKind::HierGen: return Mode::HierGen;
    case fb::v2::SessionKind::RecGen: return Mode::RecGen;
    case fb::v2::SessionKind::Vanilla: return Mode::Vanilla;
  }
  fail(PHOTON_ERR_CORRUPT,
       "session state: unknown session kind " + std::to_string(static_cast<int>(state.kind())));
}

V2ModeTable::V2ModeTable(const fb::v2::SessionState& st, Mode mode, const ModelConfig& c) {
  const int64_t n = st.tokens()->size(), consumed = st.consumed();
  StateReader::expect(consumed >= 0 && consumed <= n && (mode != Mode::RecGen || consumed == n),
                      "the consumed count is invalid");
  const std::string top_flag = "the top-level flag does not match the history";
  switch (mode) {
    case Mode::HierGen: {
      StateReader::expect(st.has_top() == (consumed >= c.block_tokens(c.num_levels())), top_flag);
      const auto levels = copy_all<fb::LevelState>(
          b_, st.levels(), 0,
          [](FlatBufferBuilder& b, const fb::v2::LevelState* l) { return copy(b, l); });
      const auto top_last = copy(b_, st.top_last());
      b_.Finish(fb::CreateHierGenState(b_, consumed, levels, top_last));
      type_ = fb::ModeState::HierGenState;
      table_ = flatbuffers::GetRoot<fb::HierGenState>(b_.GetBufferPointer());
      return;
    }
    case Mode::RecGen: {
      // The flag is checked where the open unit is valid; the runner refuses it otherwise.
      const int64_t start = st.group_start(), b2 = c.block_tokens(2);
      if (n >= 1 && start >= 0 && start % b2 == 0 && start <= n && n <= start + b2)
        StateReader::expect(st.has_top() == (start >= c.block_tokens(c.num_levels())), top_flag);
      const auto top = copy(b_, st.top());
      const auto top_last = copy(b_, st.top_last());
      // Version 3 leaves out the two empty plans of levels 0 and 1.
      const auto plans =
          copy_all<fb::Plan>(b_, st.plans(), 2, [](FlatBufferBuilder& b, const fb::v2::Plan* p) {
            return fb::CreatePlan(b, copy(b, p->values()));
          });
      const auto group = copy_all<fb::WindowState>(
          b_, st.group(), 0,
          [](FlatBufferBuilder& b, const fb::v2::WindowState* w) { return copy(b, w); });
      b_.Finish(fb::CreateRecGenState(b_, top, top_last, plans, group, start, st.generated()));
      type_ = fb::ModeState::RecGenState;
      table_ = flatbuffers::GetRoot<fb::RecGenState>(b_.GetBufferPointer());
      return;
    }
    case Mode::Vanilla: {
      const fb::v2::Cache* cache = st.cache();
      StateReader::expect(!cache || cache->len() == consumed,
                          "the KV cache holds " + std::to_string(cache ? cache->len() : 0) +
                              " positions, expected " + std::to_string(consumed));
      const auto copied = copy(b_, cache);
      const auto hidden = copy(b_, st.hidden());
      b_.Finish(fb::CreateVanillaState(b_, copied, hidden));
      type_ = fb::ModeState::VanillaState;
      table_ = flatbuffers::GetRoot<fb::VanillaState>(b_.GetBufferPointer());
      return;
    }
  }
}

}  // namespace photon
