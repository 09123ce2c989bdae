#include <algorithm>
#include <cstring>

#include "engine/sessions.h"

namespace photon {

RecGenSession::RecGenSession(const Model& model, int context) : Session(model, Mode::RecGen, context) {
  const ModelConfig& c = model.config();
  const int L = c.num_levels();
  const StackConfig& enc = c.level(L).encoder;
  top_.allocate(enc.layers, static_cast<int>(context / c.block_tokens(L)), enc.kv_dim());
  top_last_.assign(c.latent_dim(L), 0.0f);
  plans_.resize(L + 1);
  for (int l = 2; l <= L; ++l)
    plans_[l].assign(static_cast<size_t>(c.level(l).chunk_len) * c.latent_dim(l - 1), 0.0f);
  group_.resize(c.level(2).chunk_len);
  for (Window& w : group_) allocate_window(model, 1, &w);
}

int64_t RecGenSession::group_end() const { return group_start_ + model_.config().block_tokens(2); }

void RecGenSession::prefill(std::span<const int32_t> tokens) {
  if (generated_)
    fail(PHOTON_ERR_UNSUPPORTED,
         "a RecGen session cannot take more prompt after it has generated (its latents are its own "
         "reconstructions); start a new session or use HierGen");
  if (tokens.empty()) return;
  // RecGen keeps no encoder cache below the top, so a prompt (also one extended by a second
  // prefill) is encoded in full once with temporary lower caches, which are then dropped.
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  const ModelConfig& c = model_.config();
  const int L = c.num_levels();
  const int64_t n = static_cast<int64_t>(history_.size());
  std::vector<int> caps;
  for (int l = 1; l < L; ++l) caps.push_back(static_cast<int>(n / c.block_tokens(l)));
  caps.push_back(top_.capacity);
  HierState st;
  st.allocate(model_, caps);
  hier_append(model_, st, history_, history_, scratch_);
  build_from(st);
}

// Runs a level-l window over the open unit's prompt children, then on its own outputs: o_j for
// every child not entirely in the prompt is that child's latent (Xhat), and also its input y.
void RecGenSession::compute_plan(int level, const float* cond, const float* prompt_children, int n_prompt) {
  const ModelConfig& c = model_.config();
  const int cl = c.level(level).chunk_len, dp = c.latent_dim(level - 1);
  Window w;
  allocate_window(model_, level, &w);
  const WindowJob first{&w, cond, prompt_children, n_prompt};
  run_windows(model_, level, {&first, 1}, scratch_);
  float* plan = plans_[level].data();
  if (n_prompt > 0) std::memcpy(plan, prompt_children, static_cast<size_t>(n_prompt) * dp * sizeof(float));
  for (int j = n_prompt; j < cl; ++j) {
    std::memcpy(plan + static_cast<size_t>(j) * dp, w.output(j), dp * sizeof(float));
    if (j + 1 < cl) {
      const WindowJob next{&w, nullptr, plan + static_cast<size_t>(j) * dp, 1};
      run_windows(model_, level, {&next, 1}, scratch_);
    }
  }
}

void RecGenSession::open_group(int first_window, std::span<const int32_t> open_tokens) {
  const ModelConfig& c = model_.config();
  const int c1 = c.level(1).chunk_len, d1 = c.latent_dim(1);
  std::vector<float> inputs(open_tokens.size() * c.token_dim);
  gather_rows(model_.weights().tok_emb_dec, c.token_dim, open_tokens, inputs.data());
  std::vector<WindowJob> jobs;
  for (int j = 0; j < static_cast<int>(group_.size()); ++j) {
    if (j < first_window) {
      group_[j].consumed = c1;  // finished inside the prompt
      continue;
    }
    const bool open = j == first_window;
    jobs.push_back({&group_[j], plans_[2].data() + static_cast<size_t>(j) * d1,
                    open ? inputs.data() : nullptr, open ? static_cast<int>(open_tokens.size()) : 0});
  }
  run_windows(model_, 1, jobs, scratch_);
}

void RecGenSession::build_from(HierState& st) {
  const ModelConfig& c = model_.config();
  const int L = c.num_levels();
  const int64_t pos = st.pos;
  top_ = std::move(st.level(L).encoder);  // the lower levels' caches die with `st`
  top_last_ = st.top_last;
  has_top_ = st.has_top;
  for (int l = L; l >= 2; --l) {
    const float* cond = l == L ? (has_top_ ? top_last_.data() : model_.weights().start)
                               : plans_[l + 1].data() +
                                     ((pos / c.block_tokens(l)) % c.level(l + 1).chunk_len) * c.latent_dim(l);
    compute_plan(l, cond, st.level(l).pending.data(), st.level(l).n_pending);
  }
  group_start_ = pos / c.block_tokens(2) * c.block_tokens(2);
  const int c1 = c.level(1).chunk_len;
  const int first = static_cast<int>((pos - group_start_) / c1);
  const int in_unit = static_cast<int>(pos % c1);
  open_group(first, std::span<const int32_t>(history_).subspan(history_.size() - in_unit));
}

void RecGenSession::advance_group() {
  const ModelConfig& c = model_.config();
  const int L = c.num_levels();
  const int64_t pos = group_end();
  int highest = 2;
  for (int l = 2; l <= L && pos % c.block_tokens(l) == 0; ++l) highest = l;
  if (highest == L) {
    // The top unit completed: its chunker reads its children's latents (spec 5, RecGen).
    const EncodeJob job{&top_, plans_[L].data(), 1, top_last_.data()};
    encode_units(model_, L, {&job, 1}, scratch_);
    has_top_ = true;
  }
  for (int l = highest; l >= 2; --l) {
    const float* cond = l == L ? top_last_.data()
                               : plans_[l + 1].data() +
                                     ((pos / c.block_tokens(l)) % c.level(l + 1).chunk_len) * c.latent_dim(l);
    compute_plan(l, cond, nullptr, 0);
  }
  group_start_ = pos;
  open_group(0, {});
}

void RecGenSession::lanes(int64_t limit, bool parallel, std::vector<Lane>& out) {
  out.clear();
  lane_windows_.clear();
  const int64_t next = static_cast<int64_t>(history_.size());
  if (next == 0 || next >= context_ || next >= limit) return;
  if (next == group_end()) advance_group();
  const int c1 = model_.config().level(1).chunk_len;
  for (int j = static_cast<int>((next - group_start_) / c1); j < static_cast<int>(group_.size()); ++j) {
    const Window& w = group_[j];
    if (w.consumed >= c1) continue;
    const int64_t position = group_start_ + static_cast<int64_t>(j) * c1 + w.consumed;
    if (position >= limit || position >= context_) break;
    out.push_back({position, w.latest()});
    lane_windows_.push_back(j);
    if (!parallel) break;
  }
}

void RecGenSession::feed(std::span<const int32_t> tokens) {
  generated_ = true;
  const ModelConfig& c = model_.config();
  const int c1 = c.level(1).chunk_len;
  std::vector<float> inputs(tokens.size() * c.token_dim);
  gather_rows(model_.weights().tok_emb_dec, c.token_dim, tokens, inputs.data());
  std::vector<WindowJob> jobs;
  for (size_t i = 0; i < tokens.size(); ++i) {
    Window& w = group_[lane_windows_[i]];
    if (w.consumed + 1 < c1) jobs.push_back({&w, nullptr, inputs.data() + i * c.token_dim, 1});
    else w.consumed = c1;  // the unit's last token needs no further output
  }
  run_windows(model_, 1, jobs, scratch_);
}

void RecGenSession::rollback() {
  const int c1 = model_.config().level(1).chunk_len;
  const int64_t committed = static_cast<int64_t>(history_.size());
  for (int j = 0; j < static_cast<int>(group_.size()); ++j) {
    const int64_t start = group_start_ + static_cast<int64_t>(j) * c1;
    const int allowed = static_cast<int>(std::clamp<int64_t>(committed - start, 0, c1));
    if (group_[j].consumed > allowed) group_[j].truncate(allowed);
  }
}

KvBytes RecGenSession::kv_bytes(int level) const {
  KvBytes b;
  if (level == model_.config().num_levels()) b.encoder = top_.bytes_in_use();
  if (level == 1)
    for (const Window& w : group_) b.window += w.cache.bytes_in_use();
  return b;
}

}  // namespace photon
