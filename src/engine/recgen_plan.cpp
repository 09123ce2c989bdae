// RecGen's plans (spec 5): above level 1 an open unit's child latents do not depend on sampled
// tokens, so a level-l window runs over the unit's prompt children and then on its own outputs,
// each output o_j being both the latent of child j and its input. Plans are computed top-down as
// soon as their unit opens: from a prompt, or when generation reaches the next level-2 unit.
#include "engine/recgen_parts.h"
#include "engine/session.h"
#include "engine/weights.h"

namespace photon {

namespace {

// Index in the parent's plan of the level-l unit that starts or holds position `pos`.
int64_t child_index(const ModelConfig& c, int level, int64_t pos) {
  return (pos / c.block_tokens(level)) % c.level(level + 1).chunk_len;
}

std::vector<Window>& plan_windows(const Model& model, int level, size_t n, RecGenScratch& scratch) {
  if (scratch.plan_windows.size() <= static_cast<size_t>(level))
    scratch.plan_windows.resize(level + 1);
  std::vector<Window>& windows = scratch.plan_windows[level];
  while (windows.size() < n) allocate_window(model, level, &windows.emplace_back(), DType::F32);
  return windows;
}

// Runs each state's level-l window over its open unit's prompt children, then on its own outputs:
// o_j for every child not entirely in the prompt is that child's latent (Xhat) and also its input
// y. All states step together.
void compute_plans(const Model& model, int level, std::span<RecGenState* const> states,
                   std::span<const Tensor> conds, std::span<const Tensor> prompt_children,
                   RecGenScratch& scratch) {
  Backend& b = model.backend();
  const int cl = model.config().level(level).chunk_len;
  const size_t n = states.size();
  std::vector<Window>& windows = plan_windows(model, level, n, scratch);
  std::vector<WindowJob> jobs;
  std::vector<RowCopy> copies;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& prompt = prompt_children[i];
    jobs.push_back({&windows[i], conds[i], prompt});
    if (prompt.rows > 0) copies.push_back({states[i]->plans[level].slice(0, prompt.rows), prompt});
  }
  b.copy_rows(copies);
  run_windows(model, level, jobs, scratch.levels);
  for (int j = 0; j < cl; ++j) {
    jobs.clear();
    copies.clear();
    for (size_t i = 0; i < n; ++i) {
      if (j < prompt_children[i].rows) continue;
      const Tensor row = states[i]->plans[level].row(j);
      copies.push_back({row, windows[i].output(j)});
      if (j + 1 < cl) jobs.push_back({&windows[i], {}, row});
    }
    b.copy_rows(copies);
    run_windows(model, level, jobs, scratch.levels);
  }
}

}  // namespace

void start_from_prompts(const Model& model, std::span<Session* const> sessions,
                        std::span<HierGenState> prompts, RecGenScratch& scratch) {
  const ModelConfig& c = model.config();
  const int L = c.num_levels();
  const size_t n = sessions.size();
  std::vector<RecGenState*> states(n);
  for (size_t i = 0; i < n; ++i) {
    RecGenState& r = sessions[i]->as<RecGenState>();
    r.top = std::move(prompts[i].level(L).encoder);  // the lower caches die with `prompts`
    r.top_last = std::move(prompts[i].top_last);
    r.has_top = prompts[i].has_top;
    states[i] = &r;
  }
  std::vector<Tensor> conds(n), children(n);
  for (int l = L; l >= 2; --l) {
    for (size_t i = 0; i < n; ++i) {
      const RecGenState& r = *states[i];
      conds[i] = l == L ? (r.has_top ? r.top_last.tensor() : model.weights().start)
                        : r.plans[l + 1].row(child_index(c, l, prompts[i].pos));
      children[i] = prompts[i].level(l).pending.slice(0, prompts[i].level(l).n_pending);
    }
    compute_plans(model, l, states, conds, children, scratch);
  }
  const int c1 = c.level(1).chunk_len;
  std::vector<int> first(n);
  std::vector<std::vector<int32_t>> open(n);
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int32_t>& history = sessions[i]->history;
    const int64_t pos = prompts[i].pos;
    states[i]->group_start = pos / c.block_tokens(2) * c.block_tokens(2);
    first[i] = static_cast<int>((pos - states[i]->group_start) / c1);
    open[i].assign(history.end() - pos % c1, history.end());
  }
  open_windows(model, states, first, open, scratch);
}

void advance_groups(const Model& model, std::span<RecGenState* const> states,
                    RecGenScratch& scratch) {
  const ModelConfig& c = model.config();
  const int L = c.num_levels();
  std::vector<EncodeJob> encodes;
  for (RecGenState* r : states) {
    if (group_end(c, *r) % c.block_tokens(L) == 0) {
      encodes.push_back({&r->top, r->plans[L], 1, r->top_last});
      r->has_top = true;
    }
  }
  encode_units(model, L, encodes, scratch.levels);
  std::vector<RecGenState*> opening;
  std::vector<Tensor> conds, none;
  for (int l = L; l >= 2; --l) {
    opening.clear();
    conds.clear();
    none.clear();
    for (RecGenState* r : states) {
      const int64_t pos = group_end(c, *r);
      if (pos % c.block_tokens(l) != 0) continue;
      opening.push_back(r);
      conds.push_back(l == L ? r->top_last.tensor() : r->plans[l + 1].row(child_index(c, l, pos)));
      none.emplace_back();
    }
    compute_plans(model, l, opening, conds, none, scratch);
  }
  for (RecGenState* r : states) r->group_start = group_end(c, *r);
  const std::vector<int> first(states.size(), 0);
  const std::vector<std::vector<int32_t>> open(states.size());
  open_windows(model, states, first, open, scratch);
}

}  // namespace photon
