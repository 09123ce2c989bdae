#include "engine/score.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/levels.h"
#include "engine/recgen.h"
#include "engine/weights.h"

namespace photon {

namespace {

struct ScoreScratch {
  Scratch embedded, logits;
  StackScratch stack;   // vanilla
  LevelScratch levels;  // PHOTON
};

void score_vanilla(const Model& model, std::span<const int32_t> tokens, float* out, TopRows top,
                   ScoreScratch& scratch) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  Backend& b = model.backend();
  const int t = static_cast<int>(tokens.size());
  const Tensor x = scratch.embedded.get(b, t, c.dim);
  b.embed(w.tok_emb, tokens, x);
  KvCache cache;
  cache.allocate(b, c.stack.layers, t, c.stack.kv_dim(), DType::F32);
  const StackSegment segment{&cache, t};
  stack_forward(b, w.stack, c.norm_eps, c.rope_theta, x, {&segment, 1}, scratch.stack);
  // Row i predicts token i + 1 (spec section 4).
  token_logprobs(model, x.slice(0, t - 1), tokens.subspan(1), out + 1, scratch.logits, top.from(1));
}

void score_photon(const Model& model, std::span<const int32_t> tokens, float* out, TopRows top,
                  ScoreScratch& scratch) {
  const ModelConfig& c = model.config();
  const Weights& w = model.weights();
  Backend& b = model.backend();
  const int L = c.num_levels();
  const int64_t t = static_cast<int64_t>(tokens.size());
  // Encoder, bottom-up over complete units (spec 3.2): X[l] holds M[l] rows of D_l.
  std::vector<Matrix> X(L + 1);
  std::vector<int64_t> M(L + 1), N(L + 1);
  X[0] = new_matrix(b, t, c.embed_dim, "scoring latents");
  b.embed(w.tok_emb_enc, tokens, X[0]);
  M[0] = N[0] = t;
  for (int l = 1; l <= L; ++l) {
    M[l] = M[l - 1] / c.level(l).chunk_len;
    N[l] = (t + c.block_tokens(l) - 1) / c.block_tokens(l);  // units holding at least one token
    X[l] = new_matrix(b, M[l], c.latent_dim(l), "scoring latents");
    if (M[l] == 0) continue;
    KvCache cache;
    cache.allocate(b, c.level(l).encoder.layers, static_cast<int>(M[l]),
                   c.level(l).encoder.kv_dim(), DType::F32);
    const EncodeJob job{&cache, X[l - 1].slice(0, M[l] * c.level(l).chunk_len),
                        static_cast<int>(M[l]), X[l]};
    encode_units(model, l, {&job, 1}, scratch.levels);
  }
  // Decoder, top-down (spec 3.3): cond row u conditions level-l unit u; the windows of level l
  // yield the conditioners of level l - 1 (and at level 1 the hidden state that predicts each
  // token).
  Matrix cond = new_matrix(b, N[L], c.latent_dim(L), "scoring conditioners");
  std::vector<RowCopy> copies{{cond.row(0), w.start}};
  if (N[L] > 1) copies.push_back({cond.slice(1, N[L] - 1), X[L].slice(0, N[L] - 1)});
  b.copy_rows(copies);
  for (int l = L; l >= 1; --l) {
    const int cl = c.level(l).chunk_len, e = c.decoder_dim(l);
    Matrix below = new_matrix(b, N[l - 1], e, "scoring conditioners");
    constexpr int64_t kWindowsPerPass = 256;  // bounds scratch memory for long sequences
    for (int64_t u0 = 0; u0 < N[l]; u0 += kWindowsPerPass) {
      const int64_t count = std::min(kWindowsPerPass, N[l] - u0);
      // Inputs y of the pass's windows: every child but the last of each unit.
      int64_t n_inputs = 0;
      for (int64_t u = u0; u < u0 + count; ++u)
        n_inputs += std::min<int64_t>(cl, N[l - 1] - u * cl) - 1;
      const Tensor inputs = scratch.embedded.get(b, n_inputs, e);
      std::vector<Window> windows(count);
      std::vector<WindowJob> jobs;
      std::vector<int32_t> ids;
      copies.clear();
      int64_t row = 0;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t u = u0 + i, first = u * cl;
        const int children = static_cast<int>(std::min<int64_t>(cl, N[l - 1] - first));
        const Tensor in = inputs.slice(row, children - 1);
        if (l == 1)
          ids.insert(ids.end(), tokens.begin() + first, tokens.begin() + first + children - 1);
        else
          copies.push_back({in, X[l - 1].slice(first, children - 1)});
        allocate_window(model, l, &windows[i], DType::F32);
        jobs.push_back({&windows[i], cond.row(u), in});
        row += children - 1;
      }
      if (l == 1)
        b.embed(w.tok_emb_dec, ids, inputs);
      else
        b.copy_rows(copies);
      run_windows(model, l, jobs, scratch.levels);
      copies.clear();
      for (int64_t i = 0; i < count; ++i)
        copies.push_back({below.slice((u0 + i) * cl, windows[i].n_outputs),
                          windows[i].outputs.slice(0, windows[i].n_outputs)});
      b.copy_rows(copies);
    }
    cond = std::move(below);
  }
  // cond now holds, for each token i, the hidden state of the window output that predicts it.
  token_logprobs(model, cond.slice(1, t - 1), tokens.subspan(1), out + 1, scratch.logits,
                 top.from(1));
}

}  // namespace

void score_tokens(const Model& model, std::span<const int32_t> tokens, float* out, TopRows top) {
  out[0] = NAN;
  std::fill_n(top.ids, top.k, -1);
  std::fill_n(top.logprobs, top.k, NAN);
  if (tokens.size() < 2) return;
  ScoreScratch scratch;
  if (model.config().arch == Arch::Vanilla)
    score_vanilla(model, tokens, out, top, scratch);
  else
    score_photon(model, tokens, out, top, scratch);
}

std::vector<ScoreWindow> score_windows(int64_t n, int64_t context, int64_t stride) {
  std::vector<ScoreWindow> windows{{0, 0, std::min(n, context)}};
  while (windows.back().end < n) {
    const int64_t begin = windows.back().begin + stride;
    windows.push_back({begin, windows.back().end, std::min(n, begin + context)});
  }
  return windows;
}

void score_sequence(const Model& model, std::span<const int32_t> tokens,
                    const ScoreSettings& settings, float* out, std::string_view who, TopRows top) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t context = model.config().max_seq_len;
  const int64_t stride = settings.stride > 0 ? settings.stride : std::max<int64_t>(context / 2, 1);
  if (n > context && stride >= context)
    fail(PHOTON_ERR_INVALID_ARGUMENT,
         std::string(who) + ": " + std::to_string(n) + " tokens exceed the model's context of " +
             std::to_string(context) + " and need sliding windows, whose stride " +
             std::to_string(stride) + " must be below the context (each window conditions on " +
             "context - stride tokens of the one before)");
  if (settings.recgen && top.k > 0)
    fail(PHOTON_ERR_UNSUPPORTED, std::string(who) +
                                     ": alternatives are given for teacher-forced scoring only, "
                                     "not in PHOTON_MODE_RECGEN");
  std::vector<float> window_out, window_top_logprobs;
  std::vector<int32_t> window_top_ids;
  for (const ScoreWindow& w : score_windows(n, context, stride)) {
    const std::span<const int32_t> window = tokens.subspan(w.begin, w.end - w.begin);
    // The first window writes out directly; a later one scores into scratch, of which only the
    // tokens after the previous window count.
    float* dst = out;
    TopRows dst_top = top;
    if (w.begin > 0) {
      window_out.resize(window.size());
      dst = window_out.data();
      window_top_ids.resize(window.size() * static_cast<size_t>(top.k));
      window_top_logprobs.resize(window_top_ids.size());
      dst_top = {top.k, window_top_ids.data(), window_top_logprobs.data()};
    }
    const size_t prompt =
        w.begin == 0 ? settings.prompt_tokens : static_cast<size_t>(w.first_scored - w.begin);
    if (settings.recgen)
      score_recgen(model, window, prompt, dst);
    else
      score_tokens(model, window, dst, dst_top);
    if (w.begin > 0) {
      const int64_t skip = w.first_scored - w.begin, k = top.k;
      std::copy(window_out.begin() + skip, window_out.end(), out + w.first_scored);
      std::copy(window_top_ids.begin() + skip * k, window_top_ids.end(),
                top.ids + w.first_scored * k);
      std::copy(window_top_logprobs.begin() + skip * k, window_top_logprobs.end(),
                top.logprobs + w.first_scored * k);
    }
  }
  for (int64_t i = 1; i < n; ++i)
    if (!std::isfinite(out[i]))
      fail(PHOTON_ERR_NOT_FINITE,
           std::string(who) + ": the log-probability of token " + std::to_string(i) + " is " +
               std::to_string(out[i]) +
               ": the model's logits are not finite (its weights hold a NaN or an infinity, "
               "which photon_load_options_set_verify finds, or its activations overflow)");
}

}  // namespace photon

namespace photon {

void teacher_forced_logprobs(const Model& model, std::span<const int32_t> history,
                             std::span<const int32_t> tokens, float* out) {
  std::vector<int32_t> all(history.begin(), history.end());
  all.insert(all.end(), tokens.begin(), tokens.end());
  std::vector<float> logprobs(all.size());
  score_tokens(model, all, logprobs.data());
  std::copy(logprobs.begin() + static_cast<int64_t>(history.size()), logprobs.end(), out);
}

}  // namespace photon
