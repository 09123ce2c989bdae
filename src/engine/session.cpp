#include "engine/session.h"

#include <algorithm>
#include <cstring>

#include "engine/sessions.h"

namespace photon {

namespace {

std::vector<int> encoder_capacities(const ModelConfig& c, int64_t tokens) {
  std::vector<int> caps;
  for (int l = 1; l <= c.num_levels(); ++l)
    caps.push_back(static_cast<int>(tokens / c.block_tokens(l)));
  return caps;
}

}  // namespace

std::unique_ptr<Session> create_session(const Model& model, Mode mode, int context) {
  const ModelConfig& c = model.config();
  if (c.arch == Arch::Vanilla) {
    if (mode == Mode::RecGen)
      fail(PHOTON_ERR_UNSUPPORTED,
           "RecGen needs a PHOTON model with at least 2 levels; this model is vanilla");
    return std::make_unique<VanillaSession>(model, context);
  }
  if (mode == Mode::RecGen) {
    if (c.num_levels() < 2)
      fail(PHOTON_ERR_UNSUPPORTED,
           "RecGen needs at least 2 levels; this model has 1 (a Block Transformer generates with "
           "HierGen)");
    return std::make_unique<RecGenSession>(model, context);
  }
  return std::make_unique<HierGenSession>(model, context);
}

// ---- HierGen ----------------------------------------------------------------------------------

HierGenSession::HierGenSession(const Model& model, int context)
    : Session(model, Mode::HierGen, context) {
  state_.allocate(model, encoder_capacities(model.config(), context));
}

void HierGenSession::sync_group(std::span<Session* const> group) {
  // Delivered tokens are consumed lazily, one step per lagging session per round.
  std::vector<HierState*> states;
  std::vector<int32_t> tokens;
  for (;;) {
    states.clear();
    tokens.clear();
    for (Session* s : group) {
      auto* h = static_cast<HierGenSession*>(s);
      if (h->state_.pos < static_cast<int64_t>(h->history_.size())) {
        states.push_back(&h->state_);
        tokens.push_back(h->history_[h->state_.pos]);
      }
    }
    if (states.empty()) return;
    hier_step(model_, states, tokens, scratch_);
  }
}

void HierGenSession::prefill(std::span<const int32_t> tokens) {
  Session* self = this;
  sync_group({&self, 1});
  for (size_t at = 0; at < tokens.size(); at += kPrefillSlice) {
    check_cancel();
    const auto slice = tokens.subspan(at, std::min(kPrefillSlice, tokens.size() - at));
    history_.insert(history_.end(), slice.begin(), slice.end());
    hier_append(model_, state_, slice, history_, scratch_);
  }
}

void HierGenSession::lanes(int64_t limit, bool, std::vector<Lane>& out) {
  out.clear();
  const int64_t next = static_cast<int64_t>(history_.size());
  if (next < limit && next < context_ && next > 0) out.push_back({next, state_.hidden()});
}

KvBytes HierGenSession::kv_bytes(int level) const {
  const HierLevel& lv = state_.level(level);
  return {lv.encoder.bytes_in_use(), lv.window.cache.bytes_in_use()};
}

// ---- vanilla ----------------------------------------------------------------------------------

VanillaSession::VanillaSession(const Model& model, int context)
    : Session(model, Mode::Vanilla, context) {
  const ModelConfig& c = model.config();
  cache_.allocate(c.stack.layers, context, c.stack.kv_dim());
  hidden_.assign(c.dim, 0.0f);
}

void VanillaSession::sync_group(std::span<Session* const> group) {
  // Every session's unconsumed tokens continue its own cache: one stack pass for all of them.
  const ModelConfig& c = model_.config();
  std::vector<StackSegment> segments;
  std::vector<VanillaSession*> lagging;
  std::vector<int32_t> tokens;
  for (Session* s : group) {
    auto* v = static_cast<VanillaSession*>(s);
    const int lag = static_cast<int>(v->history_.size()) - v->cache_.len;
    if (lag <= 0) continue;
    tokens.insert(tokens.end(), v->history_.end() - lag, v->history_.end());
    segments.push_back({&v->cache_, lag});
    lagging.push_back(v);
  }
  if (tokens.empty()) return;
  std::vector<float>& x = scratch_.x;
  x.resize(tokens.size() * c.dim);
  gather_rows(model_.weights().tok_emb, c.dim, tokens, x.data());
  stack_forward(model_.weights().stack, c.norm_eps, c.rope_theta, x.data(), segments,
                scratch_.stack);
  size_t row = 0;
  for (size_t i = 0; i < lagging.size(); ++i) {
    row += segments[i].rows;
    std::memcpy(lagging[i]->hidden_.data(), x.data() + (row - 1) * c.dim, c.dim * sizeof(float));
  }
}

void VanillaSession::prefill(std::span<const int32_t> tokens) {
  Session* self = this;
  for (size_t at = 0; at < tokens.size(); at += kPrefillSlice) {
    check_cancel();
    const auto slice = tokens.subspan(at, std::min(kPrefillSlice, tokens.size() - at));
    history_.insert(history_.end(), slice.begin(), slice.end());
    sync_group({&self, 1});
  }
}

void VanillaSession::lanes(int64_t limit, bool, std::vector<Lane>& out) {
  out.clear();
  const int64_t next = static_cast<int64_t>(history_.size());
  if (next < limit && next < context_ && next > 0) out.push_back({next, hidden_.data()});
}

KvBytes VanillaSession::kv_bytes(int) const {
  return {cache_.bytes_in_use(), 0};
}

}  // namespace photon
