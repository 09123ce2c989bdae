#include "engine/decode.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "engine/weights.h"

namespace photon {

namespace {

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

// A pending cancellation stops the task; the call it stops answers the request, which clears it.
bool answers_cancel(DecodeTask& t) {
  if (!t.session->cancel_requested.exchange(false)) return false;
  t.reason = PHOTON_STOP_CANCELLED;
  return true;
}

// A session whose history fills its context goes on after a context shift when it has one
// (Session::shift_context, in DecodeBatch::step); otherwise it stops there.
bool shifts_context(const Session& s) {
  return s.context_shift && s.context >= 2;
}

// Stop rules that need no sampling; returns true when the task is finished.
bool finished_before_sampling(DecodeTask& t) {
  if (t.reason != PHOTON_STOP_NONE) return true;
  const int64_t next = static_cast<int64_t>(t.session->history.size());
  if (next >= t.limit)
    t.reason = PHOTON_STOP_LENGTH;
  else if (t.delivered >= t.max_deliver)
    return true;
  else if (answers_cancel(t))
    return true;
  else if (next >= t.session->context && !shifts_context(*t.session))
    t.reason = PHOTON_STOP_CONTEXT_FULL;
  return t.reason != PHOTON_STOP_NONE;
}

// Delivers the task's tokens that are next in order.
void deliver(DecodeTask& t, const Tokenizer& tok) {
  Session& s = *t.session;
  Stream& st = s.stream;
  int32_t previous_text = last_text_token(tok, s.history);
  for (auto it = st.ahead.find(static_cast<int64_t>(s.history.size()));
       it != st.ahead.end() && t.reason == PHOTON_STOP_NONE && t.delivered < t.max_deliver;
       it = st.ahead.find(static_cast<int64_t>(s.history.size()))) {
    if (answers_cancel(t)) break;  // also between tokens sampled ahead
    if (it->second.token == tok.eos() && !s.sampler.ignore_eos) {
      t.reason = PHOTON_STOP_EOS;  // EOS stays ahead: asking again stops again
      break;
    }
    const Stream::Sampled sampled = std::move(it->second);
    st.ahead.erase(it);
    s.history.push_back(sampled.token);
    ++t.delivered;
    const std::string piece = st.utf8.push(tok.token_bytes(sampled.token, previous_text));
    if (tok.is_text_token(sampled.token)) previous_text = sampled.token;
    const size_t before = st.recent.size();
    st.recent += piece;
    const bool stop_string = !s.sampler.stop_strings.empty() &&
                             hits_stop_string(st.recent, before, s.sampler.stop_strings);
    if (st.recent.size() > 2 * Stream::kMaxStopString)
      st.recent.erase(0, st.recent.size() - Stream::kMaxStopString);
    if (t.sink && !t.sink({sampled.token, piece, sampled.logprob, sampled.top}))
      t.reason = PHOTON_STOP_CALLBACK;
    else if (stop_string)
      t.reason = PHOTON_STOP_STRING;
  }
}

}  // namespace

void require_decodable(const Session& s, std::string_view who, std::optional<size_t> index) {
  const std::string subject =
      std::string(who) + (index ? ": session " + std::to_string(*index) : std::string());
  s.stream.require_usable(subject);
  if (s.history.empty())
    fail(PHOTON_ERR_INVALID_ARGUMENT, subject + (index ? " holds" : ": the session holds") +
                                          " no tokens; prefill at least BOS first");
  s.stream.require_nothing_held(subject);
}

uint64_t DecodeBatch::add(Session& session, TokenSink sink, int64_t limit, int32_t max_deliver) {
  runners_.of(session.mode);  // made now, so that a step fails only in the middle of its work
  tasks_.push_back({next_id_, &session, std::move(sink), limit, max_deliver});
  return next_id_++;
}

void DecodeBatch::remove(uint64_t id) {
  const auto it =
      std::find_if(tasks_.begin(), tasks_.end(), [id](const DecodeTask& t) { return t.id == id; });
  if (it == tasks_.end()) fail(PHOTON_ERR_INTERNAL, "DecodeBatch::remove: no such task");
  it->session->discard_ahead();
  tasks_.erase(it);
}

void DecodeBatch::take_finished(std::vector<DecodeTask>& finished) {
  size_t kept = 0;
  for (DecodeTask& t : tasks_) {
    if (finished_before_sampling(t)) {
      t.session->stream.stop_reason = t.reason;
      finished.push_back(std::move(t));
    } else {
      if (&tasks_[kept] != &t) tasks_[kept] = std::move(t);
      ++kept;
    }
  }
  tasks_.erase(tasks_.begin() + static_cast<std::ptrdiff_t>(kept), tasks_.end());
}

std::vector<DecodeTask> DecodeBatch::step() {
  std::vector<DecodeTask> finished;
  finished.reserve(tasks_.size());  // nothing may fail once tokens are delivered
  take_finished(finished);
  if (tasks_.empty()) return finished;
  const Tokenizer& tok = model_.tokenizer();
  active_.clear();
  for (DecodeTask& t : tasks_) active_.push_back(t.session);
  try {
    changing(active_, [&] {
      sampling_.clear();
      for (DecodeTask& t : tasks_) {
        Session& s = *t.session;
        // take_finished kept a full session only if it shifts; the limit moves with the positions.
        if (static_cast<int64_t>(s.history.size()) >= s.context) t.limit -= s.shift_context();
        // Sessions whose next position has not been sampled yet.
        if (!s.stream.ahead.count(static_cast<int64_t>(s.history.size()))) sampling_.push_back(&t);
      }
      if (!sampling_.empty()) sample_lanes(sampling_);
      for (DecodeTask& t : tasks_)
        if (t.reason == PHOTON_STOP_NONE && t.delivered < t.max_deliver) deliver(t, tok);
    });
  } catch (...) {
    tasks_.clear();
    throw;
  }
  take_finished(finished);
  return finished;
}

void DecodeBatch::catch_up(const std::vector<DecodeTask*>& tasks) {
  caught_up_.clear();
  for (const DecodeTask* t : tasks) caught_up_.push_back(t->session);
  by_mode(caught_up_, [&](Mode mode, std::span<const size_t> indices) {
    group_.clear();
    for (size_t i : indices) group_.push_back(caught_up_[i]);
    runners_.of(mode).catch_up(group_);
  });
}

void DecodeBatch::sample_lanes(const std::vector<DecodeTask*>& sampling) {
  Backend& b = model_.backend();
  const int vocab = model_.config().vocab_size;
  catch_up(sampling);
  lanes_.resize(sampling.size());
  size_t n_lanes = 0;
  for (size_t i = 0; i < sampling.size(); ++i) {
    DecodeTask& t = *sampling[i];
    Session& s = *t.session;
    std::vector<Lane>& lanes = lanes_[i];
    runners_.of(s.mode).lanes(s, lanes);
    const int64_t next = static_cast<int64_t>(s.history.size());
    if (lanes.empty() || lanes[0].position != next)
      fail(PHOTON_ERR_INTERNAL, "decode: a session has no lane for its next position");
    // The limit, the context and the penalty (which needs the tokens before each lane in the
    // history) decide which lanes are sampled now.
    const int64_t end = std::min<int64_t>(t.limit, s.context);
    size_t keep = 0;
    while (keep < lanes.size() && lanes[keep].position < end) ++keep;
    if (s.sampler.penalized()) keep = 1;
    lanes.resize(keep);
    n_lanes += keep;
  }
  const int dim = static_cast<int>(lanes_[0][0].hidden.cols);
  const Tensor hidden = hidden_.get(b, static_cast<int64_t>(n_lanes), dim);
  std::vector<RowCopy> copies;
  std::vector<SampleRequest> requests;
  std::vector<std::vector<TokenLogprob>> tops(n_lanes);
  for (size_t i = 0; i < sampling.size(); ++i) {
    const Session& s = *sampling[i]->session;
    for (const Lane& lane : lanes_[i]) {
      const size_t r = copies.size();
      copies.push_back({hidden.row(static_cast<int64_t>(r)), lane.hidden});
      requests.push_back({&s.sampler, lane.position, s.history, &tops[r]});
    }
  }
  b.copy_rows(copies);
  const Tensor logits = logits_.get(b, static_cast<int64_t>(n_lanes), vocab);
  b.linear(hidden, model_.weights().lm_head, nullptr, logits, false);
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
  size_t r = 0;
  for (size_t i = 0; i < sampling.size(); ++i)
    for (const Lane& lane : lanes_[i]) {
      sampling[i]->session->stream.ahead[lane.position] = {sampled[r], logprobs[r],
                                                           std::move(tops[r])};
      ++r;
    }
  // The tokens are known now: a mode that consumes them before their delivery does so.
  catch_up(sampling);
}

std::vector<int32_t> generate(std::span<Session* const> sessions, int32_t max_tokens,
                              std::span<const TokenSink> sinks, std::string_view who, bool batch,
                              RunnerScratch scratch) {
  if (sessions.empty()) return {};
  for (size_t i = 0; i < sessions.size(); ++i)
    require_decodable(*sessions[i], who, batch ? std::optional<size_t>(i) : std::nullopt);
  // A call that starts a generation discards a cancellation requested before it, and the stop
  // owed to a pull loop; a pull continues a loop and keeps the request.
  for (Session* s : sessions) {
    s->cancel_requested.store(false);
    s->stream.string_stop_owed = false;
  }
  DecodeBatch decode(sessions[0]->model);
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session& s = *sessions[i];
    if (scratch == RunnerScratch::Sessions) decode.borrow_runner(s);  // the tasks stay to the end
    decode.add(s, sinks[i], static_cast<int64_t>(s.history.size()) + max_tokens, max_tokens);
  }
  std::vector<int32_t> delivered(sessions.size());
  while (!decode.empty())
    for (const DecodeTask& t : decode.step()) delivered[t.id] = t.delivered;
  return delivered;
}

const Stream::Held* next_token(Session& session, std::string_view who) {
  Stream& st = session.stream;
  if (!st.held) {
    if (st.string_stop_owed) {  // stop_reason still says PHOTON_STOP_STRING
      st.string_stop_owed = false;
      return nullptr;
    }
    require_decodable(session, who, std::nullopt);
    TokenSink sink = [&](const DeliveredToken& t) {
      st.held =
          Stream::Held{t.token, t.logprob, std::string(t.piece), {t.top.begin(), t.top.end()}};
      return true;
    };
    DecodeBatch decode(session.model);
    decode.borrow_runner(session);
    // Bounded by the context alone.
    decode.add(session, std::move(sink),
               static_cast<int64_t>(session.history.size()) + session.context, 1);
    photon_stop_reason reason = PHOTON_STOP_NONE;
    while (!decode.empty())
      for (const DecodeTask& t : decode.step()) reason = t.reason;
    st.string_stop_owed = reason == PHOTON_STOP_STRING;
    if (!st.held) return nullptr;
  }
  return &*st.held;
}

}  // namespace photon
