#include "engine/decode.h"

#include <cstring>
#include <typeinfo>

#include "cpu/gemm.h"
#include "cpu/softmax.h"

namespace photon {

namespace {

constexpr size_t kRecentText = 4096;  // bytes of delivered text kept for stop-string matching

bool hits_stop_string(const std::string& text, size_t new_from,
                      const std::vector<std::string>& stops) {
  for (const std::string& stop : stops) {
    const size_t from = new_from >= stop.size() ? new_from - stop.size() + 1 : 0;
    if (text.find(stop, from) != std::string::npos) return true;
  }
  return false;
}

int32_t last_text_token(const Tokenizer& tok, const std::vector<int32_t>& history) {
  for (auto it = history.rbegin(); it != history.rend(); ++it)
    if (tok.is_text_token(*it)) return *it;
  return -1;
}

// Stop rules that need no sampling; returns true when the task is finished.
bool finished_before_sampling(DecodeTask& t) {
  if (t.reason != PHOTON_STOP_NONE) return true;
  const int64_t next = static_cast<int64_t>(t.session->history().size());
  if (next >= t.limit)
    t.reason = PHOTON_STOP_LENGTH;
  else if (t.delivered >= t.max_deliver)
    return true;
  else if (t.session->cancel_requested.load(std::memory_order_relaxed))
    t.reason = PHOTON_STOP_CANCELLED;
  else if (next >= t.session->context_length())
    t.reason = PHOTON_STOP_CONTEXT_FULL;
  return t.reason != PHOTON_STOP_NONE;
}

// Delivers the task's tokens that are next in order.
void deliver(DecodeTask& t, const Tokenizer& tok) {
  Session& s = *t.session;
  DecodeState& st = *t.state;
  int32_t previous_text = last_text_token(tok, s.history());
  for (auto it = st.ready.find(static_cast<int64_t>(s.history().size()));
       it != st.ready.end() && t.reason == PHOTON_STOP_NONE && t.delivered < t.max_deliver;
       it = st.ready.find(static_cast<int64_t>(s.history().size()))) {
    const DecodeState::Sampled sampled = it->second;
    if (sampled.token == tok.eos() && !t.config->ignore_eos) {
      t.reason = PHOTON_STOP_EOS;  // EOS stays in `ready`: asking again stops again
      break;
    }
    st.ready.erase(it);
    s.commit(sampled.token);
    ++t.delivered;
    const std::string piece = st.utf8.push(tok.token_bytes(sampled.token, previous_text));
    if (tok.is_text_token(sampled.token)) previous_text = sampled.token;
    const size_t before = st.recent.size();
    st.recent += piece;
    const bool stop_string = !t.config->stop_strings.empty() &&
                             hits_stop_string(st.recent, before, t.config->stop_strings);
    if (st.recent.size() > 2 * kRecentText) st.recent.erase(0, st.recent.size() - kRecentText);
    if (t.sink && !t.sink(sampled.token, piece, sampled.logprob))
      t.reason = PHOTON_STOP_CALLBACK;
    else if (stop_string)
      t.reason = PHOTON_STOP_STRING;
  }
}

// Calls fn(indices) once per session type among `tasks`, with the indices of that type's tasks, so
// that each type's batched operation sees all its sessions at once.
template <typename Fn>
void by_session_type(const std::vector<DecodeTask*>& tasks, Fn fn) {
  std::vector<bool> grouped(tasks.size(), false);
  std::vector<size_t> indices;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (grouped[i]) continue;
    indices.clear();
    const Session& first = *tasks[i]->session;
    for (size_t j = i; j < tasks.size(); ++j)
      if (const Session& other = *tasks[j]->session;
          !grouped[j] && typeid(other) == typeid(first)) {
        grouped[j] = true;
        indices.push_back(j);
      }
    fn(indices);
  }
}

}  // namespace

void decode(std::span<DecodeTask> tasks) {
  if (tasks.empty()) return;
  const Model& model = tasks[0].session->model();
  const ModelConfig& c = model.config();
  const Tokenizer& tok = model.tokenizer();
  const int vocab = c.vocab_size;
  const int dim = c.arch == Arch::Vanilla ? c.dim : c.token_dim;
  std::vector<DecodeTask*> sampling;
  std::vector<std::vector<Lane>> lanes;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> hidden, logits, row;
  Sampler sampler;

  for (;;) {
    // Sessions whose next position has not been sampled yet.
    sampling.clear();
    bool any_active = false;
    for (DecodeTask& t : tasks) {
      if (finished_before_sampling(t)) continue;
      any_active = true;
      if (!t.state->ready.count(static_cast<int64_t>(t.session->history().size())))
        sampling.push_back(&t);
    }
    if (!any_active) break;

    if (!sampling.empty()) {
      // Catch the caches up, batched per session type, then collect every lane.
      by_session_type(sampling, [&](const std::vector<size_t>& indices) {
        std::vector<Session*> group;
        for (size_t i : indices) group.push_back(sampling[i]->session);
        group[0]->sync_group(group);
      });
      lanes.resize(sampling.size());
      size_t n_lanes = 0;
      for (size_t i = 0; i < sampling.size(); ++i) {
        DecodeTask& t = *sampling[i];
        t.session->lanes(t.limit, !t.config->penalized(), lanes[i]);
        if (lanes[i].empty() ||
            lanes[i][0].position != static_cast<int64_t>(t.session->history().size()))
          fail(PHOTON_ERR_INTERNAL, "decode: a session has no lane for its next position");
        n_lanes += lanes[i].size();
      }
      // One LM-head GEMM over the lanes of every session.
      hidden.resize(n_lanes * dim);
      size_t r = 0;
      for (const auto& ls : lanes)
        for (const Lane& lane : ls)
          std::memcpy(hidden.data() + (r++) * dim, lane.hidden, dim * sizeof(float));
      logits.resize(n_lanes * vocab);
      cpu::linear(hidden.data(), static_cast<int>(n_lanes), dim, model.weights().lm_head, vocab,
                  nullptr, logits.data());
      tokens.assign(sampling.size(), {});
      r = 0;
      for (size_t i = 0; i < sampling.size(); ++i) {
        DecodeTask& t = *sampling[i];
        for (const Lane& lane : lanes[i]) {
          const float* raw = logits.data() + (r++) * vocab;
          row.assign(raw, raw + vocab);
          const int32_t token =
              sampler.sample(*t.config, row.data(), vocab, lane.position, t.session->history());
          tokens[i].push_back(token);
          t.state->ready[lane.position] = {
              token, static_cast<float>(raw[token] - cpu::log_sum_exp(raw, vocab))};
        }
      }
      // Feed back, batched per session type.
      by_session_type(sampling, [&](const std::vector<size_t>& indices) {
        std::vector<Session*> group;
        std::vector<std::vector<int32_t>> group_tokens;
        for (size_t i : indices) {
          group.push_back(sampling[i]->session);
          group_tokens.push_back(tokens[i]);
        }
        group[0]->feed_group(group, group_tokens);
      });
    }
    for (DecodeTask& t : tasks)
      if (t.reason == PHOTON_STOP_NONE && t.delivered < t.max_deliver) deliver(t, tok);
  }
}

}  // namespace photon
