#include "engine/vanilla.h"

#include <algorithm>

#include "engine/score.h"
#include "engine/session.h"
#include "engine/session_state.h"
#include "engine/stack.h"
#include "engine/weights.h"

namespace photon {

namespace {

class VanillaRunner final : public Runner {
 public:
  using Runner::Runner;

  void init(Session& s) const override {
    const ModelConfig& c = model_.config();
    VanillaState& st = s.state.emplace<VanillaState>();
    st.cache.allocate(model_.backend(), c.stack.layers, s.context, c.stack.kv_dim(), s.kv_type);
    st.hidden = zero_matrix(model_.backend(), 1, c.dim, "last hidden state");
  }

  void prefill(Session& s, std::span<const int32_t> tokens, float* logprobs) override {
    if (logprobs) teacher_forced_logprobs(model_, s.history, tokens, logprobs);
    Session* self = &s;
    for (size_t at = 0; at < tokens.size(); at += kPrefillSlice) {
      s.check_cancel();
      const auto slice = tokens.subspan(at, std::min(kPrefillSlice, tokens.size() - at));
      s.history.insert(s.history.end(), slice.begin(), slice.end());
      catch_up({&self, 1});
    }
  }

  void prefill_batch(std::span<Session* const> sessions,
                     std::span<const std::span<const int32_t>> tokens) override {
    in_passes(sessions, tokens, [&](const PrefillPass& pass) {
      for (size_t k = 0; k < pass.sessions.size(); ++k) {
        std::vector<int32_t>& history = pass.sessions[k]->history;
        history.insert(history.end(), pass.slices[k].begin(), pass.slices[k].end());
      }
      catch_up(pass.sessions);
    });
  }

  // Every session's undelivered history continues its own cache, in one stack pass for all of
  // them; sampled tokens are consumed only once they are delivered.
  void catch_up(std::span<Session* const> sessions) override {
    const ModelConfig& c = model_.config();
    Backend& b = model_.backend();
    std::vector<StackSegment> segments;
    std::vector<VanillaState*> lagging;
    std::vector<int32_t> tokens;
    for (Session* s : sessions) {
      VanillaState& st = s->as<VanillaState>();
      const int lag = static_cast<int>(s->history.size()) - st.cache.len;
      if (lag <= 0) continue;
      tokens.insert(tokens.end(), s->history.end() - lag, s->history.end());
      segments.push_back({&st.cache, lag});
      lagging.push_back(&st);
    }
    if (tokens.empty()) return;
    const Tensor x = embedded_.get(b, static_cast<int64_t>(tokens.size()), c.dim);
    b.embed(model_.weights().tok_emb, tokens, x);
    stack_forward(b, model_.weights().stack, c.norm_eps, c.rope_theta, x, segments, stack_);
    std::vector<RowCopy> copies;
    int64_t row = 0;
    for (size_t i = 0; i < lagging.size(); ++i) {
      row += segments[i].rows;
      copies.push_back({lagging[i]->hidden, x.row(row - 1)});
    }
    b.copy_rows(copies);
  }

  void lanes(const Session& s, std::vector<Lane>& out) const override {
    out.assign(1, {static_cast<int64_t>(s.history.size()), s.as<VanillaState>().hidden});
  }

  KvBytes kv_bytes(const Session& s, int) const override {
    return {s.as<VanillaState>().cache.bytes_in_use(), 0};
  }

  void save(const Session& s, StateWriter& out) const override {
    const VanillaState& st = s.as<VanillaState>();
    out.expect_bytes(st.cache.bytes_in_use());
    const auto cache = out.cache(st.cache);
    const auto hidden = out.floats(st.hidden);
    out.set_mode(fb::CreateVanillaState(out.builder(), cache, hidden));
  }

  void restore(Session& s, const StateReader& in) const override {
    const fb::VanillaState& state = in.mode<fb::VanillaState>("vanilla");
    // It holds the history's first positions, the rest to be consumed lazily.
    const fb::Cache* cache = state.cache();
    StateReader::expect(!cache || cache->len() <= static_cast<int64_t>(s.history.size()),
                        "the KV cache holds " + std::to_string(cache ? cache->len() : 0) +
                            " positions, more than the history's " +
                            std::to_string(s.history.size()));
    VanillaState& st = s.as<VanillaState>();
    in.cache(cache, st.cache, -1, "the KV cache");
    in.floats(state.hidden(), st.hidden, "the last hidden state");
  }

 private:
  Scratch embedded_;
  StackScratch stack_;
};

}  // namespace

std::unique_ptr<Runner> make_vanilla_runner(const Model& model) {
  return std::make_unique<VanillaRunner>(model);
}

}  // namespace photon
