#include "engine/recgen.h"

#include <algorithm>

#include "engine/hiergen.h"
#include "engine/score.h"
#include "engine/session.h"
#include "engine/session_state.h"
#include "engine/weights.h"

namespace photon {

namespace {

// Index in the parent's plan of the level-l unit that starts or holds position `pos`.
int64_t child_index(const ModelConfig& c, int level, int64_t pos) {
  return (pos / c.block_tokens(level)) % c.level(level + 1).chunk_len;
}

class RecGenRunner final : public Runner {
 public:
  using Runner::Runner;

  void init(Session& s) override {
    const ModelConfig& c = model_.config();
    Backend& b = model_.backend();
    const int L = c.num_levels();
    RecGenState& st = s.state.emplace<RecGenState>();
    const StackConfig& enc = c.level(L).encoder;
    st.top.allocate(b, enc.layers, static_cast<int>(s.context / c.block_tokens(L)), enc.kv_dim(),
                    s.kv_type);
    st.top_last = zero_matrix(b, 1, c.latent_dim(L), "top-level state");
    st.plans.resize(L + 1);
    for (int l = 2; l <= L; ++l)
      st.plans[l] = zero_matrix(b, c.level(l).chunk_len, c.latent_dim(l - 1), "plan");
    st.group.resize(c.level(2).chunk_len);
    for (Window& w : st.group) allocate_window(model_, 1, &w, s.kv_type);
  }

  void prefill(Session& s, std::span<const int32_t> tokens, float* logprobs) override {
    RecGenState& r = s.as<RecGenState>();
    // After generation the latents are RecGen's own reconstructions: known tokens continue them
    // as generated ones would.
    if (r.generated) return consume(s, tokens, logprobs);
    if (tokens.empty()) return;
    if (logprobs) teacher_forced_logprobs(model_, s.history, tokens, logprobs);
    Session* self = &s;
    encode_prompts({&self, 1}, {&tokens, 1});
  }

  void prefill_batch(std::span<Session* const> sessions,
                     std::span<const std::span<const int32_t>> tokens) override {
    // Prompts go together in groups of at most pass_tokens() tokens, which bounds the temporary
    // caches that encode_prompts holds at once.
    std::vector<Session*> group;
    std::vector<std::span<const int32_t>> group_tokens;
    size_t group_size = 0;
    auto flush = [&] {
      for (Session* s : sessions) s->check_cancel();
      if (!group.empty()) encode_prompts(group, group_tokens);
      group.clear();
      group_tokens.clear();
      group_size = 0;
    };
    for (size_t i = 0; i < sessions.size(); ++i) {
      Session& s = *sessions[i];
      if (tokens[i].empty()) continue;
      if (s.as<RecGenState>().generated) {
        for (Session* other : sessions) other->check_cancel();
        consume(s, tokens[i], nullptr);
        continue;
      }
      const size_t size = s.history.size() + tokens[i].size();
      if (group_size > 0 && group_size + size > pass_tokens()) flush();
      group.push_back(&s);
      group_tokens.push_back(tokens[i]);
      group_size += size;
    }
    flush();
  }

  // RecGen keeps no encoder cache below the top, so each prompt (also one extended by a second
  // prefill) is encoded in full once, with temporary lower caches that are then dropped; the
  // sessions' prompts share each GEMM. A cancellation leaves every session as it was.
  void encode_prompts(std::span<Session* const> sessions,
                      std::span<const std::span<const int32_t>> tokens) {
    const ModelConfig& c = model_.config();
    const int L = c.num_levels();
    const size_t n = sessions.size();
    std::vector<std::vector<int32_t>> prompts(n);
    std::vector<HierGenState> states(n);
    for (size_t i = 0; i < n; ++i) {
      prompts[i] = sessions[i]->history;
      prompts[i].insert(prompts[i].end(), tokens[i].begin(), tokens[i].end());
      const int64_t length = static_cast<int64_t>(prompts[i].size());
      std::vector<int> caps;
      for (int l = 1; l < L; ++l) caps.push_back(static_cast<int>(length / c.block_tokens(l)));
      caps.push_back(sessions[i]->as<RecGenState>().top.capacity);
      states[i].allocate(model_, caps, sessions[i]->kv_type);
    }
    const std::vector<std::span<const int32_t>> whole(prompts.begin(), prompts.end());
    std::vector<AppendJob> jobs;
    in_passes(sessions, whole, [&](const PrefillPass& pass) {
      jobs.clear();
      for (size_t k = 0; k < pass.index.size(); ++k) {
        const size_t i = pass.index[k];
        const std::span<const int32_t> slice = pass.slices[k];
        const size_t end = static_cast<size_t>(slice.data() - prompts[i].data()) + slice.size();
        jobs.push_back({&states[i], slice, whole[i].first(end)});
      }
      hier_append(model_, jobs, ws_);
    });
    for (size_t i = 0; i < n; ++i) sessions[i]->history = std::move(prompts[i]);
    build_from(sessions, states);
  }

  // Consumes known tokens as RecGen consumes tokens it sampled (spec 5; each enters only its own
  // level-1 window), a level-2 unit at a time with all of its windows in one pass. logprobs (may
  // be null) receives the log-probability of each token under RecGen's conditioning. A
  // cancellation request is honoured between units, which keeps the units consumed so far.
  void consume(Session& s, std::span<const int32_t> tokens, float* logprobs) {
    const ModelConfig& c = model_.config();
    const int c1 = c.level(1).chunk_len;
    RecGenState& r = s.as<RecGenState>();
    Session* self = &s;
    struct Feed {
      int window;
      int64_t first, count;  // the window's inputs: rows of the embedded ids
      bool completes;        // the chunk holds the unit's last token
    };
    std::vector<Feed> feeds;
    std::vector<int32_t> ids;
    std::vector<WindowJob> jobs;
    std::vector<RowCopy> rows;
    for (size_t at = 0; at < tokens.size();) {
      s.check_cancel();
      catch_up({&self, 1});  // opens the next unit when the history ends one
      const int64_t next = static_cast<int64_t>(s.history.size());
      const int64_t n =
          std::min<int64_t>(static_cast<int64_t>(tokens.size() - at), group_end(r) - next);
      const std::span<const int32_t> chunk = tokens.subspan(at, n);
      // Each level-1 unit the chunk reaches feeds its window all of its tokens but the unit's last
      // one, which needs no output after it.
      feeds.clear();
      ids.clear();
      for (int64_t i = 0; i < n;) {
        const int64_t offset = next + i - r.group_start;
        const int64_t in_unit = std::min<int64_t>(n - i, c1 - offset % c1);
        const bool completes = offset % c1 + in_unit == c1;
        const int64_t fed = in_unit - (completes ? 1 : 0);
        feeds.push_back(
            {static_cast<int>(offset / c1), static_cast<int64_t>(ids.size()), fed, completes});
        ids.insert(ids.end(), chunk.begin() + i, chunk.begin() + i + fed);
        i += in_unit;
      }
      const Tensor inputs = ws_.get(Slot::Embedded, static_cast<int64_t>(ids.size()), c.token_dim);
      model_.backend().embed(model_.weights().tok_emb_dec, ids, inputs);
      jobs.clear();
      for (const Feed& f : feeds)
        if (f.count > 0) jobs.push_back({&r.group[f.window], {}, inputs.slice(f.first, f.count)});
      run_windows(model_, 1, jobs, ws_);
      if (logprobs) {
        // The token at offset k of its unit is predicted by its window's output k.
        const Tensor hidden = ws_.get(Slot::Hidden, n, c.token_dim);
        rows.clear();
        for (int64_t i = 0; i < n; ++i) {
          const int64_t offset = next + i - r.group_start;
          rows.push_back({hidden.row(i), r.group[offset / c1].output(offset % c1)});
        }
        model_.backend().copy_rows(rows);
        token_logprobs(model_, hidden, chunk, logprobs + at, ws_);
      }
      for (const Feed& f : feeds)
        if (f.completes) r.group[f.window].consumed = c1;
      s.history.insert(s.history.end(), chunk.begin(), chunk.end());
      r.generated = true;
      at += n;
    }
  }

  void catch_up(std::span<Session* const> sessions) override {
    std::vector<Session*> due;
    for (Session* s : sessions) {
      const int64_t next = static_cast<int64_t>(s->history.size());
      if (next > 0 && next < s->context && next == group_end(s->as<RecGenState>()))
        due.push_back(s);
    }
    if (!due.empty()) advance_groups(due);
  }

  void lanes(Session& s, std::vector<Lane>& out) override {
    RecGenState& r = s.as<RecGenState>();
    out.clear();
    r.lane_windows.clear();
    const int64_t next = static_cast<int64_t>(s.history.size());
    const int c1 = model_.config().level(1).chunk_len;
    for (int j = static_cast<int>((next - r.group_start) / c1);
         j < static_cast<int>(r.group.size()); ++j) {
      const Window& w = r.group[j];
      if (w.consumed >= c1) continue;
      out.push_back({r.group_start + static_cast<int64_t>(j) * c1 + w.consumed, w.latest()});
      r.lane_windows.push_back(j);
    }
  }

  void feed(std::span<Session* const> sessions,
            std::span<const std::vector<int32_t>> tokens) override {
    const ModelConfig& c = model_.config();
    const int c1 = c.level(1).chunk_len;
    std::vector<int32_t> ids;
    for (const std::vector<int32_t>& t : tokens) ids.insert(ids.end(), t.begin(), t.end());
    const Tensor inputs = ws_.get(Slot::Embedded, static_cast<int64_t>(ids.size()), c.token_dim);
    model_.backend().embed(model_.weights().tok_emb_dec, ids, inputs);
    std::vector<WindowJob> jobs;
    int64_t row = 0;
    for (size_t g = 0; g < sessions.size(); ++g) {
      RecGenState& r = sessions[g]->as<RecGenState>();
      if (tokens[g].empty()) continue;
      r.generated = true;
      for (size_t i = 0; i < tokens[g].size(); ++i, ++row) {
        Window& w = r.group[r.lane_windows[i]];
        if (w.consumed + 1 < c1)
          jobs.push_back({&w, {}, inputs.row(row)});
        else
          w.consumed = c1;  // the unit's last token needs no further output
      }
    }
    run_windows(model_, 1, jobs, ws_);
  }

  void rollback(Session& s) override {
    RecGenState& r = s.as<RecGenState>();
    const int c1 = model_.config().level(1).chunk_len;
    const int64_t committed = static_cast<int64_t>(s.history.size());
    for (int j = 0; j < static_cast<int>(r.group.size()); ++j) {
      const int64_t start = r.group_start + static_cast<int64_t>(j) * c1;
      const int allowed = static_cast<int>(std::clamp<int64_t>(committed - start, 0, c1));
      if (r.group[j].consumed > allowed) r.group[j].truncate(allowed);
    }
  }

  KvBytes kv_bytes(const Session& s, int level) const override {
    const RecGenState& r = s.as<RecGenState>();
    KvBytes b;
    if (level == model_.config().num_levels()) b.encoder = r.top.bytes_in_use();
    if (level == 1)
      for (const Window& w : r.group) b.window += w.cache.bytes_in_use();
    return b;
  }

  void save(const Session& s, StateWriter& out) const override {
    const RecGenState& r = s.as<RecGenState>();
    out.expect_bytes(r.top.bytes_in_use());
    out.kind = fb::SessionKind::RecGen;
    out.top = out.cache(r.top);
    out.top_last = out.floats(r.top_last);
    out.has_top = r.has_top;
    std::vector<FbOffset<fb::Plan>> plans;
    for (const Matrix& p : r.plans) plans.push_back(fb::CreatePlan(out.builder(), out.floats(p)));
    out.plans = out.builder().CreateVector(plans);
    std::vector<FbOffset<fb::WindowState>> group;
    for (const Window& w : r.group) group.push_back(out.window(w));
    out.group = out.builder().CreateVector(group);
    out.group_start = r.group_start;
    out.generated = r.generated;
    out.consumed = static_cast<int64_t>(s.history.size());
  }

  void restore(Session& s, const StateReader& in) override {
    const ModelConfig& c = model_.config();
    const fb::SessionState& st = in.state();
    const int L = c.num_levels();
    const int64_t n = static_cast<int64_t>(s.history.size()), b2 = c.block_tokens(2);
    RecGenState& r = s.as<RecGenState>();
    r.group_start = st.group_start();
    StateReader::expect(n >= 1 && r.group_start >= 0 && r.group_start % b2 == 0 &&
                            r.group_start <= n && n <= r.group_start + b2,
                        "the open unit does not match the history");
    in.cache(st.top(), r.top, r.group_start / c.block_tokens(L), "the top-level cache");
    in.floats(st.top_last(), r.top_last, "the last top-level state has the wrong size");
    r.has_top = st.has_top();
    StateReader::expect(st.plans() && st.plans()->size() == static_cast<size_t>(L + 1),
                        "the plans are missing");
    for (int l = 2; l <= L; ++l) {
      const fb::Plan* p = st.plans()->Get(l);
      StateReader::expect(p != nullptr, "a plan is missing");
      in.floats(p->values(), r.plans[l],
                "the plan of level " + std::to_string(l) + " has the wrong size");
    }
    StateReader::expect(st.group() && st.group()->size() == r.group.size(),
                        "the level-1 windows are missing");
    const int c1 = c.level(1).chunk_len;
    for (size_t j = 0; j < r.group.size(); ++j) {
      const Window& w = r.group[j];
      const std::string name = "level-1 window " + std::to_string(j);
      in.window(st.group()->Get(static_cast<flatbuffers::uoffset_t>(j)), r.group[j], name);
      // Saving rolls every window back to the history; an unfinished one predicts from its last
      // output.
      const int64_t start = r.group_start + static_cast<int64_t>(j) * c1;
      StateReader::expect(w.consumed == std::clamp<int64_t>(n - start, 0, c1) &&
                              (w.n_outputs == std::min(w.consumed, c1 - 1) + 1 ||
                               (w.n_outputs == 0 && w.consumed == c1)),
                          name + " does not match the history");
    }
    StateReader::expect(r.has_top == (r.group_start >= c.block_tokens(L)),
                        "the top-level flag does not match the history");
    r.generated = st.generated();
  }

 private:
  int64_t group_end(const RecGenState& r) const {
    return r.group_start + model_.config().block_tokens(2);
  }

  // The level-l windows compute_plans runs, one per session, reused from call to call. They live
  // for one call, so they stay f32 whatever the sessions' kv type.
  std::vector<Window>& plan_windows(int level, size_t n) {
    if (plan_windows_.size() <= static_cast<size_t>(level)) plan_windows_.resize(level + 1);
    std::vector<Window>& windows = plan_windows_[level];
    while (windows.size() < n) allocate_window(model_, level, &windows.emplace_back(), DType::F32);
    return windows;
  }

  // Runs each session's level-l window over its open unit's prompt children, then on its own
  // outputs: o_j for every child not entirely in the prompt is that child's latent (Xhat) and also
  // its input y. All sessions step together.
  void compute_plans(int level, std::span<Session* const> sessions, std::span<const Tensor> conds,
                     std::span<const Tensor> prompt_children) {
    Backend& b = model_.backend();
    const int cl = model_.config().level(level).chunk_len;
    const size_t n = sessions.size();
    std::vector<Window>& windows = plan_windows(level, n);
    std::vector<WindowJob> jobs;
    std::vector<RowCopy> copies;
    for (size_t i = 0; i < n; ++i) {
      const Tensor& prompt = prompt_children[i];
      jobs.push_back({&windows[i], conds[i], prompt});
      if (prompt.rows > 0)
        copies.push_back(
            {sessions[i]->as<RecGenState>().plans[level].slice(0, prompt.rows), prompt});
    }
    b.copy_rows(copies);
    run_windows(model_, level, jobs, ws_);
    for (int j = 0; j < cl; ++j) {
      jobs.clear();
      copies.clear();
      for (size_t i = 0; i < n; ++i) {
        if (j < prompt_children[i].rows) continue;
        const Tensor row = sessions[i]->as<RecGenState>().plans[level].row(j);
        copies.push_back({row, windows[i].output(j)});
        if (j + 1 < cl) jobs.push_back({&windows[i], {}, row});
      }
      b.copy_rows(copies);
      run_windows(model_, level, jobs, ws_);
    }
  }

  // Opens the level-1 windows of each session's group from its level-2 plan: those before
  // first_window[i] finished inside the prompt, the first open one takes open_tokens[i].
  void open_groups(std::span<Session* const> sessions, std::span<const int> first_window,
                   std::span<const std::vector<int32_t>> open_tokens) {
    const ModelConfig& c = model_.config();
    const int c1 = c.level(1).chunk_len;
    std::vector<int32_t> ids;
    for (const std::vector<int32_t>& t : open_tokens) ids.insert(ids.end(), t.begin(), t.end());
    const Tensor inputs = ws_.get(Slot::Embedded, static_cast<int64_t>(ids.size()), c.token_dim);
    model_.backend().embed(model_.weights().tok_emb_dec, ids, inputs);
    std::vector<WindowJob> jobs;
    int64_t row = 0;
    for (size_t i = 0; i < sessions.size(); ++i) {
      RecGenState& r = sessions[i]->as<RecGenState>();
      const int64_t n_open = static_cast<int64_t>(open_tokens[i].size());
      for (int j = 0; j < static_cast<int>(r.group.size()); ++j) {
        if (j < first_window[i]) {
          r.group[j].cache.len = r.group[j].n_outputs = 0;  // finished inside the prompt
          r.group[j].consumed = c1;
          continue;
        }
        const bool open = j == first_window[i];
        jobs.push_back(
            {&r.group[j], r.plans[2].row(j), open ? inputs.slice(row, n_open) : Tensor{}});
      }
      row += n_open;
    }
    run_windows(model_, 1, jobs, ws_);
  }

  // The RecGen state of each session after its prompt was consumed teacher-forced into
  // states[i].
  void build_from(std::span<Session* const> sessions, std::span<HierGenState> states) {
    const ModelConfig& c = model_.config();
    const int L = c.num_levels();
    const size_t n = sessions.size();
    for (size_t i = 0; i < n; ++i) {
      RecGenState& r = sessions[i]->as<RecGenState>();
      r.top = std::move(states[i].level(L).encoder);  // the lower caches die with `states`
      r.top_last = std::move(states[i].top_last);
      r.has_top = states[i].has_top;
    }
    std::vector<Tensor> conds(n), children(n);
    for (int l = L; l >= 2; --l) {
      for (size_t i = 0; i < n; ++i) {
        RecGenState& r = sessions[i]->as<RecGenState>();
        conds[i] = l == L ? (r.has_top ? r.top_last.tensor() : model_.weights().start)
                          : r.plans[l + 1].row(child_index(c, l, states[i].pos));
        children[i] = states[i].level(l).pending.slice(0, states[i].level(l).n_pending);
      }
      compute_plans(l, sessions, conds, children);
    }
    const int c1 = c.level(1).chunk_len;
    std::vector<int> first(n);
    std::vector<std::vector<int32_t>> open(n);
    for (size_t i = 0; i < n; ++i) {
      RecGenState& r = sessions[i]->as<RecGenState>();
      const std::vector<int32_t>& history = sessions[i]->history;
      const int64_t pos = states[i].pos;
      r.group_start = pos / c.block_tokens(2) * c.block_tokens(2);
      first[i] = static_cast<int>((pos - r.group_start) / c1);
      open[i].assign(history.end() - pos % c1, history.end());
    }
    open_groups(sessions, first, open);
  }

  // Moves each session to its next level-2 unit: steps the top encoder where a top unit completes,
  // computes the new plans top-down and opens the new group's windows.
  void advance_groups(std::span<Session* const> sessions) {
    const ModelConfig& c = model_.config();
    const int L = c.num_levels();
    std::vector<EncodeJob> encodes;
    for (Session* s : sessions) {
      RecGenState& r = s->as<RecGenState>();
      if (group_end(r) % c.block_tokens(L) == 0) {
        encodes.push_back({&r.top, r.plans[L], 1, r.top_last});
        r.has_top = true;
      }
    }
    encode_units(model_, L, encodes, ws_);
    for (int l = L; l >= 2; --l) {
      std::vector<Session*> opening;
      std::vector<Tensor> conds, none;
      for (Session* s : sessions) {
        RecGenState& r = s->as<RecGenState>();
        const int64_t pos = group_end(r);
        if (pos % c.block_tokens(l) != 0) continue;
        opening.push_back(s);
        conds.push_back(l == L ? r.top_last.tensor() : r.plans[l + 1].row(child_index(c, l, pos)));
        none.emplace_back();
      }
      compute_plans(l, opening, conds, none);
    }
    for (Session* s : sessions) {
      RecGenState& r = s->as<RecGenState>();
      r.group_start = group_end(r);
    }
    const std::vector<int> first(sessions.size(), 0);
    const std::vector<std::vector<int32_t>> open(sessions.size());
    open_groups(sessions, first, open);
  }

  std::vector<std::vector<Window>> plan_windows_;  // by level
};

}  // namespace

std::unique_ptr<Runner> make_recgen_runner(const Model& model) {
  return std::make_unique<RecGenRunner>(model);
}

void score_recgen(const Model& model, std::span<const int32_t> tokens, size_t prompt_tokens,
                  float* out) {
  if (prompt_tokens >= tokens.size()) return score_tokens(model, tokens, out);
  std::unique_ptr<Session> s = Session::create(model, Mode::RecGen, static_cast<int>(tokens.size()),
                                               SamplerConfig(), DType::F32);
  s->runner->prefill(*s, tokens.first(prompt_tokens), out);
  // Everything after the prompt is consumed as RecGen consumes what it generated.
  s->as<RecGenState>().generated = true;
  s->runner->prefill(*s, tokens.subspan(prompt_tokens), out + prompt_tokens);
}

}  // namespace photon
