#include "engine/hiergen.h"

#include <algorithm>
#include <optional>

#include "engine/score.h"
#include "engine/session.h"
#include "engine/session_state.h"
#include "engine/weights.h"

namespace photon {

void HierGenState::allocate_encoders(const Model& model, std::span<const int> encoder_capacity,
                                     std::span<const int> first_units, DType kv_type) {
  const ModelConfig& c = model.config();
  Backend& b = model.backend();
  const int L = c.num_levels();
  levels.clear();
  levels.resize(L);
  for (int l = 1; l <= L; ++l) {
    HierLevel& lv = level(l);
    const StackConfig& enc = c.level(l).encoder;
    const int first = first_units.empty() ? KvCache::kFirstPositions : first_units[l - 1];
    lv.encoder.allocate(b, enc.layers, encoder_capacity[l - 1], enc.kv_dim(), kv_type, first);
    lv.pending = zero_matrix(b, c.level(l).chunk_len, c.latent_dim(l - 1), "pending children");
  }
  top_last = zero_matrix(b, 1, c.latent_dim(L), "top-level state");
  has_top = false;
  pos = 0;
}

void HierGenState::allocate(const Model& model, std::span<const int> encoder_capacity,
                            DType kv_type) {
  allocate_encoders(model, encoder_capacity, {}, kv_type);
  for (int l = 1; l <= model.config().num_levels(); ++l)
    allocate_window(model, l, &level(l).window, kv_type);
}

Tensor top_conditioner(const Model& model, const HierGenState& st) {
  return st.has_top ? st.top_last.tensor() : model.weights().start;
}

void hier_append(const Model& model, std::span<const AppendJob> jobs, HierScratch& scratch) {
  Backend& b = model.backend();
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int L = c.num_levels();
  const size_t n = jobs.size();
  // Bottom-up: the new latents of level l - 1 join the open unit's pending children; every C_l of
  // them form a complete unit that the level-l encoder consumes. Rows of `fresh` are the jobs'
  // new latents, job after job.
  std::vector<int32_t> ids;
  std::vector<int64_t> n_fresh(n), units(n), first_row(n), first_unit(n);
  for (size_t i = 0; i < n; ++i) {
    ids.insert(ids.end(), jobs[i].tokens.begin(), jobs[i].tokens.end());
    n_fresh[i] = static_cast<int64_t>(jobs[i].tokens.size());
  }
  Scratch* fresh_scratch = &scratch.latent_a;
  Scratch* encoded_scratch = &scratch.latent_b;
  Tensor fresh = fresh_scratch->get(b, static_cast<int64_t>(ids.size()), c.embed_dim);
  b.embed(w.tok_emb_enc, ids, fresh);
  std::vector<EncodeJob> encodes;
  std::vector<RowCopy> copies;
  for (int l = 1; l <= L; ++l) {
    const int cl = c.level(l).chunk_len, dp = c.latent_dim(l - 1), dl = c.latent_dim(l);
    int64_t rows = 0, all_units = 0, fresh_rows = 0;
    for (size_t i = 0; i < n; ++i) {
      const HierLevel& lv = jobs[i].state->level(l);
      units[i] = (lv.n_pending + n_fresh[i]) / cl;
      first_row[i] = rows;
      first_unit[i] = all_units;
      if (n_fresh[i] > 0) rows += lv.n_pending + n_fresh[i];
      all_units += units[i];
    }
    if (rows == 0) break;
    const Tensor all = scratch.pending.get(b, rows, dp);            // [rows, D_{l-1}]
    const Tensor encoded = encoded_scratch->get(b, all_units, dl);  // [units, D_l]
    copies.clear();
    encodes.clear();
    for (size_t i = 0; i < n; ++i) {
      if (n_fresh[i] == 0) continue;
      HierLevel& lv = jobs[i].state->level(l);
      const Tensor mine = all.slice(first_row[i], lv.n_pending + n_fresh[i]);
      copies.push_back({mine.slice(0, lv.n_pending), lv.pending.slice(0, lv.n_pending)});
      copies.push_back({mine.slice(lv.n_pending, n_fresh[i]), fresh.slice(fresh_rows, n_fresh[i])});
      fresh_rows += n_fresh[i];
      if (units[i] > 0)
        encodes.push_back({&lv.encoder, mine.slice(0, units[i] * cl), static_cast<int>(units[i]),
                           encoded.slice(first_unit[i], units[i])});
    }
    b.copy_rows(copies);
    encode_units(model, l, encodes, scratch.levels);
    copies.clear();
    for (size_t i = 0; i < n; ++i) {
      if (n_fresh[i] == 0) continue;
      HierGenState& st = *jobs[i].state;
      HierLevel& lv = st.level(l);
      const int64_t left = lv.n_pending + n_fresh[i] - units[i] * cl;
      copies.push_back({lv.pending.slice(0, left), all.slice(first_row[i] + units[i] * cl, left)});
      lv.n_pending = static_cast<int>(left);
      if (l == L && units[i] > 0) {
        copies.push_back({st.top_last, encoded.row(first_unit[i] + units[i] - 1)});
        st.has_top = true;
      }
    }
    b.copy_rows(copies);
    std::swap(fresh_scratch, encoded_scratch);
    fresh = encoded;
    n_fresh = units;
  }
  for (const AppendJob& job : jobs) job.state->pos += static_cast<int64_t>(job.tokens.size());
  std::vector<AppendJob> opening;
  for (const AppendJob& job : jobs)
    if (job.open_windows) opening.push_back(job);
  if (!opening.empty()) open_hier_windows(model, opening, scratch);
}

void open_hier_windows(const Model& model, std::span<const AppendJob> jobs, HierScratch& scratch) {
  Backend& b = model.backend();
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int L = c.num_levels();
  std::vector<int32_t> ids;
  // Top-down: each level's open unit gets a fresh window over its complete children.
  std::vector<WindowJob> windows;
  for (int l = L; l >= 1; --l) {
    Tensor embedded;
    if (l == 1) {
      ids.clear();
      for (const AppendJob& job : jobs) {
        const int open = job.state->level(1).n_pending;
        ids.insert(ids.end(), job.history.end() - open, job.history.end());
      }
      embedded = scratch.embedded.get(b, static_cast<int64_t>(ids.size()), c.token_dim);
      b.embed(w.tok_emb_dec, ids, embedded);
    }
    windows.clear();
    int64_t row = 0;
    for (const AppendJob& job : jobs) {
      HierGenState& st = *job.state;
      HierLevel& lv = st.level(l);
      const Tensor cond = l == L ? top_conditioner(model, st) : st.level(l + 1).window.latest();
      Tensor inputs = lv.pending.slice(0, lv.n_pending);
      if (l == 1) {
        inputs = embedded.slice(row, lv.n_pending);
        row += lv.n_pending;
      }
      windows.push_back({&lv.window, cond, inputs});
    }
    run_windows(model, l, windows, scratch.levels);
  }
}

void hier_step(const Model& model, std::span<HierGenState* const> states,
               std::span<const int32_t> tokens, HierScratch& scratch) {
  Backend& b = model.backend();
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int L = c.num_levels();
  const int64_t n = static_cast<int64_t>(states.size());
  // Row a of `latent` is the completed child's encoder state (chunker input) of the a-th active
  // state, row a of `input` what its parent's window reads for it (tok_emb_dec at level 1, the same
  // encoder state above).
  Scratch* latent_scratch = &scratch.latent_a;
  Scratch* next_scratch = &scratch.latent_b;
  Tensor latent = latent_scratch->get(b, n, c.embed_dim);
  Tensor input = scratch.embedded.get(b, n, c.token_dim);
  b.embed(w.tok_emb_enc, tokens, latent);
  b.embed(w.tok_emb_dec, tokens, input);
  // Highest level whose window got a new output (L + 1: a new top unit).
  std::vector<int> changed(states.size(), L + 1);
  std::vector<size_t> active(states.size());
  for (size_t i = 0; i < active.size(); ++i) active[i] = i;
  std::vector<WindowJob> feeds;
  std::vector<EncodeJob> encodes;
  std::vector<size_t> completing;
  std::vector<RowCopy> copies;
  for (int l = 1; l <= L && !active.empty(); ++l) {
    const int cl = c.level(l).chunk_len;
    int64_t n_complete = 0;
    for (size_t i : active) n_complete += states[i]->level(l).n_pending + 1 == cl ? 1 : 0;
    const Tensor next = next_scratch->get(b, n_complete, c.latent_dim(l));
    feeds.clear();
    encodes.clear();
    completing.clear();
    copies.clear();
    for (size_t a = 0; a < active.size(); ++a) {
      const size_t i = active[a];
      HierLevel& lv = states[i]->level(l);
      copies.push_back({lv.pending.row(lv.n_pending), latent.row(static_cast<int64_t>(a))});
      if (++lv.n_pending < cl) {
        feeds.push_back({&lv.window, {}, input.row(static_cast<int64_t>(a))});
        changed[i] = l;
      } else {
        encodes.push_back(
            {&lv.encoder, lv.pending, 1, next.row(static_cast<int64_t>(completing.size()))});
        completing.push_back(i);
      }
    }
    b.copy_rows(copies);
    run_windows(model, l, feeds, scratch.levels);
    encode_units(model, l, encodes, scratch.levels);
    copies.clear();
    for (size_t k = 0; k < completing.size(); ++k) {
      HierGenState& st = *states[completing[k]];
      st.level(l).n_pending = 0;
      if (l == L) {
        copies.push_back({st.top_last, next.row(static_cast<int64_t>(k))});
        st.has_top = true;
      }
    }
    b.copy_rows(copies);
    active.swap(completing);
    latent = input = next;
    std::swap(latent_scratch, next_scratch);
  }
  for (HierGenState* st : states) st->pos += 1;
  std::vector<WindowJob> opens;
  for (int l = L; l >= 1; --l) {
    opens.clear();
    for (size_t i = 0; i < states.size(); ++i) {
      if (changed[i] - 1 < l) continue;
      HierGenState& st = *states[i];
      const Tensor cond = l == L ? top_conditioner(model, st) : st.level(l + 1).window.latest();
      opens.push_back({&st.level(l).window, cond, {}});
    }
    run_windows(model, l, opens, scratch.levels);
  }
}

namespace {

std::vector<int> encoder_capacities(const ModelConfig& c, int64_t tokens) {
  std::vector<int> caps;
  for (int l = 1; l <= c.num_levels(); ++l)
    caps.push_back(static_cast<int>(tokens / c.block_tokens(l)));
  return caps;
}

class HierGenRunner final : public Runner {
 public:
  using Runner::Runner;

  // Runs a prefill; when a cancellation stops it between slices, the states whose last slice
  // skipped its windows get them first, since a cancelled prefill keeps what it consumed.
  template <class Prefill>
  void stop_with_windows(const std::vector<AppendJob>& stale, Prefill prefill) {
    try {
      prefill();
    } catch (const Error& e) {
      if (e.status() == PHOTON_ERR_CANCELLED && !stale.empty())
        open_hier_windows(model_, stale, scratch_);
      throw;
    }
  }

  void init(Session& s) const override {
    s.state.emplace<HierGenState>().allocate(model_, encoder_capacities(model_.config(), s.context),
                                             s.kv_type);
  }

  void prefill(Session& s, std::span<const int32_t> tokens, float* logprobs) override {
    if (logprobs) teacher_forced_logprobs(model_, s.history, tokens, logprobs);
    Session* self = &s;
    catch_up({&self, 1});
    HierGenState& st = s.as<HierGenState>();
    std::vector<AppendJob> stale;  // the last slice, when its windows were skipped
    stop_with_windows(stale, [&] {
      for (size_t at = 0; at < tokens.size(); at += kPrefillSlice) {
        s.check_cancel();
        const auto slice = tokens.subspan(at, std::min(kPrefillSlice, tokens.size() - at));
        s.history.insert(s.history.end(), slice.begin(), slice.end());
        const AppendJob job{&st, slice, s.history, at + slice.size() == tokens.size()};
        hier_append(model_, {&job, 1}, scratch_);
        stale.assign(job.open_windows ? 0 : 1, job);
      }
    });
  }

  void prefill_batch(std::span<Session* const> sessions,
                     std::span<const std::span<const int32_t>> tokens) override {
    catch_up(sessions);
    std::vector<AppendJob> jobs;
    // By session: its last slice, when its windows were skipped (more slices follow).
    std::vector<std::optional<AppendJob>> skipped(sessions.size());
    std::vector<AppendJob> stale;
    stop_with_windows(stale, [&] {
      in_passes(sessions, tokens, [&](const PrefillPass& pass) {
        jobs.clear();
        for (size_t k = 0; k < pass.sessions.size(); ++k) {
          Session& s = *pass.sessions[k];
          const std::span<const int32_t> slice = pass.slices[k], all = tokens[pass.index[k]];
          s.history.insert(s.history.end(), slice.begin(), slice.end());
          jobs.push_back({&s.as<HierGenState>(), slice, s.history,
                          slice.data() + slice.size() == all.data() + all.size()});
        }
        hier_append(model_, jobs, scratch_);
        stale.clear();
        for (size_t k = 0; k < jobs.size(); ++k)
          skipped[pass.index[k]] = jobs[k].open_windows ? std::nullopt : std::optional(jobs[k]);
        for (const std::optional<AppendJob>& job : skipped)
          if (job) stale.push_back(*job);
      });
    });
  }

  // Delivered tokens are consumed lazily, one step per lagging session per round; sampled ones
  // only once they are delivered.
  void catch_up(std::span<Session* const> sessions) override {
    std::vector<HierGenState*> states;
    std::vector<int32_t> tokens;
    for (;;) {
      states.clear();
      tokens.clear();
      for (Session* s : sessions) {
        HierGenState& st = s->as<HierGenState>();
        if (st.pos < static_cast<int64_t>(s->history.size())) {
          states.push_back(&st);
          tokens.push_back(s->history[st.pos]);
        }
      }
      if (states.empty()) return;
      hier_step(model_, states, tokens, scratch_);
    }
  }

  void lanes(const Session& s, std::vector<Lane>& out) const override {
    out.assign(1, {static_cast<int64_t>(s.history.size()), s.as<HierGenState>().hidden()});
  }

  KvBytes kv_bytes(const Session& s, int level) const override {
    const HierLevel& lv = s.as<HierGenState>().level(level);
    return {lv.encoder.bytes_in_use(), lv.window.cache.bytes_in_use()};
  }

  void save(const Session& s, StateWriter& out) const override {
    const ModelConfig& c = model_.config();
    const HierGenState& st = s.as<HierGenState>();
    uint64_t bytes = 0;
    for (const HierLevel& lv : st.levels)
      bytes += lv.encoder.bytes_in_use() + lv.window.cache.bytes_in_use();
    out.expect_bytes(bytes);
    std::vector<FbOffset<fb::LevelState>> levels;
    for (int l = 1; l <= c.num_levels(); ++l) {
      const HierLevel& lv = st.level(l);
      const auto encoder = out.cache(lv.encoder);
      const auto pending = out.floats(lv.pending.slice(0, lv.n_pending));
      const auto window = out.window(lv.window);
      levels.push_back(fb::CreateLevelState(out.builder(), encoder, pending, lv.n_pending, window));
    }
    const auto level_states = out.builder().CreateVector(levels);
    const auto top_last = out.floats(st.top_last);
    out.set_mode(fb::CreateHierGenState(out.builder(), st.pos, level_states, top_last));
  }

  void restore(Session& s, const StateReader& in) const override {
    const ModelConfig& c = model_.config();
    const fb::HierGenState& state = in.mode<fb::HierGenState>("HierGen");
    const int L = c.num_levels();
    const int64_t consumed = state.consumed();
    StateReader::expect(consumed >= 0 && consumed <= static_cast<int64_t>(s.history.size()),
                        "the consumed count is invalid");
    HierGenState& st = s.as<HierGenState>();
    StateReader::expect(state.levels() && state.levels()->size() == static_cast<size_t>(L),
                        "the level states are missing");
    for (int l = 1; l <= L; ++l) {
      const fb::LevelState* level = state.levels()->Get(l - 1);
      HierLevel& lv = st.level(l);
      const std::string name = "level " + std::to_string(l);
      StateReader::expect(level != nullptr, name + " is missing");
      in.cache(level->encoder(), lv.encoder, consumed / c.block_tokens(l), name + " encoder cache");
      const int n_pending =
          static_cast<int>((consumed / c.block_tokens(l - 1)) % c.level(l).chunk_len);
      StateReader::expect(level->n_pending() == n_pending,
                          name + " has the wrong number of pending children");
      in.floats(level->pending(), lv.pending.slice(0, n_pending), name + " pending children");
      lv.n_pending = n_pending;
      in.window(level->window(), lv.window, name + " window");
      StateReader::expect(consumed == 0 || lv.window.n_outputs == n_pending + 1,
                          name + " window does not match its children");
    }
    in.floats(state.top_last(), st.top_last, "the last top-level state");
    st.has_top = consumed >= c.block_tokens(L);
    st.pos = consumed;
  }

 private:
  HierScratch scratch_;
};

}  // namespace

std::unique_ptr<Runner> make_hiergen_runner(const Model& model) {
  return std::make_unique<HierGenRunner>(model);
}

}  // namespace photon
