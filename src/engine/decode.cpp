#include "engine/decode.h"

#include <cmath>
#include <string>

#include "engine/weights.h"
#include "engine/workspace.h"

namespace photon {

namespace {

constexpr size_t kRecentText = 4096;  // bytes of delivered text kept for stop-string matching

struct Task {
  Session* session = nullptr;
  const TokenSink* sink = nullptr;
  int64_t limit = 0;        // no token at or beyond this position (the call's budget)
  int32_t max_deliver = 0;  // return after delivering this many (the pull API asks for 1)
  int32_t delivered = 0;
  photon_stop_reason reason = PHOTON_STOP_NONE;  // stays NONE if the call ended by max_deliver
};

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

// A session whose history fills its context goes on after a context shift, when it has one
// (Session::shift_context); the task's limit moves down with the positions. False: it stops.
bool shift_context(Task& t) {
  if (!t.session->context_shift || t.session->context < 2) return false;
  t.limit -= t.session->shift_context();
  return true;
}

// Stop rules that need no sampling; returns true when the task is finished.
bool finished_before_sampling(Task& t) {
  if (t.reason != PHOTON_STOP_NONE) return true;
  const int64_t next = static_cast<int64_t>(t.session->history.size());
  if (next >= t.limit)
    t.reason = PHOTON_STOP_LENGTH;
  else if (t.delivered >= t.max_deliver)
    return true;
  else if (t.session->cancel_requested.load(std::memory_order_relaxed))
    t.reason = PHOTON_STOP_CANCELLED;
  else if (next >= t.session->context && !shift_context(t))
    t.reason = PHOTON_STOP_CONTEXT_FULL;
  return t.reason != PHOTON_STOP_NONE;
}

// Delivers the task's tokens that are next in order.
void deliver(Task& t, const Tokenizer& tok) {
  Session& s = *t.session;
  Stream& st = s.stream;
  int32_t previous_text = last_text_token(tok, s.history);
  for (auto it = st.ahead.find(static_cast<int64_t>(s.history.size()));
       it != st.ahead.end() && t.reason == PHOTON_STOP_NONE && t.delivered < t.max_deliver;
       it = st.ahead.find(static_cast<int64_t>(s.history.size()))) {
    const Stream::Sampled sampled = it->second;
    if (sampled.token == tok.eos() && !s.sampler.ignore_eos) {
      t.reason = PHOTON_STOP_EOS;  // EOS stays ahead: asking again stops again
      break;
    }
    st.ahead.erase(it);
    s.history.push_back(sampled.token);
    ++t.delivered;
    const std::string piece = st.utf8.push(tok.token_bytes(sampled.token, previous_text));
    if (tok.is_text_token(sampled.token)) previous_text = sampled.token;
    const size_t before = st.recent.size();
    st.recent += piece;
    const bool stop_string = !s.sampler.stop_strings.empty() &&
                             hits_stop_string(st.recent, before, s.sampler.stop_strings);
    if (st.recent.size() > 2 * kRecentText) st.recent.erase(0, st.recent.size() - kRecentText);
    if (*t.sink && !(*t.sink)(sampled.token, piece, sampled.logprob))
      t.reason = PHOTON_STOP_CALLBACK;
    else if (stop_string)
      t.reason = PHOTON_STOP_STRING;
  }
}

// Calls fn(indices) once per mode among `tasks`, with the indices of that mode's tasks, so that
// each mode's batched operation sees all of its sessions at once.
template <typename Fn>
void by_mode(const std::vector<Task*>& tasks, Fn fn) {
  std::vector<size_t> indices;
  for (Mode mode : {Mode::HierGen, Mode::RecGen, Mode::Vanilla}) {
    indices.clear();
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i]->session->mode == mode) indices.push_back(i);
    if (!indices.empty()) fn(indices);
  }
}

// Samples every ready lane of the sessions of `sampling` with one LM-head GEMM and feeds the
// tokens back.
void sample_lanes(const std::vector<Task*>& sampling, std::vector<std::vector<Lane>>& lanes) {
  Session& lead = *sampling[0]->session;
  const Model& model = lead.model;
  Workspace& ws = lead.runner->workspace();
  Backend& b = model.backend();
  const int vocab = model.config().vocab_size;
  std::vector<Session*> group;
  by_mode(sampling, [&](const std::vector<size_t>& indices) {
    group.clear();
    for (size_t i : indices) group.push_back(sampling[i]->session);
    group[0]->runner->catch_up(group);
  });
  lanes.resize(sampling.size());
  size_t n_lanes = 0;
  for (size_t i = 0; i < sampling.size(); ++i) {
    Task& t = *sampling[i];
    Session& s = *t.session;
    s.runner->lanes(s, lanes[i]);
    const int64_t next = static_cast<int64_t>(s.history.size());
    if (lanes[i].empty() || lanes[i][0].position != next)
      fail(PHOTON_ERR_INTERNAL, "decode: a session has no lane for its next position");
    // The limit, the context and the penalty (which needs the tokens before each lane in the
    // history) decide which lanes are sampled now.
    const int64_t end = std::min<int64_t>(t.limit, s.context);
    size_t keep = 0;
    while (keep < lanes[i].size() && lanes[i][keep].position < end) ++keep;
    if (s.sampler.penalized()) keep = 1;
    lanes[i].resize(keep);
    n_lanes += keep;
  }
  const int dim = static_cast<int>(lanes[0][0].hidden.cols);
  const Tensor hidden = ws.get(Slot::Hidden, static_cast<int64_t>(n_lanes), dim);
  std::vector<RowCopy> copies;
  std::vector<SampleRequest> requests;
  for (size_t i = 0; i < sampling.size(); ++i)
    for (const Lane& lane : lanes[i]) {
      copies.push_back({hidden.row(static_cast<int64_t>(copies.size())), lane.hidden});
      requests.push_back(
          {&sampling[i]->session->sampler, lane.position, sampling[i]->session->history});
    }
  b.copy_rows(copies);
  const Tensor logits = ws.get(Slot::Logits, static_cast<int64_t>(n_lanes), vocab);
  b.linear(hidden, model.weights().lm_head, nullptr, logits, false);
  std::vector<int32_t> sampled(n_lanes);
  std::vector<float> logprobs(n_lanes);
  b.sample(logits, requests, sampled.data(), logprobs.data());
  // A token's logprob is its logit minus the log-sum-exp of the whole row, so a NaN or +infinity
  // anywhere in the row (or a row of -infinity) makes it NaN: one check per lane covers its row.
  for (size_t i = 0; i < n_lanes; ++i)
    if (!std::isfinite(logprobs[i]))
      fail(PHOTON_ERR_NOT_FINITE,
           "the logits of position " + std::to_string(requests[i].position) +
               " are not finite: the model's weights hold a NaN or an infinity (which "
               "photon_load_options_set_verify finds) or its activations overflow");

  std::vector<std::vector<int32_t>> tokens(sampling.size());
  size_t r = 0;
  for (size_t i = 0; i < sampling.size(); ++i)
    for (const Lane& lane : lanes[i]) {
      tokens[i].push_back(sampled[r]);
      sampling[i]->session->stream.ahead[lane.position] = {sampled[r], logprobs[r]};
      ++r;
    }
  std::vector<std::vector<int32_t>> group_tokens;
  by_mode(sampling, [&](const std::vector<size_t>& indices) {
    group.clear();
    group_tokens.clear();
    for (size_t i : indices) {
      group.push_back(sampling[i]->session);
      group_tokens.push_back(std::move(tokens[i]));
    }
    group[0]->runner->feed(group, group_tokens);
  });
}

// Runs every task until it stops or has delivered max_deliver tokens.
void run(std::span<Task> tasks) {
  const Tokenizer& tok = tasks[0].session->model.tokenizer();
  std::vector<Task*> sampling;
  std::vector<std::vector<Lane>> lanes;
  for (;;) {
    // Sessions whose next position has not been sampled yet.
    sampling.clear();
    bool any_active = false;
    for (Task& t : tasks) {
      if (finished_before_sampling(t)) continue;
      any_active = true;
      if (!t.session->stream.ahead.count(static_cast<int64_t>(t.session->history.size())))
        sampling.push_back(&t);
    }
    if (!any_active) break;
    if (!sampling.empty()) sample_lanes(sampling, lanes);
    for (Task& t : tasks)
      if (t.reason == PHOTON_STOP_NONE && t.delivered < t.max_deliver) deliver(t, tok);
  }
}

// Checks the sessions' rules, runs the tasks and records why each stopped.
void run_checked(std::span<Task> tasks, std::string_view who, bool batch) {
  std::vector<Session*> sessions;
  for (size_t i = 0; i < tasks.size(); ++i) {
    Session& s = *tasks[i].session;
    const std::string subject =
        std::string(who) + (batch ? ": session " + std::to_string(i) : std::string());
    s.stream.require_usable(subject);
    if (s.history.empty())
      fail(PHOTON_ERR_INVALID_ARGUMENT, subject + (batch ? " holds" : ": the session holds") +
                                            " no tokens; prefill at least BOS first");
    s.stream.require_nothing_held(subject);
    s.cancel_requested.store(false);
    sessions.push_back(&s);
  }
  changing(sessions, [&] { run(tasks); });
  for (Task& t : tasks) t.session->stream.stop_reason = t.reason;
}

}  // namespace

std::vector<int32_t> generate(std::span<Session* const> sessions, int32_t max_tokens,
                              std::span<const TokenSink> sinks, std::string_view who, bool batch) {
  std::vector<Task> tasks(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session& s = *sessions[i];
    tasks[i] = {&s, &sinks[i], static_cast<int64_t>(s.history.size()) + max_tokens, max_tokens};
  }
  if (tasks.empty()) return {};
  run_checked(tasks, who, batch);
  std::vector<int32_t> delivered;
  for (const Task& t : tasks) delivered.push_back(t.delivered);
  return delivered;
}

const Stream::Held* next_token(Session& session, std::string_view who) {
  Stream& st = session.stream;
  if (!st.held) {
    const TokenSink sink = [&](int32_t token, std::string_view piece, float logprob) {
      st.held = Stream::Held{token, logprob, std::string(piece)};
      return true;
    };
    // Bounded by the context alone.
    Task task{&session, &sink, static_cast<int64_t>(session.history.size()) + session.context, 1};
    run_checked({&task, 1}, who, false);
    if (!st.held) return nullptr;
  }
  return &*st.held;
}

}  // namespace photon
