// Measurement helpers of `photon bench`: the models under test, the sessions of the paper's
// protocol (random token ids, EOS ignored), KV-cache arithmetic from the configuration, and the
// process's memory as the kernel counts it. Public C API only.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common.h"

namespace photon::cli::bench {

// The paper's four rows: how a model generates in a run.
enum class Row { Vanilla, Block, HierGen, RecGen };
const char* row_name(Row row);  // "vanilla", "block", "hiergen", "recgen"
// A --mode value; UsageError for anything else.
Row parse_row(const std::string& text);

struct BenchModel {
  std::string name;  // the preset's name, or the file's stem
  std::string path;
  ModelPtr model;
  nlohmann::json config;
  uint64_t parameters = 0;
  std::string arch;                         // "photon" or "vanilla"
  int levels = 0;                           // PHOTON levels; 0 for vanilla
  std::vector<Row> rows;                    // the rows this model can run, in the paper's order
  int32_t threads = 0;                      // --threads (0: the library's default)
  photon_dtype kv_type = PHOTON_DTYPE_F32;  // --kv-type of the sessions it opens
};

// Where a benchmark model comes from and how one with random weights is written.
struct ModelSource {
  enum class Kind { File, Preset, Config } kind;
  std::string value;  // path or preset name
};
struct WriteSettings {
  std::string dir;  // where written models are kept and reused
  photon_dtype dtype = PHOTON_DTYPE_F32;
  uint64_t seed = 0;
};
// Loads the model onto `device` with `threads` (load_model), first writing it with random weights
// for a preset or config (reused when a file of the same configuration, dtype and seed is already
// in settings.dir).
BenchModel open_model(const ModelSource& source, const WriteSettings& settings,
                      const DeviceOptions& device, int32_t threads);

// A session of the protocol: the row's mode, `context` tokens of cache allocated up front, EOS
// ignored, temperature 1 with a fixed seed.
SessionPtr open_session(const BenchModel& model, Row row, int32_t context, uint64_t seed);

// n random token ids in [3, vocab), with BOS first when with_bos (the start of a prompt).
std::vector<int32_t> random_tokens(const photon_model* model, size_t n, uint64_t seed,
                                   bool with_bos);

// One stack cache that grows with the context: `layers` x 2 (K, V) x kv_dim values for every
// `tokens_per_position` tokens.
struct GrowingCache {
  int level = 0;  // 1..L for PHOTON encoders; 1 for vanilla
  int64_t layers = 0;
  int64_t kv_dim = 0;
  int64_t tokens_per_position = 1;
  uint64_t bytes(int64_t tokens, int bytes_per_value) const;
};
// The caches that grow with the context (spec section 5): vanilla's one stack; every PHOTON
// encoder for HierGen / Block; only the top level's encoder for RecGen.
std::vector<GrowingCache> growing_caches(const BenchModel& model, Row row);
// Their bytes per sample after `tokens` tokens, at bytes_per_value (4: f32, the CPU engine;
// 2: bf16, the paper's GPU figure).
uint64_t analytic_kv_bytes(const BenchModel& model, Row row, int64_t tokens, int bytes_per_value);

// The engine's own accounting (photon_session_kv_bytes), per level and summed.
struct KvUse {
  std::vector<uint64_t> encoder;  // index level - 1
  std::vector<uint64_t> window;
  uint64_t encoder_total = 0;
  uint64_t window_total = 0;
};
KvUse kv_use(const BenchModel& model, const photon_session* session);

// Resident memory of this process (/proc/self/statm), in bytes.
uint64_t resident_bytes();
// The peak of the resident memory since the last reset_peak_resident (VmHWM); where the kernel
// does not allow the reset, the peak since the process started.
uint64_t peak_resident_bytes();
void reset_peak_resident();
// Returns freed heap pages to the kernel, so that the next growth of the resident set is memory
// newly in use rather than a reuse of pages freed earlier.
void release_free_heap();
// The CPU's model name, the number of hardware threads and the 1-minute load average.
std::string cpu_name();
unsigned hardware_threads();
double load_average();

double seconds_since(std::chrono::steady_clock::time_point start);

}  // namespace photon::cli::bench
