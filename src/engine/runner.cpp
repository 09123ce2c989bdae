#include "engine/runner.h"

#include <algorithm>

#include "engine/hiergen.h"
#include "engine/model.h"
#include "engine/recgen.h"
#include "engine/session.h"
#include "engine/vanilla.h"

namespace photon {

void Runner::rollback(Session&) const {}

size_t Runner::pass_tokens() const {
  return static_cast<size_t>(std::max<int64_t>(1, model_.backend().prefill_pass_rows()));
}

void Runner::in_passes(std::span<Session* const> sessions,
                       std::span<const std::span<const int32_t>> tokens,
                       const std::function<void(const PrefillPass&)>& pass) const {
  std::vector<size_t> done(sessions.size(), 0);
  PrefillPass p;
  for (;;) {
    p.index.clear();
    p.sessions.clear();
    p.slices.clear();
    size_t budget = pass_tokens();
    for (size_t i = 0; i < sessions.size() && budget > 0; ++i) {
      const size_t n = std::min({kPrefillSlice, tokens[i].size() - done[i], budget});
      if (n == 0) continue;
      p.index.push_back(i);
      p.sessions.push_back(sessions[i]);
      p.slices.push_back(tokens[i].subspan(done[i], n));
      done[i] += n;
      budget -= n;
    }
    if (p.sessions.empty()) return;
    for (Session* s : sessions) s->check_cancel();
    pass(p);
  }
}

std::unique_ptr<Runner> make_runner(Mode mode, const Model& model) {
  switch (mode) {
    case Mode::HierGen: return make_hiergen_runner(model);
    case Mode::RecGen: return make_recgen_runner(model);
    case Mode::Vanilla: return make_vanilla_runner(model);
  }
  fail(PHOTON_ERR_INTERNAL, "make_runner: unknown mode");
}

void Runners::borrow(Session& session) {
  Runner*& runner = runners_[static_cast<size_t>(session.mode)];
  if (!runner) runner = session.runner.get();
}

Runner& Runners::of(Mode mode) {
  const size_t i = static_cast<size_t>(mode);
  if (!runners_[i]) {
    owned_[i] = make_runner(mode, model_);
    runners_[i] = owned_[i].get();
  }
  return *runners_[i];
}

}  // namespace photon
