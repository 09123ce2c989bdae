#include "engine/photon_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/gemm.h"
#include "cpu/rmsnorm.h"
#include "cpu/softmax.h"

namespace photon {

void gather_rows(const float* table, int dim, std::span<const int32_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i)
    std::memcpy(out + i * dim, table + static_cast<size_t>(ids[i]) * dim, dim * sizeof(float));
}

void allocate_window(const Model& model, int level, Window* window) {
  const ModelConfig& c = model.config();
  const StackConfig& dec = c.level(level).decoder;
  window->allocate(dec.layers, dec.kv_dim(), c.level(level).prefix_len, c.level(level).chunk_len,
                   c.decoder_dim(level));
}

void encode_units(const Model& model, int level, std::span<const EncodeJob> jobs, Scratch& s) {
  const ModelConfig& c = model.config();
  const LevelConfig& lc = c.level(level);
  const LevelWeights& lw = model.weights().level(level);
  const int width = lc.chunk_len * c.latent_dim(level - 1), d = lc.dim;
  int units = 0;
  for (const EncodeJob& j : jobs) units += j.units;
  if (units == 0) return;
  // a_u = chunker(concat of children): the children of a unit are consecutive rows, so the concat
  // is the same memory read as a [units, C D_{l-1}] matrix.
  s.x.resize(static_cast<size_t>(units) * d);
  std::vector<StackSegment> segments;
  size_t row = 0;
  for (const EncodeJob& j : jobs) {
    const size_t n = static_cast<size_t>(j.units) * width;
    if (lc.chunker == ChunkerKind::Concat) {
      std::memcpy(s.x.data() + row * d, j.children, n * sizeof(float));
    } else {
      s.chunk.resize(n);
      cpu::rmsnorm(j.children, lw.chunker_norm, s.chunk.data(), j.units, width, c.norm_eps);
      cpu::linear(s.chunk.data(), j.units, width, lw.chunker_w, d, lw.chunker_b,
                  s.x.data() + row * d);
    }
    segments.push_back({j.cache, j.units});
    row += j.units;
  }
  stack_forward(lw.encoder, c.norm_eps, c.rope_theta, s.x.data(), segments, s.stack);
  row = 0;
  for (const EncodeJob& j : jobs) {
    std::memcpy(j.out, s.x.data() + row * d, static_cast<size_t>(j.units) * d * sizeof(float));
    row += j.units;
  }
}

void run_windows(const Model& model, int level, std::span<const WindowJob> jobs, Scratch& s) {
  const ModelConfig& c = model.config();
  const LevelConfig& lc = c.level(level);
  const LevelWeights& lw = model.weights().level(level);
  const int r = lc.prefix_len, e = c.decoder_dim(level), d = lc.dim;
  // Prefixes of all opening windows in one GEMM: converter(cond) read as R rows of width E.
  int opening = 0, rows = 0;
  for (const WindowJob& j : jobs) {
    opening += j.cond ? 1 : 0;
    rows += (j.cond ? r : 0) + j.n_inputs;
  }
  if (rows == 0) return;
  s.cond.resize(static_cast<size_t>(opening) * d);
  s.chunk.resize(static_cast<size_t>(opening) * r * e);
  int o = 0;
  for (const WindowJob& j : jobs)
    if (j.cond)
      std::memcpy(s.cond.data() + static_cast<size_t>(o++) * d, j.cond, d * sizeof(float));
  cpu::linear(s.cond.data(), opening, d, lw.converter_w, r * e, lw.converter_b, s.chunk.data());

  s.x.resize(static_cast<size_t>(rows) * e);
  std::vector<StackSegment> segments;
  size_t row = 0;
  o = 0;
  for (const WindowJob& j : jobs) {
    Window& w = *j.window;
    int n = j.n_inputs;
    if (j.cond) {
      w.cache.len = 0;
      w.n_outputs = w.consumed = 0;
      std::memcpy(s.x.data() + row * e, s.chunk.data() + static_cast<size_t>(o++) * r * e,
                  static_cast<size_t>(r) * e * sizeof(float));
      n += r;
    }
    if (w.n_outputs + j.n_inputs + (j.cond ? 1 : 0) > w.chunk_len)
      fail(PHOTON_ERR_INTERNAL, "run_windows: more children than the unit has");
    if (j.n_inputs > 0)
      std::memcpy(s.x.data() + (row + n - j.n_inputs) * e, j.inputs,
                  static_cast<size_t>(j.n_inputs) * e * sizeof(float));
    segments.push_back({&w.cache, n});
    row += n;
  }
  stack_forward(lw.decoder, c.norm_eps, c.rope_theta, s.x.data(), segments, s.stack);
  row = 0;
  for (const WindowJob& j : jobs) {
    Window& w = *j.window;
    const int n = (j.cond ? r : 0) + j.n_inputs;
    // The outputs are the rows at positions R - 1, R, ...: the last n_inputs + (opened) rows.
    const int produced = j.n_inputs + (j.cond ? 1 : 0);
    std::memcpy(w.outputs.data() + static_cast<size_t>(w.n_outputs) * e,
                s.x.data() + (row + n - produced) * e,
                static_cast<size_t>(produced) * e * sizeof(float));
    w.n_outputs += produced;
    w.consumed += j.n_inputs;
    row += n;
  }
}

void token_logprobs(const Model& model, const float* hidden, std::span<const int32_t> tokens,
                    float* out, Scratch& s) {
  const ModelConfig& c = model.config();
  const int dim = c.arch == Arch::Vanilla ? c.dim : c.token_dim, v = c.vocab_size;
  constexpr int kBlock = 64;
  for (size_t r0 = 0; r0 < tokens.size(); r0 += kBlock) {
    const int n = static_cast<int>(std::min<size_t>(kBlock, tokens.size() - r0));
    s.logits.resize(static_cast<size_t>(n) * v);
    cpu::linear(hidden + r0 * dim, n, dim, model.weights().lm_head, v, nullptr, s.logits.data());
    for (int i = 0; i < n; ++i) {
      const float* row = s.logits.data() + static_cast<size_t>(i) * v;
      out[r0 + i] = static_cast<float>(row[tokens[r0 + i]] - cpu::log_sum_exp(row, v));
    }
  }
}

namespace {

void score_vanilla(const Model& model, std::span<const int32_t> tokens, float* out, Scratch& s) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int t = static_cast<int>(tokens.size());
  std::vector<float> x(static_cast<size_t>(t) * c.dim);
  gather_rows(w.tok_emb, c.dim, tokens, x.data());
  KvCache cache;
  cache.allocate(c.stack.layers, t, c.stack.kv_dim());
  const StackSegment segment{&cache, t};
  stack_forward(w.stack, c.norm_eps, c.rope_theta, x.data(), {&segment, 1}, s.stack);
  // Row i predicts token i + 1 (spec section 4).
  token_logprobs(model, x.data(), tokens.subspan(1), out + 1, s);
}

void score_photon(const Model& model, std::span<const int32_t> tokens, float* out, Scratch& s) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  const int L = c.num_levels();
  const int64_t t = static_cast<int64_t>(tokens.size());
  // Encoder, bottom-up over complete units (spec 3.2): X[l] holds M[l] rows of D_l.
  std::vector<std::vector<float>> X(L + 1);
  std::vector<int64_t> M(L + 1), N(L + 1);
  X[0].resize(static_cast<size_t>(t) * c.embed_dim);
  gather_rows(w.tok_emb_enc, c.embed_dim, tokens, X[0].data());
  M[0] = N[0] = t;
  for (int l = 1; l <= L; ++l) {
    M[l] = M[l - 1] / c.level(l).chunk_len;
    N[l] = (t + c.block_tokens(l) - 1) / c.block_tokens(l);  // units holding at least one token
    X[l].resize(static_cast<size_t>(M[l]) * c.latent_dim(l));
    if (M[l] == 0) continue;
    KvCache cache;
    cache.allocate(c.level(l).encoder.layers, static_cast<int>(M[l]), c.level(l).encoder.kv_dim());
    const EncodeJob job{&cache, X[l - 1].data(), static_cast<int>(M[l]), X[l].data()};
    encode_units(model, l, {&job, 1}, s);
  }
  // Decoder, top-down (spec 3.3): cond[u] conditions level-l unit u; the windows of level l yield
  // the conditioners of level l - 1 (and at level 1 the hidden state that predicts each token).
  std::vector<float> cond(static_cast<size_t>(N[L]) * c.latent_dim(L));
  for (int64_t u = 0; u < N[L]; ++u)
    std::memcpy(cond.data() + u * c.latent_dim(L),
                u == 0 ? w.start : X[L].data() + (u - 1) * c.latent_dim(L),
                c.latent_dim(L) * sizeof(float));
  std::vector<float> inputs;
  for (int l = L; l >= 1; --l) {
    const int cl = c.level(l).chunk_len, e = c.decoder_dim(l), dl = c.latent_dim(l);
    std::vector<float> below(static_cast<size_t>(N[l - 1]) * e);
    constexpr int64_t kWindowsPerPass = 256;  // bounds scratch memory for long sequences
    for (int64_t u0 = 0; u0 < N[l]; u0 += kWindowsPerPass) {
      const int64_t count = std::min(kWindowsPerPass, N[l] - u0);
      std::vector<Window> windows(count);
      std::vector<WindowJob> jobs;
      inputs.clear();
      std::vector<size_t> input_offsets;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t u = u0 + i, first = u * cl;
        const int children = static_cast<int>(std::min<int64_t>(cl, N[l - 1] - first));
        input_offsets.push_back(inputs.size());
        inputs.resize(inputs.size() + static_cast<size_t>(children - 1) * e);
        float* in = inputs.data() + input_offsets.back();
        if (l == 1)
          gather_rows(w.tok_emb_dec, e, tokens.subspan(first, children - 1), in);
        else if (children >
                 1)  // a window of its conditioning alone copies nothing (in may be null)
          std::memcpy(in, X[l - 1].data() + first * e,
                      static_cast<size_t>(children - 1) * e * sizeof(float));
        allocate_window(model, l, &windows[i]);
      }
      for (int64_t i = 0; i < count; ++i) {
        const int64_t u = u0 + i;
        const int children = static_cast<int>(std::min<int64_t>(cl, N[l - 1] - u * cl));
        jobs.push_back(
            {&windows[i], cond.data() + u * dl, inputs.data() + input_offsets[i], children - 1});
      }
      run_windows(model, l, jobs, s);
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(below.data() + (u0 + i) * cl * e, windows[i].outputs.data(),
                    static_cast<size_t>(windows[i].n_outputs) * e * sizeof(float));
    }
    cond.swap(below);
  }
  // cond now holds, for each token i, the hidden state of the window output that predicts it.
  token_logprobs(model, cond.data() + c.token_dim, tokens.subspan(1), out + 1, s);
}

}  // namespace

void score_tokens(const Model& model, std::span<const int32_t> tokens, float* out) {
  Scratch s;
  out[0] = NAN;
  if (tokens.size() < 2) return;
  if (model.config().arch == Arch::Vanilla)
    score_vanilla(model, tokens, out, s);
  else
    score_photon(model, tokens, out, s);
}

}  // namespace photon
