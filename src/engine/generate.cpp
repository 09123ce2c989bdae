#include "engine/generate.h"

#include <cstring>
#include <map>

#include "cpu/gemm.h"
#include "cpu/softmax.h"

namespace photon {

namespace {

struct Sampled {
  int32_t token;
  float logprob;
};

bool hits_stop_string(const std::string& text, size_t new_from, const std::vector<std::string>& stops) {
  for (const std::string& stop : stops) {
    const size_t from = new_from >= stop.size() ? new_from - stop.size() + 1 : 0;
    if (text.find(stop, from) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

GenerateResult generate(Session& session, const SamplerConfig& config, Utf8Stream& utf8,
                        int32_t max_tokens, const TokenSink& sink) {
  const Model& model = session.model();
  const ModelConfig& c = model.config();
  const Tokenizer& tok = model.tokenizer();
  const int vocab = c.vocab_size;
  const int dim = c.arch == Arch::Vanilla ? c.dim : c.token_dim;
  const int64_t begin = static_cast<int64_t>(session.history().size());
  const int64_t limit = begin + max_tokens;
  const bool parallel = !config.penalized();
  GenerateResult result;
  std::vector<Lane> lanes;
  std::vector<float> hidden, logits, row;
  std::vector<int32_t> tokens;
  std::map<int64_t, Sampled> ready;  // sampled but not yet delivered, by position
  std::string text;
  Sampler sampler;
  // The last token that contributed text decides whether the next piece keeps its leading space.
  int32_t previous_text = -1;
  for (auto it = session.history().rbegin(); it != session.history().rend(); ++it)
    if (tok.is_text_token(*it)) {
      previous_text = *it;
      break;
    }

  while (result.reason == PHOTON_STOP_NONE) {
    const int64_t next = static_cast<int64_t>(session.history().size());
    if (session.cancel_requested.load(std::memory_order_relaxed)) result.reason = PHOTON_STOP_CANCELLED;
    else if (next >= limit) result.reason = PHOTON_STOP_LENGTH;
    else if (next >= session.context_length()) result.reason = PHOTON_STOP_CONTEXT_FULL;
    if (result.reason != PHOTON_STOP_NONE) break;

    if (!ready.count(next)) {
      session.lanes(limit, parallel, lanes);
      if (lanes.empty() || lanes[0].position != next)
        fail(PHOTON_ERR_INTERNAL, "generate: the session has no lane for position " + std::to_string(next));
      const int n = static_cast<int>(lanes.size());
      hidden.resize(static_cast<size_t>(n) * dim);
      for (int i = 0; i < n; ++i) std::memcpy(hidden.data() + static_cast<size_t>(i) * dim, lanes[i].hidden, dim * sizeof(float));
      logits.resize(static_cast<size_t>(n) * vocab);
      cpu::linear(hidden.data(), n, dim, model.weights().lm_head, vocab, nullptr, logits.data());
      tokens.resize(n);
      for (int i = 0; i < n; ++i) {
        const float* raw = logits.data() + static_cast<size_t>(i) * vocab;
        row.assign(raw, raw + vocab);
        const int32_t t = sampler.sample(config, row.data(), vocab, lanes[i].position, session.history());
        tokens[i] = t;
        ready[lanes[i].position] = {t, static_cast<float>(raw[t] - cpu::log_sum_exp(raw, vocab))};
      }
      session.feed(tokens);
    }

    // Deliver every token that is next in order.
    for (auto it = ready.find(static_cast<int64_t>(session.history().size()));
         it != ready.end() && result.reason == PHOTON_STOP_NONE;
         it = ready.find(static_cast<int64_t>(session.history().size()))) {
      const Sampled s = it->second;
      ready.erase(it);
      if (s.token == tok.eos() && !config.ignore_eos) {
        result.reason = PHOTON_STOP_EOS;
        break;
      }
      session.commit(s.token);
      ++result.generated;
      const std::string piece = utf8.push(tok.token_bytes(s.token, previous_text));
      if (tok.is_text_token(s.token)) previous_text = s.token;
      const size_t before = text.size();
      text += piece;
      if (sink && !sink(s.token, piece, s.logprob)) result.reason = PHOTON_STOP_CALLBACK;
      else if (!config.stop_strings.empty() && hits_stop_string(text, before, config.stop_strings))
        result.reason = PHOTON_STOP_STRING;
      else if (static_cast<int64_t>(session.history().size()) >= limit) result.reason = PHOTON_STOP_LENGTH;
    }
  }
  session.rollback();
  return result;
}

}  // namespace photon
