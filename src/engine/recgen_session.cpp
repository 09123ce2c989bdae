#include <algorithm>
#include <cstring>

#include "engine/sessions.h"

namespace photon {

namespace {

// Index in the parent's plan of the level-l unit that starts or holds position `pos`.
int64_t child_index(const ModelConfig& c, int level, int64_t pos) {
  return (pos / c.block_tokens(level)) % c.level(level + 1).chunk_len;
}

}  // namespace

RecGenSession::RecGenSession(const Model& model, int context)
    : Session(model, Mode::RecGen, context) {
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

int64_t RecGenSession::group_end() const {
  return group_start_ + model_.config().block_tokens(2);
}

void RecGenSession::prefill(std::span<const int32_t> tokens) {
  if (generated_)
    fail(PHOTON_ERR_UNSUPPORTED,
         "a RecGen session cannot take more prompt after it has generated (its latents are its own "
         "reconstructions); start a new session or use HierGen");
  if (tokens.empty()) return;
  // RecGen keeps no encoder cache below the top, so a prompt (also one extended by a second
  // prefill) is encoded in full once with temporary lower caches, which are then dropped.
  std::vector<int32_t> prompt = history_;
  prompt.insert(prompt.end(), tokens.begin(), tokens.end());
  const ModelConfig& c = model_.config();
  const int L = c.num_levels();
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<int> caps;
  for (int l = 1; l < L; ++l) caps.push_back(static_cast<int>(n / c.block_tokens(l)));
  caps.push_back(top_.capacity);
  HierState st;
  st.allocate(model_, caps);
  const std::span<const int32_t> all(prompt);
  for (size_t at = 0; at < prompt.size(); at += kPrefillSlice) {
    check_cancel();  // nothing of this session has changed yet
    const size_t end = std::min(prompt.size(), at + kPrefillSlice);
    hier_append(model_, st, all.subspan(at, end - at), all.first(end), scratch_);
  }
  history_ = std::move(prompt);
  build_from(st);
}

// Runs each session's level-l window over its open unit's prompt children, then on its own
// outputs: o_j for every child not entirely in the prompt is that child's latent (Xhat) and also
// its input y. All sessions step together.
void RecGenSession::compute_plans(const Model& model, int level,
                                  std::span<RecGenSession* const> sessions,
                                  std::span<const float* const> conds,
                                  std::span<const float* const> prompt_children,
                                  std::span<const int> n_prompt, Scratch& s) {
  const ModelConfig& c = model.config();
  const int cl = c.level(level).chunk_len, dp = c.latent_dim(level - 1);
  const size_t n = sessions.size();
  std::vector<Window> windows(n);
  std::vector<WindowJob> jobs;
  for (size_t i = 0; i < n; ++i) {
    allocate_window(model, level, &windows[i]);
    jobs.push_back({&windows[i], conds[i], prompt_children[i], n_prompt[i]});
    if (n_prompt[i] > 0)
      std::memcpy(sessions[i]->plans_[level].data(), prompt_children[i],
                  static_cast<size_t>(n_prompt[i]) * dp * sizeof(float));
  }
  run_windows(model, level, jobs, s);
  for (int j = 0; j < cl; ++j) {
    jobs.clear();
    for (size_t i = 0; i < n; ++i) {
      if (j < n_prompt[i]) continue;
      float* row = sessions[i]->plans_[level].data() + static_cast<size_t>(j) * dp;
      std::memcpy(row, windows[i].output(j), dp * sizeof(float));
      if (j + 1 < cl) jobs.push_back({&windows[i], nullptr, row, 1});
    }
    run_windows(model, level, jobs, s);
  }
}

void RecGenSession::open_groups(const Model& model, std::span<RecGenSession* const> sessions,
                                std::span<const int> first_window,
                                std::span<const std::vector<int32_t>> open_tokens, Scratch& s) {
  const ModelConfig& c = model.config();
  const int c1 = c.level(1).chunk_len, d1 = c.latent_dim(1);
  std::vector<std::vector<float>> inputs(sessions.size());
  std::vector<WindowJob> jobs;
  for (size_t i = 0; i < sessions.size(); ++i) {
    RecGenSession& r = *sessions[i];
    inputs[i].resize(open_tokens[i].size() * c.token_dim);
    gather_rows(model.weights().tok_emb_dec, c.token_dim, open_tokens[i], inputs[i].data());
    for (int j = 0; j < static_cast<int>(r.group_.size()); ++j) {
      if (j < first_window[i]) {
        r.group_[j].cache.len = r.group_[j].n_outputs = 0;  // finished inside the prompt
        r.group_[j].consumed = c1;
        continue;
      }
      const bool open = j == first_window[i];
      jobs.push_back({&r.group_[j], r.plans_[2].data() + static_cast<size_t>(j) * d1,
                      open ? inputs[i].data() : nullptr,
                      open ? static_cast<int>(open_tokens[i].size()) : 0});
    }
  }
  run_windows(model, 1, jobs, s);
}

void RecGenSession::build_from(HierState& st) {
  const ModelConfig& c = model_.config();
  const int L = c.num_levels();
  const int64_t pos = st.pos;
  top_ = std::move(st.level(L).encoder);  // the lower levels' caches die with `st`
  top_last_ = st.top_last;
  has_top_ = st.has_top;
  RecGenSession* self = this;
  for (int l = L; l >= 2; --l) {
    const float* cond = l == L ? (has_top_ ? top_last_.data() : model_.weights().start)
                               : plans_[l + 1].data() + child_index(c, l, pos) * c.latent_dim(l);
    const float* children = st.level(l).pending.data();
    const int n_prompt = st.level(l).n_pending;
    compute_plans(model_, l, {&self, 1}, {&cond, 1}, {&children, 1}, {&n_prompt, 1}, scratch_);
  }
  group_start_ = pos / c.block_tokens(2) * c.block_tokens(2);
  const int c1 = c.level(1).chunk_len;
  const int first = static_cast<int>((pos - group_start_) / c1);
  const std::vector<int32_t> open(history_.end() - pos % c1, history_.end());
  open_groups(model_, {&self, 1}, {&first, 1}, {&open, 1}, scratch_);
}

void RecGenSession::advance_groups(const Model& model, std::span<RecGenSession* const> sessions,
                                   Scratch& s) {
  const ModelConfig& c = model.config();
  const int L = c.num_levels();
  // A session whose top unit completes steps the top encoder over its children's latents.
  std::vector<EncodeJob> encodes;
  for (RecGenSession* r : sessions)
    if (r->group_end() % c.block_tokens(L) == 0) {
      encodes.push_back({&r->top_, r->plans_[L].data(), 1, r->top_last_.data()});
      r->has_top_ = true;
    }
  encode_units(model, L, encodes, s);
  // New plans top-down, for every level whose unit completes with the group.
  for (int l = L; l >= 2; --l) {
    std::vector<RecGenSession*> opening;
    std::vector<const float*> conds, none;
    std::vector<int> zero;
    for (RecGenSession* r : sessions) {
      const int64_t pos = r->group_end();
      if (pos % c.block_tokens(l) != 0) continue;
      opening.push_back(r);
      conds.push_back(l == L ? r->top_last_.data()
                             : r->plans_[l + 1].data() + child_index(c, l, pos) * c.latent_dim(l));
      none.push_back(nullptr);
      zero.push_back(0);
    }
    compute_plans(model, l, opening, conds, none, zero, s);
  }
  for (RecGenSession* r : sessions) r->group_start_ = r->group_end();
  const std::vector<int> first(sessions.size(), 0);
  const std::vector<std::vector<int32_t>> open(sessions.size());
  open_groups(model, sessions, first, open, s);
}

void RecGenSession::sync_group(std::span<Session* const> group) {
  std::vector<RecGenSession*> due;
  for (Session* s : group) {
    auto* r = static_cast<RecGenSession*>(s);
    const int64_t next = static_cast<int64_t>(r->history_.size());
    if (next > 0 && next < r->context_ && next == r->group_end()) due.push_back(r);
  }
  if (!due.empty()) advance_groups(model_, due, scratch_);
}

void RecGenSession::lanes(int64_t limit, bool parallel, std::vector<Lane>& out) {
  out.clear();
  lane_windows_.clear();
  const int64_t next = static_cast<int64_t>(history_.size());
  if (next == 0 || next >= context_ || next >= limit) return;
  const int c1 = model_.config().level(1).chunk_len;
  for (int j = static_cast<int>((next - group_start_) / c1); j < static_cast<int>(group_.size());
       ++j) {
    const Window& w = group_[j];
    if (w.consumed >= c1) continue;
    const int64_t position = group_start_ + static_cast<int64_t>(j) * c1 + w.consumed;
    if (position >= limit || position >= context_) break;
    out.push_back({position, w.latest()});
    lane_windows_.push_back(j);
    if (!parallel) break;
  }
}

void RecGenSession::feed_group(std::span<Session* const> group,
                               std::span<const std::vector<int32_t>> tokens) {
  const ModelConfig& c = model_.config();
  const int c1 = c.level(1).chunk_len;
  std::vector<std::vector<float>> inputs(group.size());
  std::vector<WindowJob> jobs;
  for (size_t g = 0; g < group.size(); ++g) {
    auto* r = static_cast<RecGenSession*>(group[g]);
    if (tokens[g].empty()) continue;
    r->generated_ = true;
    inputs[g].resize(tokens[g].size() * c.token_dim);
    gather_rows(model_.weights().tok_emb_dec, c.token_dim, tokens[g], inputs[g].data());
    for (size_t i = 0; i < tokens[g].size(); ++i) {
      Window& w = r->group_[r->lane_windows_[i]];
      if (w.consumed + 1 < c1)
        jobs.push_back({&w, nullptr, inputs[g].data() + i * c.token_dim, 1});
      else
        w.consumed = c1;  // the unit's last token needs no further output
    }
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
