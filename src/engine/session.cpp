#include "engine/session.h"

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

std::unique_ptr<Session> Session::create(const Model& model, Mode mode, int context,
                                         const SamplerConfig& sampler, DType kv_type) {
  const ModelConfig& c = model.config();
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

void Session::check_cancel() const {
  if (cancel_requested.load(std::memory_order_relaxed))
    fail(PHOTON_ERR_CANCELLED, "cancelled by photon_session_cancel");
}

void Session::discard_ahead() {
  stream.ahead.clear();
  runner->rollback(*this);
}

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
  changing({&self, 1}, [&] { runner->prefill(*this, tokens, logprobs); });
}

void prefill_batch(std::span<Session* const> sessions,
                   std::span<const std::span<const int32_t>> tokens, std::string_view who) {
  for (size_t i = 0; i < sessions.size(); ++i)
    sessions[i]->check_prefill(tokens[i], std::string(who) + ": session " + std::to_string(i));
  for (Session* s : sessions) {
    s->cancel_requested.store(false);
    s->discard_ahead();
  }
  changing(sessions, [&] {
    std::vector<Session*> group;
    std::vector<std::span<const int32_t>> group_tokens;
    for (Mode mode : {Mode::HierGen, Mode::RecGen, Mode::Vanilla}) {
      group.clear();
      group_tokens.clear();
      for (size_t i = 0; i < sessions.size(); ++i) {
        if (sessions[i]->mode != mode) continue;
        group.push_back(sessions[i]);
        group_tokens.push_back(tokens[i]);
      }
      if (!group.empty()) group[0]->runner->prefill_batch(group, group_tokens);
    }
  });
}

void Session::set_sampler(const SamplerConfig& config, std::string_view who) {
  stream.require_usable(who);
  discard_ahead();  // tokens drawn under the old settings
  sampler = config;
}

int64_t Session::shift_context() {
  const size_t keep = static_cast<size_t>(context / 2);
  if (keep == 0 || history.size() <= keep)
    fail(PHOTON_ERR_INTERNAL, "shift_context: nothing to drop from a history of " +
                                  std::to_string(history.size()) + " tokens");
  std::unique_ptr<Session> fresh = create(model, mode, context, sampler, kv_type);
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
