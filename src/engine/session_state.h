// Saving and restoring sessions (schemas/session.fbs): the exact caches, history, sampler and
// stream state, so that a restored session continues exactly as the original would have. The
// common part is written here; each mode's runner writes and reads its own part through a
// StateWriter / StateReader.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/session.h"
#include "session_generated.h"

namespace photon {

// Newest session-state format version this build reads. It writes version 1 for sessions with f32
// KV caches, so that older builds read them, and version 2 (16-bit caches) otherwise.
constexpr uint32_t kSessionFormatVersion = 2;

template <typename T>
using FbOffset = flatbuffers::Offset<T>;
template <typename T>
using FbVector = flatbuffers::Offset<flatbuffers::Vector<T>>;

class StateWriter {
 public:
  StateWriter(Backend& backend, uint64_t estimate) : backend_(backend), estimate_(estimate) {}

  flatbuffers::FlatBufferBuilder& builder() { return b_; }
  // Counts the bytes of the caches about to be written; fails before building anything when the
  // state would pass the format's 2 GiB limit.
  void expect_bytes(uint64_t bytes);
  FbOffset<fb::Cache> cache(const KvCache& cache);
  FbOffset<fb::WindowState> window(const Window& window);
  FbVector<float> floats(const Tensor& values);

  // The mode's fields of the SessionState table, set by the runner.
  fb::SessionKind kind = fb::SessionKind::Vanilla;
  int64_t consumed = 0;
  FbVector<FbOffset<fb::LevelState>> levels;
  FbVector<float> top_last, hidden;
  FbOffset<fb::Cache> top, kv_cache;
  FbVector<FbOffset<fb::Plan>> plans;
  FbVector<FbOffset<fb::WindowState>> group;
  bool has_top = false, generated = false;
  int64_t group_start = 0;

 private:
  Backend& backend_;
  uint64_t estimate_;
  flatbuffers::FlatBufferBuilder b_{1 << 16};
};

class StateReader {
 public:
  StateReader(Backend& backend, const fb::SessionState& state, const ModelConfig& config)
      : backend_(backend), state_(state), config_(config) {}

  const fb::SessionState& state() const { return state_; }
  const ModelConfig& config() const { return config_; }
  // Fills a cache allocated for this model and context; expected_len < 0 accepts any length.
  void cache(const fb::Cache* in, KvCache& cache, int64_t expected_len,
             const std::string& what) const;
  void window(const fb::WindowState* in, Window& window, const std::string& what) const;
  // Exactly dst.rows x dst.cols values, else Error(PHOTON_ERR_CORRUPT, wrong_size).
  void floats(const flatbuffers::Vector<float>* in, const Tensor& dst,
              const std::string& wrong_size) const;

  // Throws Error(PHOTON_ERR_CORRUPT) naming what is wrong.
  static void expect(bool ok, const std::string& what);

 private:
  Backend& backend_;
  const fb::SessionState& state_;
  const ModelConfig& config_;
};

// photon_session_save: the session's state (it must hold no token fetched only in part; tokens
// sampled ahead are discarded first).
std::vector<uint8_t> save_session(Session& session, std::string_view who);
// photon_session_restore: validates everything before building anything. Throws Error with
// PHOTON_ERR_TRUNCATED, _BAD_IDENTIFIER, _CORRUPT, _UNSUPPORTED_VERSION or _WRONG_MODEL.
std::unique_ptr<Session> restore_session(const Model& model, std::span<const uint8_t> blob);

}  // namespace photon
