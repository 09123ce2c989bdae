// RecGen's runner: the mode's calls over its parts (engine/recgen_parts.h), and its saved state.
#include "engine/recgen.h"

#include <algorithm>

#include "engine/recgen_parts.h"
#include "engine/score.h"
#include "engine/session.h"
#include "engine/session_state.h"
#include "engine/weights.h"

namespace photon {

bool group_done(const ModelConfig& c, const Session& s) {
  const int64_t next = static_cast<int64_t>(s.history.size());
  return next > 0 && next < s.context && next == group_end(c, s.as<RecGenState>());
}

namespace {

// Prompt tokens per group of RecGen's batched prefill (prefill_batch): 16 passes' worth, at most
// 65,536 (a longer prompt is a group of its own).
constexpr size_t kGroupPasses = 16;
constexpr size_t kGroupTokens = 65536;

class RecGenRunner final : public Runner {
 public:
  using Runner::Runner;

  void init(Session& s) const override {
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
    if (r.generated) return continue_with(model_, s, tokens, logprobs, scratch_);
    if (tokens.empty()) return;
    if (logprobs) teacher_forced_logprobs(model_, s.history, tokens, logprobs);
    Session* self = &s;
    encode_prompts({&self, 1}, {&tokens, 1});
  }

  void prefill_batch(std::span<Session* const> sessions,
                     std::span<const std::span<const int32_t>> tokens) override {
    // Prompts go together in groups of at most max_group tokens, which bounds the temporary caches
    // that encode_prompts holds at once (65,536 tokens: about 0.8 GiB of f32 level-1 caches for
    // photon-600m), while the windows and plans of many prompts start in one batch. (With groups
    // of one pass, an H200 took 1.57 s for RecGen's prefill of 256 prompts of 2,048 tokens,
    // HierGen's 0.49 s.)
    std::vector<Session*> group;
    std::vector<std::span<const int32_t>> group_tokens;
    size_t group_size = 0;
    const size_t max_group = std::min(kGroupPasses * pass_tokens(), kGroupTokens);
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
        continue_with(model_, s, tokens[i], nullptr, scratch_);
        continue;
      }
      const size_t size = s.history.size() + tokens[i].size();
      if (group_size > 0 && group_size + size > max_group) flush();
      group.push_back(&s);
      group_tokens.push_back(tokens[i]);
      group_size += size;
    }
    flush();
  }

  // Feeds the windows every known token, then moves the sessions whose history ends their unit
  // to the next one.
  void catch_up(std::span<Session* const> sessions) override {
    feed_windows(model_, sessions, scratch_);
    std::vector<RecGenState*> due;
    for (Session* s : sessions)
      if (group_done(model_.config(), *s)) due.push_back(&s->as<RecGenState>());
    if (!due.empty()) advance_groups(model_, due, scratch_);
  }

  void lanes(const Session& s, std::vector<Lane>& out) const override {
    window_lanes(model_.config(), s.as<RecGenState>(), static_cast<int64_t>(s.history.size()), out);
  }

  void rollback(Session& s) const override {
    truncate_windows(model_.config(), s.as<RecGenState>(), static_cast<int64_t>(s.history.size()));
  }

  bool rereads_history(const Session& s) const override { return !s.as<RecGenState>().generated; }

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
    flatbuffers::FlatBufferBuilder& b = out.builder();
    out.expect_bytes(r.top.bytes_in_use());
    const auto top = out.cache(r.top);
    const auto top_last = out.floats(r.top_last);
    std::vector<FbOffset<fb::Plan>> plans;
    for (size_t l = 2; l < r.plans.size(); ++l)
      plans.push_back(fb::CreatePlan(b, out.floats(r.plans[l])));
    const auto plan_states = b.CreateVector(plans);
    std::vector<FbOffset<fb::WindowState>> group;
    for (const Window& w : r.group) group.push_back(out.window(w));
    const auto windows = b.CreateVector(group);
    out.set_mode(
        fb::CreateRecGenState(b, top, top_last, plan_states, windows, r.group_start, r.generated));
  }

  void restore(Session& s, const StateReader& in) const override {
    const ModelConfig& c = model_.config();
    const fb::RecGenState& st = in.mode<fb::RecGenState>("RecGen");
    const int L = c.num_levels();
    const int64_t n = static_cast<int64_t>(s.history.size()), b2 = c.block_tokens(2);
    RecGenState& r = s.as<RecGenState>();
    r.group_start = st.group_start();
    // n == 0: a session saved before its first prefill, which builds every part from the prompt.
    StateReader::expect(r.group_start >= 0 && r.group_start % b2 == 0 && r.group_start <= n &&
                            n <= r.group_start + b2,
                        "the open unit does not match the history");
    in.cache(st.top(), r.top, r.group_start / c.block_tokens(L), "the top-level cache");
    in.floats(st.top_last(), r.top_last, "the last top-level state");
    r.has_top = r.group_start >= c.block_tokens(L);
    StateReader::expect(st.plans() && st.plans()->size() == static_cast<size_t>(L - 1),
                        "the plans are missing");
    for (int l = 2; l <= L; ++l) {
      const fb::Plan* p = st.plans()->Get(l - 2);
      StateReader::expect(p != nullptr, "a plan is missing");
      in.floats(p->values(), r.plans[l], "the plan of level " + std::to_string(l));
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
      const bool empty = n == 0 && w.consumed == 0 && w.n_outputs == 0;
      StateReader::expect(empty || (n > 0 && w.consumed == std::clamp<int64_t>(n - start, 0, c1) &&
                                    (w.n_outputs == std::min(w.consumed, c1 - 1) + 1 ||
                                     (w.n_outputs == 0 && w.consumed == c1))),
                          name + " does not match the history");
    }
    r.generated = st.generated();
  }

 private:
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
      std::vector<int> caps, units;
      for (int l = 1; l <= L; ++l) units.push_back(static_cast<int>(length / c.block_tokens(l)));
      caps.assign(units.begin(), units.end() - 1);
      caps.push_back(sessions[i]->as<RecGenState>().top.capacity);
      states[i].allocate_encoders(model_, caps, units, sessions[i]->kv_type);
    }
    const std::vector<std::span<const int32_t>> whole(prompts.begin(), prompts.end());
    std::vector<AppendJob> jobs;
    in_passes(sessions, whole, [&](const PrefillPass& pass) {
      jobs.clear();
      for (size_t k = 0; k < pass.index.size(); ++k) {
        const size_t i = pass.index[k];
        const std::span<const int32_t> slice = pass.slices[k];
        const size_t end = static_cast<size_t>(slice.data() - prompts[i].data()) + slice.size();
        jobs.push_back({&states[i], slice, whole[i].first(end), false});
      }
      hier_append(model_, jobs, scratch_.prompt);
    });
    for (size_t i = 0; i < n; ++i) sessions[i]->history = std::move(prompts[i]);
    start_from_prompts(model_, sessions, states, scratch_);
  }

  RecGenScratch scratch_;
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
