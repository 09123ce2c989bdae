#include "engine/session.h"

#include <cstring>

#include "engine/sessions.h"

namespace photon {

namespace {

std::vector<int> encoder_capacities(const ModelConfig& c, int64_t tokens) {
  std::vector<int> caps;
  for (int l = 1; l <= c.num_levels(); ++l) caps.push_back(static_cast<int>(tokens / c.block_tokens(l)));
  return caps;
}

}  // namespace

std::unique_ptr<Session> create_session(const Model& model, Mode mode, int context) {
  const ModelConfig& c = model.config();
  if (c.arch == Arch::Vanilla) {
    if (mode == Mode::RecGen)
      fail(PHOTON_ERR_UNSUPPORTED, "RecGen needs a PHOTON model with at least 2 levels; this model is vanilla");
    return std::make_unique<VanillaSession>(model, context);
  }
  if (mode == Mode::RecGen) {
    if (c.num_levels() < 2)
      fail(PHOTON_ERR_UNSUPPORTED, "RecGen needs at least 2 levels; this model has 1 (a Block Transformer generates with HierGen)");
    return std::make_unique<RecGenSession>(model, context);
  }
  return std::make_unique<HierGenSession>(model, context);
}

// ---- HierGen ----------------------------------------------------------------------------------

HierGenSession::HierGenSession(const Model& model, int context) : Session(model, Mode::HierGen, context) {
  state_.allocate(model, encoder_capacities(model.config(), context));
}

void HierGenSession::catch_up() {
  while (state_.pos < static_cast<int64_t>(history_.size()))
    hier_step(model_, state_, history_[state_.pos], scratch_);
}

void HierGenSession::prefill(std::span<const int32_t> tokens) {
  catch_up();
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  hier_append(model_, state_, tokens, history_, scratch_);
}

void HierGenSession::lanes(int64_t limit, bool, std::vector<Lane>& out) {
  out.clear();
  catch_up();
  const int64_t next = static_cast<int64_t>(history_.size());
  if (next < limit && next < context_ && next > 0) out.push_back({next, state_.hidden()});
}

KvBytes HierGenSession::kv_bytes(int level) const {
  const HierLevel& lv = state_.level(level);
  return {lv.encoder.bytes_in_use(), lv.window.cache.bytes_in_use()};
}

// ---- vanilla ----------------------------------------------------------------------------------

VanillaSession::VanillaSession(const Model& model, int context) : Session(model, Mode::Vanilla, context) {
  const ModelConfig& c = model.config();
  cache_.allocate(c.stack.layers, context, c.stack.kv_dim());
  hidden_.assign(c.dim, 0.0f);
}

void VanillaSession::append(std::span<const int32_t> tokens) {
  if (tokens.empty()) return;
  const ModelConfig& c = model_.config();
  std::vector<float>& x = scratch_.x;
  x.resize(tokens.size() * c.dim);
  gather_rows(model_.weights().tok_emb, c.dim, tokens, x.data());
  const StackSegment segment{&cache_, static_cast<int>(tokens.size())};
  stack_forward(model_.weights().stack, c.norm_eps, c.rope_theta, x.data(), {&segment, 1}, scratch_.stack);
  std::memcpy(hidden_.data(), x.data() + (tokens.size() - 1) * c.dim, c.dim * sizeof(float));
}

void VanillaSession::prefill(std::span<const int32_t> tokens) {
  append(std::span<const int32_t>(history_).subspan(cache_.len));
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  append(tokens);
}

void VanillaSession::lanes(int64_t limit, bool, std::vector<Lane>& out) {
  out.clear();
  append(std::span<const int32_t>(history_).subspan(cache_.len));
  const int64_t next = static_cast<int64_t>(history_.size());
  if (next < limit && next < context_ && next > 0) out.push_back({next, hidden_.data()});
}

KvBytes VanillaSession::kv_bytes(int) const { return {cache_.bytes_in_use(), 0}; }

}  // namespace photon
