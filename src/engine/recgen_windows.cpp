// RecGen's level-1 windows: one per level-1 unit of the open level-2 unit, opened together from
// the unit's plan. A window consumes its own unit's tokens as soon as they are known (delivered,
// or sampled ahead of delivery), so every unfinished window has a lane: the windows of a unit
// decode side by side.
#include <algorithm>

#include "engine/recgen_parts.h"
#include "engine/session.h"
#include "engine/weights.h"

namespace photon {

void open_windows(const Model& model, std::span<RecGenState* const> states,
                  std::span<const int> first_window,
                  std::span<const std::vector<int32_t>> open_tokens, RecGenScratch& scratch) {
  const ModelConfig& c = model.config();
  const int c1 = c.level(1).chunk_len;
  std::vector<int32_t> ids;
  for (const std::vector<int32_t>& t : open_tokens) ids.insert(ids.end(), t.begin(), t.end());
  const Tensor inputs =
      scratch.embedded.get(model.backend(), static_cast<int64_t>(ids.size()), c.token_dim);
  model.backend().embed(model.weights().tok_emb_dec, ids, inputs);
  std::vector<WindowJob> jobs;
  int64_t row = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    RecGenState& r = *states[i];
    const int64_t n_open = static_cast<int64_t>(open_tokens[i].size());
    for (int j = 0; j < static_cast<int>(r.group.size()); ++j) {
      if (j < first_window[i]) {
        r.group[j].cache.len = r.group[j].n_outputs = 0;  // finished inside the prompt
        r.group[j].consumed = c1;
        continue;
      }
      const bool open = j == first_window[i];
      jobs.push_back({&r.group[j], r.plans[2].row(j), open ? inputs.slice(row, n_open) : Tensor{}});
    }
    row += n_open;
  }
  run_windows(model, 1, jobs, scratch.levels);
}

void feed_windows(const Model& model, std::span<Session* const> sessions, RecGenScratch& scratch) {
  const ModelConfig& c = model.config();
  const int c1 = c.level(1).chunk_len;
  struct Feed {
    Window* window;
    int64_t first, count;  // the window's inputs: rows of the embedded ids
    bool completes;        // it takes its unit's last token, which needs no output after it
  };
  std::vector<Feed> feeds;
  std::vector<int32_t> ids;
  for (Session* s : sessions) {
    RecGenState& r = s->as<RecGenState>();
    const int64_t delivered = static_cast<int64_t>(s->history.size());
    for (int j = 0; j < static_cast<int>(r.group.size()); ++j) {
      Window& w = r.group[j];
      const int64_t start = r.group_start + static_cast<int64_t>(j) * c1;
      Feed f{&w, static_cast<int64_t>(ids.size()), 0, false};
      for (int k = w.consumed; k < c1; ++k) {
        const int64_t position = start + k;
        int32_t token = 0;
        if (position < delivered) {
          token = s->history[position];
        } else {
          const auto ahead = s->stream.ahead.find(position);
          if (ahead == s->stream.ahead.end()) break;
          token = ahead->second.token;
        }
        if (k + 1 == c1) {
          f.completes = true;
        } else {
          ids.push_back(token);
          ++f.count;
        }
      }
      if (f.count == 0 && !f.completes) continue;
      feeds.push_back(f);
      r.generated = true;  // the prompt's tokens entered the windows when they opened
    }
  }
  if (feeds.empty()) return;
  const Tensor inputs =
      scratch.embedded.get(model.backend(), static_cast<int64_t>(ids.size()), c.token_dim);
  model.backend().embed(model.weights().tok_emb_dec, ids, inputs);
  std::vector<WindowJob> jobs;
  for (const Feed& f : feeds)
    if (f.count > 0) jobs.push_back({f.window, {}, inputs.slice(f.first, f.count)});
  run_windows(model, 1, jobs, scratch.levels);
  for (const Feed& f : feeds)
    if (f.completes) f.window->consumed = c1;
}

void window_lanes(const ModelConfig& c, const RecGenState& r, int64_t next,
                  std::vector<Lane>& out) {
  out.clear();
  const int c1 = c.level(1).chunk_len;
  for (int j = static_cast<int>((next - r.group_start) / c1); j < static_cast<int>(r.group.size());
       ++j) {
    const Window& w = r.group[j];
    if (w.consumed >= c1) continue;
    out.push_back({r.group_start + static_cast<int64_t>(j) * c1 + w.consumed, w.latest()});
  }
}

void truncate_windows(const ModelConfig& c, RecGenState& r, int64_t committed) {
  const int c1 = c.level(1).chunk_len;
  for (int j = 0; j < static_cast<int>(r.group.size()); ++j) {
    const int64_t start = r.group_start + static_cast<int64_t>(j) * c1;
    const int allowed = static_cast<int>(std::clamp<int64_t>(committed - start, 0, c1));
    if (r.group[j].consumed > allowed) r.group[j].truncate(allowed);
  }
}

}  // namespace photon
