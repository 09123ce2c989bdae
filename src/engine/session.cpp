#include "engine/session.h"

#include <algorithm>
#include <string>

namespace photon {

Mode default_mode(const Model& model) {
  const ModelConfig& c = model.config();
  if (c.arch == Arch::Vanilla) return Mode::Vanilla;
  if (c.num_levels() < 2) return Mode::HierGen;
  for (const auto& [key, value] : model.file().metadata())
    if (key == "photon.default_mode" && value == "hiergen") return Mode::HierGen;
  return Mode::RecGen;
}

namespace {

void check_logit_bias(const SamplerConfig& sampler, const ModelConfig& c) {
  for (const LogitBias& entry : sampler.logit_bias)
    check(entry.token < c.vocab_size, PHOTON_ERR_BAD_TOKEN,
          "the logit bias's token " + std::to_string(entry.token) +
              " is outside the model's vocabulary of " + std::to_string(c.vocab_size));
}

}  // namespace

std::unique_ptr<Session> Session::create(const Model& model, Mode mode, int context,
                                         const SamplerConfig& sampler, DType kv_type) {
  const ModelConfig& c = model.config();
  check_logit_bias(sampler, c);
  if (mode == Mode::RecGen && c.arch == Arch::Vanilla)
    fail(PHOTON_ERR_UNSUPPORTED,
         "RecGen needs a PHOTON model with at least 2 levels; this model is vanilla");
  if (mode == Mode::RecGen && c.num_levels() < 2)
    fail(PHOTON_ERR_UNSUPPORTED,
         "RecGen needs at least 2 levels; this model has 1 (a Block Transformer generates with "
         "HierGen)");
  if ((mode == Mode::Vanilla) != (c.arch == Arch::Vanilla))
    fail(PHOTON_ERR_INTERNAL, "a session's mode does not fit its model's architecture");
  std::unique_ptr<Session> s(new Session(model, mode, context, sampler, kv_type));
  s->runner = make_runner(mode, model);
  s->runner->init(*s);
  return s;
}

namespace {

// Calls fn(cache, tokens per position) for each cache of the session that grows with its length.
template <typename S, typename Fn>
void visit_growing_caches(S& s, Fn&& fn) {
  const ModelConfig& c = s.model.config();
  if (auto* vanilla = std::get_if<VanillaState>(&s.state)) {
    fn(vanilla->cache, int64_t{1});
  } else if (auto* hier = std::get_if<HierGenState>(&s.state)) {
    for (int l = 1; l <= c.num_levels(); ++l) fn(hier->level(l).encoder, c.block_tokens(l));
  } else if (auto* rec = std::get_if<RecGenState>(&s.state)) {
    fn(rec->top, c.block_tokens(c.num_levels()));
  }
}

}  // namespace

void Session::reserve_context() {
  whole_context = true;
  visit_growing_caches(
      *this, [&](KvCache& cache, int64_t) { cache.reserve(model.backend(), cache.capacity); });
}

uint64_t Session::cache_bytes() const {
  uint64_t bytes = 0;
  visit_growing_caches(*this,
                       [&](const KvCache& cache, int64_t) { bytes += cache.allocated_bytes(); });
  return bytes;
}

uint64_t Session::growth_bytes(int64_t more_tokens) const {
  const int64_t tokens = static_cast<int64_t>(history.size()) + more_tokens;
  uint64_t bytes = 0;
  // One position more than the complete units: a unit's position is appended when it opens.
  visit_growing_caches(*this, [&](const KvCache& cache, int64_t per_position) {
    const int64_t positions = std::min<int64_t>(cache.capacity, tokens / per_position + 1);
    bytes += cache.growth_bytes(static_cast<int>(positions));
  });
  return bytes;
}

void Session::check_cancel() const {
  if (cancel_requested.load(std::memory_order_relaxed))
    fail(PHOTON_ERR_CANCELLED, "cancelled by photon_session_cancel");
}

void Session::discard_ahead() {
  stream.ahead.clear();
  runner->rollback(*this);
}

namespace {

// Runs a prefill of `sessions`: the text they generate next no longer continues the text before
// it (stop strings are matched within it, and a pull loop that a stop string ended is over), and
// a cancellation that stops the prefill is answered, so that it does not also stop the next call.
template <typename Body>
void prefilling(std::span<Session* const> sessions, Body&& body) {
  for (Session* s : sessions) {
    s->stream.recent.clear();
    s->stream.string_stop_owed = false;
  }
  try {
    changing(sessions, body);
  } catch (const Error& e) {
    if (e.status() == PHOTON_ERR_CANCELLED)
      for (Session* s : sessions) s->cancel_requested.store(false);
    throw;
  }
}

}  // namespace

void Session::check_prefill(std::span<const int32_t> tokens, std::string_view who) const {
  stream.require_usable(who);
  const int32_t v = model.config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= v)
      fail(PHOTON_ERR_BAD_TOKEN, std::string(who) + ": token " + std::to_string(tokens[i]) +
                                     " at position " + std::to_string(i) +
                                     " is outside the vocabulary [0, " + std::to_string(v) + ")");
  if (history.size() + tokens.size() > static_cast<size_t>(context))
    fail(PHOTON_ERR_CONTEXT_FULL, std::string(who) + ": " + std::to_string(history.size()) + " + " +
                                      std::to_string(tokens.size()) +
                                      " tokens exceed the session's context of " +
                                      std::to_string(context));
}

void Session::prefill(std::span<const int32_t> tokens, std::string_view who, float* logprobs) {
  check_prefill(tokens, who);
  cancel_requested.store(false);
  discard_ahead();
  Session* self = this;
  prefilling({&self, 1}, [&] { runner->prefill(*this, tokens, logprobs); });
}

void prefill_batch(std::span<Session* const> sessions,
                   std::span<const std::span<const int32_t>> tokens, std::string_view who,
                   RunnerScratch scratch) {
  for (size_t i = 0; i < sessions.size(); ++i)
    sessions[i]->check_prefill(tokens[i], std::string(who) + ": session " + std::to_string(i));
  for (Session* s : sessions) {
    s->cancel_requested.store(false);
    s->discard_ahead();
  }
  if (sessions.empty()) return;
  Runners runners(sessions[0]->model);
  for (Session* s : sessions) {
    if (scratch == RunnerScratch::Sessions) runners.borrow(*s);  // this call's until it returns
    runners.of(s->mode);
  }
  std::vector<Session*> group;
  std::vector<std::span<const int32_t>> group_tokens;
  prefilling(sessions, [&] {
    by_mode(sessions, [&](Mode mode, std::span<const size_t> indices) {
      group.clear();
      group_tokens.clear();
      for (size_t i : indices) {
        group.push_back(sessions[i]);
        group_tokens.push_back(tokens[i]);
      }
      runners.of(mode).prefill_batch(group, group_tokens);
    });
  });
}

void Session::set_sampler(const SamplerConfig& config, std::string_view who) {
  stream.require_usable(who);
  check_logit_bias(config, model.config());
  discard_ahead();  // tokens drawn under the old settings
  sampler = config;
}

int64_t Session::shift_context() {
  const size_t keep = static_cast<size_t>(context / 2);
  if (keep == 0 || history.size() <= keep)
    fail(PHOTON_ERR_INTERNAL, "shift_context: nothing to drop from a history of " +
                                  std::to_string(history.size()) + " tokens");
  std::unique_ptr<Session> fresh = create(model, mode, context, sampler, kv_type);
  if (whole_context) fresh->reserve_context();
  fresh->prefill(std::span<const int32_t>(history).last(keep), "the context shift");
  const int64_t dropped = static_cast<int64_t>(history.size() - keep);
  stream.ahead.clear();
  history = std::move(fresh->history);
  state = std::move(fresh->state);
  return dropped;
}

KvBytes Session::kv_bytes(int level, std::string_view who) const {
  const ModelConfig& c = model.config();
  const int levels = c.arch == Arch::Vanilla ? 1 : c.num_levels();
  if (level < 1 || level > levels)
    fail(PHOTON_ERR_INVALID_ARGUMENT, std::string(who) + ": level " + std::to_string(level) +
                                          " is outside 1.." + std::to_string(levels));
  return runner->kv_bytes(*this, level);
}

}  // namespace photon
