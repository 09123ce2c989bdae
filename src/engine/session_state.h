// Saving and restoring sessions (schemas/session.fbs): the exact caches, history, sampler and
// stream state, so that a restored session continues exactly as the original would have. The
// part every session has is written and read here; the state of its mode is one table of the
// ModeState union, which the mode's runner writes and reads through a StateWriter / StateReader.
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

// The newest format version this build writes and reads. Versions 1 and 2 (f32 caches, and
// 16-bit ones) kept every mode's fields in one table (schemas/session_v2.fbs); they still restore
// (engine/session_state_v2.h). Version 4 added the presence and frequency penalties, the logit
// bias and the alternatives per token; a state without them is written as version 3, which builds
// that predate them restore.
constexpr uint32_t kSessionFormatVersion = 4;

template <typename T>
using FbOffset = flatbuffers::Offset<T>;
template <typename T>
using FbVector = flatbuffers::Offset<flatbuffers::Vector<T>>;

class StateWriter {
 public:
  // `reserve`: the bytes the builder starts with (the state's expected size, so that it need not
  // grow by copying what it holds).
  StateWriter(Backend& backend, uint64_t estimate, size_t reserve)
      : backend_(backend), estimate_(estimate), b_(reserve) {}

  flatbuffers::FlatBufferBuilder& builder() { return b_; }
  // Counts the bytes of the caches about to be written; fails before building anything when the
  // state would pass the format's 2 GiB limit.
  void expect_bytes(uint64_t bytes);
  FbOffset<fb::Cache> cache(const KvCache& cache);
  FbOffset<fb::WindowState> window(const Window& window);
  FbVector<float> floats(const Tensor& values);

  // The mode's table of the ModeState union (fb::HierGenState, ...).
  template <typename Table>
  void set_mode(FbOffset<Table> table) {
    mode_type_ = fb::ModeStateTraits<Table>::enum_value;
    mode_ = table.Union();
  }
  fb::ModeState mode_type() const { return mode_type_; }
  flatbuffers::Offset<void> mode() const { return mode_; }

 private:
  Backend& backend_;
  uint64_t estimate_;
  flatbuffers::FlatBufferBuilder b_;
  fb::ModeState mode_type_ = fb::ModeState::NONE;
  flatbuffers::Offset<void> mode_;
};

class StateReader {
 public:
  // Reads the mode's table `mode_table` of type `mode_type` (may be null: then mode() refuses).
  StateReader(Backend& backend, fb::ModeState mode_type, const void* mode_table)
      : backend_(backend), mode_type_(mode_type), mode_table_(mode_table) {}

  // The mode's table; Error(PHOTON_ERR_CORRUPT) naming the mode when it is absent.
  template <typename Table>
  const Table& mode(std::string_view mode_name) const {
    expect(mode_type_ == fb::ModeStateTraits<Table>::enum_value && mode_table_ != nullptr,
           "the " + std::string(mode_name) + " state is missing");
    return *static_cast<const Table*>(mode_table_);
  }
  // Fills a cache allocated for this model and context; expected_len < 0 accepts any length.
  void cache(const fb::Cache* in, KvCache& cache, int64_t expected_len,
             const std::string& what) const;
  void window(const fb::WindowState* in, Window& window, const std::string& what) const;
  // Exactly dst.rows x dst.cols finite values, else Error(PHOTON_ERR_CORRUPT) naming `what`.
  void floats(const flatbuffers::Vector<float>* in, const Tensor& dst,
              const std::string& what) const;

  // Throws Error(PHOTON_ERR_CORRUPT) naming what is wrong.
  static void expect(bool ok, const std::string& what);

 private:
  Backend& backend_;
  fb::ModeState mode_type_;
  const void* mode_table_;
};

// photon_session_save: the session's state (it must hold no token fetched only in part; tokens
// sampled ahead are discarded first).
std::vector<uint8_t> save_session(Session& session, std::string_view who);
// photon_session_restore: validates everything before building anything. Throws Error with
// PHOTON_ERR_TRUNCATED, _BAD_IDENTIFIER, _CORRUPT, _UNSUPPORTED_VERSION or _WRONG_MODEL.
std::unique_ptr<Session> restore_session(const Model& model, std::span<const uint8_t> blob);

}  // namespace photon
