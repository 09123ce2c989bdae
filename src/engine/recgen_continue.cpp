// RecGen after generation takes known tokens as it takes the tokens it samples: each enters only
// its own level-1 window, whose outputs give the tokens' log-probabilities, and the latents above
// stay RecGen's own reconstructions instead of an encoding of the tokens.
#include <algorithm>

#include "engine/recgen_parts.h"
#include "engine/session.h"
#include "engine/weights.h"

namespace photon {

void continue_with(const Model& model, Session& s, std::span<const int32_t> tokens, float* logprobs,
                   RecGenScratch& scratch) {
  const ModelConfig& c = model.config();
  Backend& b = model.backend();
  const int c1 = c.level(1).chunk_len;
  RecGenState& r = s.as<RecGenState>();
  RecGenState* self = &r;
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
    if (group_done(c, s)) advance_groups(model, {&self, 1}, scratch);
    const int64_t next = static_cast<int64_t>(s.history.size());
    const int64_t n =
        std::min<int64_t>(static_cast<int64_t>(tokens.size() - at), group_end(c, r) - next);
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
    const Tensor inputs = scratch.embedded.get(b, static_cast<int64_t>(ids.size()), c.token_dim);
    b.embed(model.weights().tok_emb_dec, ids, inputs);
    jobs.clear();
    for (const Feed& f : feeds)
      if (f.count > 0) jobs.push_back({&r.group[f.window], {}, inputs.slice(f.first, f.count)});
    run_windows(model, 1, jobs, scratch.levels);
    if (logprobs) {
      // The token at offset k of its unit is predicted by its window's output k.
      const Tensor hidden = scratch.hidden.get(b, n, c.token_dim);
      rows.clear();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t offset = next + i - r.group_start;
        rows.push_back({hidden.row(i), r.group[offset / c1].output(offset % c1)});
      }
      b.copy_rows(rows);
      token_logprobs(model, hidden, chunk, logprobs + at, scratch.logits);
    }
    for (const Feed& f : feeds)
      if (f.completes) r.group[f.window].consumed = c1;
    s.history.insert(s.history.end(), chunk.begin(), chunk.end());
    r.generated = true;
    at += n;
  }
}

}  // namespace photon
