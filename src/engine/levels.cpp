#include "engine/levels.h"

#include <algorithm>
#include <vector>

namespace photon {

void allocate_window(const Model& model, int level, Window* window, DType kv_type) {
  const ModelConfig& c = model.config();
  const StackConfig& dec = c.level(level).decoder;
  window->allocate(model.backend(), dec.layers, dec.kv_dim(), c.level(level).prefix_len,
                   c.level(level).chunk_len, c.decoder_dim(level), kv_type);
}

void encode_units(const Model& model, int level, std::span<const EncodeJob> jobs,
                  LevelScratch& scratch) {
  Backend& b = model.backend();
  const ModelConfig& c = model.config();
  const LevelConfig& lc = c.level(level);
  const LevelWeights& lw = model.weights().level(level);
  const int width = lc.chunk_len * c.latent_dim(level - 1), d = lc.dim;
  int units = 0;
  for (const EncodeJob& j : jobs) units += j.units;
  if (units == 0) return;
  // a_u = chunker(concat of children): the children of a unit are consecutive rows, so the concat
  // is the same memory read as a [units, C D_{l-1}] matrix. Every job's units are gathered into one
  // matrix, so that a linear chunker normalises and projects them in one op each (RecGen's sessions
  // close a unit each at the same step).
  const Tensor x = scratch.rows.get(b, units, d);  // [units, D_l]
  const bool concat = lc.chunker == ChunkerKind::Concat;
  const Tensor chunk = concat ? x : scratch.chunk.get(b, units, width);  // [units, C D_{l-1}]
  std::vector<RowCopy> copies;
  std::vector<StackSegment> segments;
  int row = 0;
  for (const EncodeJob& j : jobs) {
    copies.push_back({chunk.slice(row, j.units), j.children.view(j.units, width)});
    segments.push_back({j.cache, j.units});
    row += j.units;
  }
  b.copy_rows(copies);
  if (!concat) {
    b.rmsnorm(chunk, lw.chunker_norm, chunk, c.norm_eps);
    b.linear(chunk, lw.chunker_w, &lw.chunker_b, x, false);
  }
  stack_forward(b, lw.encoder, c.norm_eps, c.rope_theta, x, segments, scratch.stack);
  copies.clear();
  row = 0;
  for (const EncodeJob& j : jobs) {
    copies.push_back({j.out, x.slice(row, j.units)});
    row += j.units;
  }
  b.copy_rows(copies);
}

void run_windows(const Model& model, int level, std::span<const WindowJob> jobs,
                 LevelScratch& scratch) {
  Backend& b = model.backend();
  const ModelConfig& c = model.config();
  const LevelConfig& lc = c.level(level);
  const LevelWeights& lw = model.weights().level(level);
  const int r = lc.prefix_len, e = c.decoder_dim(level), d = lc.dim;
  // Prefixes of all opening windows in one GEMM: converter(cond) read as R rows of width E.
  int opening = 0, rows = 0;
  for (const WindowJob& j : jobs) {
    const bool opens = j.cond.buffer != nullptr;
    opening += opens ? 1 : 0;
    rows += (opens ? r : 0) + static_cast<int>(j.inputs.rows);
  }
  if (rows == 0) return;
  std::vector<RowCopy> copies;
  const Tensor cond = scratch.cond.get(b, opening, d);         // [opening, D_l]
  const Tensor prefix = scratch.chunk.get(b, opening, r * e);  // [opening, R E_l]
  int o = 0;
  for (const WindowJob& j : jobs)
    if (j.cond.buffer) copies.push_back({cond.row(o++), j.cond});
  b.copy_rows(copies);
  if (opening > 0) b.linear(cond, lw.converter_w, &lw.converter_b, prefix, false);

  const Tensor x = scratch.rows.get(b, rows, e);  // [rows, E_l]
  copies.clear();
  std::vector<StackSegment> segments;
  int row = 0;
  o = 0;
  for (const WindowJob& j : jobs) {
    Window& w = *j.window;
    const bool opens = j.cond.buffer != nullptr;
    const int n_inputs = static_cast<int>(j.inputs.rows);
    int n = n_inputs;
    if (opens) {
      w.cache.len = 0;
      w.n_outputs = w.consumed = 0;
      copies.push_back({x.slice(row, r), prefix.row(o++).view(r, e)});
      n += r;
    }
    if (w.n_outputs + n_inputs + (opens ? 1 : 0) > w.chunk_len)
      fail(PHOTON_ERR_INTERNAL, "run_windows: more children than the unit has");
    if (n_inputs > 0) copies.push_back({x.slice(row + n - n_inputs, n_inputs), j.inputs});
    segments.push_back({&w.cache, n});
    row += n;
  }
  b.copy_rows(copies);
  stack_forward(b, lw.decoder, c.norm_eps, c.rope_theta, x, segments, scratch.stack);
  copies.clear();
  row = 0;
  for (const WindowJob& j : jobs) {
    Window& w = *j.window;
    const bool opens = j.cond.buffer != nullptr;
    const int n_inputs = static_cast<int>(j.inputs.rows);
    const int n = (opens ? r : 0) + n_inputs;
    // The outputs are the rows at positions R - 1, R, ...: the last n_inputs + (opened) rows.
    const int produced = n_inputs + (opens ? 1 : 0);
    copies.push_back(
        {w.outputs.slice(w.n_outputs, produced), x.slice(row + n - produced, produced)});
    w.n_outputs += produced;
    w.consumed += n_inputs;
    row += n;
  }
  b.copy_rows(copies);
}

void token_logprobs(const Model& model, const Tensor& hidden, std::span<const int32_t> tokens,
                    float* out, Scratch& logits, TopRows top) {
  Backend& b = model.backend();
  const int v = model.config().vocab_size;
  constexpr int kBlock = 64;
  for (size_t r0 = 0; r0 < tokens.size(); r0 += kBlock) {
    const int n = static_cast<int>(std::min<size_t>(kBlock, tokens.size() - r0));
    const Tensor block = logits.get(b, n, v);
    b.linear(hidden.slice(static_cast<int64_t>(r0), n), model.weights().lm_head, nullptr, block,
             false);
    b.logprobs(block, tokens.subspan(r0, n), out + r0, top.from(static_cast<int64_t>(r0)));
  }
}

}  // namespace photon
