// The session implementations behind create_session (engine/session.h).
#pragma once

#include "engine/hier_state.h"
#include "engine/session.h"

namespace photon {

class HierGenSession final : public Session {
 public:
  HierGenSession(const Model& model, int context);
  void prefill(std::span<const int32_t> tokens) override;
  void sync_group(std::span<Session* const> group) override;
  void lanes(int64_t limit, bool parallel, std::vector<Lane>& out) override;
  KvBytes kv_bytes(int level) const override;

 private:
  friend class SessionCodec;
  HierState state_;
};

// RecGen (spec section 5): after prefill only the top encoder's cache is kept. Above level 1 the
// open units' child latents ("plans") do not depend on sampled tokens, so each level-2 unit's plan
// is computed as soon as it opens and all its level-1 windows decode together.
class RecGenSession final : public Session {
 public:
  RecGenSession(const Model& model, int context);
  void prefill(std::span<const int32_t> tokens) override;
  void sync_group(std::span<Session* const> group) override;
  void lanes(int64_t limit, bool parallel, std::vector<Lane>& out) override;
  void feed_group(std::span<Session* const> group,
                  std::span<const std::vector<int32_t>> tokens) override;
  void rollback() override;
  KvBytes kv_bytes(int level) const override;

 private:
  friend class SessionCodec;
  void build_from(HierState& st);
  // Batched over sessions: the plans of level l (each session's open unit's child latents) from a
  // conditioner and the unit's children already in the prompt, and the level-1 windows of a group.
  static void compute_plans(const Model& model, int level, std::span<RecGenSession* const> sessions,
                            std::span<const float* const> conds,
                            std::span<const float* const> prompt_children,
                            std::span<const int> n_prompt, Scratch& s);
  static void open_groups(const Model& model, std::span<RecGenSession* const> sessions,
                          std::span<const int> first_window,
                          std::span<const std::vector<int32_t>> open_tokens, Scratch& s);
  static void advance_groups(const Model& model, std::span<RecGenSession* const> sessions,
                             Scratch& s);
  int64_t group_end() const;

  KvCache top_;                  // level-L encoder cache: the only cache that grows
  std::vector<float> top_last_;  // X(L) of the last complete top unit
  bool has_top_ = false;
  std::vector<std::vector<float>>
      plans_;                  // plans_[l]: [C_l, D_{l-1}] latents of level-l unit's children
  std::vector<Window> group_;  // level-1 windows of the open level-2 unit
  int64_t group_start_ = 0;    // position of the group's first token
  std::vector<int> lane_windows_;
  bool generated_ = false;
};

class VanillaSession final : public Session {
 public:
  VanillaSession(const Model& model, int context);
  void prefill(std::span<const int32_t> tokens) override;
  void sync_group(std::span<Session* const> group) override;
  void lanes(int64_t limit, bool parallel, std::vector<Lane>& out) override;
  KvBytes kv_bytes(int level) const override;

 private:
  friend class SessionCodec;
  KvCache cache_;
  std::vector<float> hidden_;  // [D]: output of the last consumed position
};

}  // namespace photon
