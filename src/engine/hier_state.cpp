#include "engine/hier_state.h"

#include <cstring>

namespace photon {

void HierState::allocate(const Model& model, std::span<const int> encoder_capacity) {
  const ModelConfig& c = model.config();
  const int L = c.num_levels();
  levels.assign(L, HierLevel());
  for (int l = 1; l <= L; ++l) {
    HierLevel& lv = level(l);
    const StackConfig& enc = c.level(l).encoder;
    lv.encoder.allocate(enc.layers, encoder_capacity[l - 1], enc.kv_dim());
    lv.pending.assign(static_cast<size_t>(c.level(l).chunk_len) * c.latent_dim(l - 1), 0.0f);
    allocate_window(model, l, &lv.window);
  }
  top_last.assign(c.latent_dim(L), 0.0f);
  has_top = false;
  pos = 0;
}

const float* top_conditioner(const Model& model, const HierState& st) {
  return st.has_top ? st.top_last.data() : model.weights().start;
}

void hier_append(const Model& model, HierState& st, std::span<const int32_t> tokens,
                 std::span<const int32_t> history, Scratch& s) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int L = c.num_levels();
  // Bottom-up: the new latents of level l - 1 join the open unit's pending children; every C_l of
  // them form a complete unit that the level-l encoder consumes.
  std::vector<float> fresh(tokens.size() * c.embed_dim), all, encoded;
  gather_rows(w.tok_emb_enc, c.embed_dim, tokens, fresh.data());
  int64_t n_fresh = static_cast<int64_t>(tokens.size());
  for (int l = 1; l <= L && n_fresh > 0; ++l) {
    HierLevel& lv = st.level(l);
    const int cl = c.level(l).chunk_len, dp = c.latent_dim(l - 1), dl = c.latent_dim(l);
    const int64_t total = lv.n_pending + n_fresh, units = total / cl;
    all.resize(static_cast<size_t>(total) * dp);
    std::memcpy(all.data(), lv.pending.data(),
                static_cast<size_t>(lv.n_pending) * dp * sizeof(float));
    std::memcpy(all.data() + static_cast<size_t>(lv.n_pending) * dp, fresh.data(),
                static_cast<size_t>(n_fresh) * dp * sizeof(float));
    encoded.resize(static_cast<size_t>(units) * dl);
    if (units > 0) {
      const EncodeJob job{&lv.encoder, all.data(), static_cast<int>(units), encoded.data()};
      encode_units(model, l, {&job, 1}, s);
    }
    lv.n_pending = static_cast<int>(total - units * cl);
    std::memcpy(lv.pending.data(), all.data() + static_cast<size_t>(units) * cl * dp,
                static_cast<size_t>(lv.n_pending) * dp * sizeof(float));
    if (l == L && units > 0) {
      std::memcpy(st.top_last.data(), encoded.data() + static_cast<size_t>(units - 1) * dl,
                  dl * sizeof(float));
      st.has_top = true;
    }
    fresh.swap(encoded);
    n_fresh = units;
  }
  st.pos += static_cast<int64_t>(tokens.size());
  // Top-down: each level's open unit gets a fresh window over its complete children.
  std::vector<float> level1_inputs;
  for (int l = L; l >= 1; --l) {
    HierLevel& lv = st.level(l);
    const float* cond = l == L ? top_conditioner(model, st) : st.level(l + 1).window.latest();
    const float* inputs = lv.pending.data();
    if (l == 1) {
      level1_inputs.resize(static_cast<size_t>(lv.n_pending) * c.token_dim);
      gather_rows(w.tok_emb_dec, c.token_dim, history.subspan(history.size() - lv.n_pending),
                  level1_inputs.data());
      inputs = level1_inputs.data();
    }
    const WindowJob job{&lv.window, cond, inputs, lv.n_pending};
    run_windows(model, l, {&job, 1}, s);
  }
}

void hier_step(const Model& model, std::span<HierState* const> states,
               std::span<const int32_t> tokens, Scratch& s) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int L = c.num_levels();
  const size_t n = states.size();
  // latent: the completed child's encoder state (chunker input); input: what its parent's window
  // reads for it (tok_emb_dec at level 1, the same encoder state above).
  std::vector<std::vector<float>> latent(n), input(n);
  std::vector<int> changed(
      n, L + 1);  // highest level whose window got a new output (L+1: new top unit)
  std::vector<size_t> active;
  for (size_t i = 0; i < n; ++i) {
    latent[i].resize(c.embed_dim);
    input[i].resize(c.token_dim);
    gather_rows(w.tok_emb_enc, c.embed_dim, tokens.subspan(i, 1), latent[i].data());
    gather_rows(w.tok_emb_dec, c.token_dim, tokens.subspan(i, 1), input[i].data());
    active.push_back(i);
  }
  std::vector<WindowJob> feeds;
  std::vector<EncodeJob> encodes;
  std::vector<size_t> completing;
  for (int l = 1; l <= L && !active.empty(); ++l) {
    const int cl = c.level(l).chunk_len, dp = c.latent_dim(l - 1);
    feeds.clear();
    encodes.clear();
    completing.clear();
    for (size_t i : active) {
      HierLevel& lv = states[i]->level(l);
      std::memcpy(lv.pending.data() + static_cast<size_t>(lv.n_pending) * dp, latent[i].data(),
                  dp * sizeof(float));
      if (++lv.n_pending < cl) {
        feeds.push_back({&lv.window, nullptr, input[i].data(), 1});
        changed[i] = l;
      } else {
        latent[i].resize(c.latent_dim(l));
        encodes.push_back({&lv.encoder, lv.pending.data(), 1, latent[i].data()});
        completing.push_back(i);
      }
    }
    run_windows(model, l, feeds, s);
    encode_units(model, l, encodes, s);
    for (size_t i : completing) {
      states[i]->level(l).n_pending = 0;
      input[i] = latent[i];
      if (l == L) {
        states[i]->top_last = latent[i];
        states[i]->has_top = true;
      }
    }
    active.swap(completing);
  }
  for (HierState* st : states) st->pos += 1;
  std::vector<WindowJob> opens;
  for (int l = L; l >= 1; --l) {
    opens.clear();
    for (size_t i = 0; i < n; ++i) {
      if (changed[i] - 1 < l) continue;
      HierState& st = *states[i];
      const float* cond = l == L ? top_conditioner(model, st) : st.level(l + 1).window.latest();
      opens.push_back({&st.level(l).window, cond, nullptr, 0});
    }
    run_windows(model, l, opens, s);
  }
}

}  // namespace photon
