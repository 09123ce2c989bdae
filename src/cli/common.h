// Helpers shared by the photon tool's commands: failures and exit codes, owning handles for the
// C API's objects, file reading, tokenizer round trips and terminal output.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "photon.h"

namespace photon::cli {

// A failure while doing the work (missing file, library error): exit code 1.
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A RuntimeFailure from PHOTON_ERR_OUT_OF_MEMORY (callers that size batches try a smaller one).
class OutOfMemory : public RuntimeFailure {
 public:
  using RuntimeFailure::RuntimeFailure;
};

// Throws RuntimeFailure "what: <photon_last_error()> (<status name>)" unless status is PHOTON_OK
// (OutOfMemory for PHOTON_ERR_OUT_OF_MEMORY).
void check(photon_status status, const std::string& what);
// As check, but for a setting the user gave on the command line: throws UsageError.
void check_setting(photon_status status, const std::string& option);

struct PhotonDeleter {
  void operator()(photon_model* p) const { photon_model_free(p); }
  void operator()(photon_session* p) const { photon_session_free(p); }
  void operator()(photon_session_options* p) const { photon_session_options_free(p); }
  void operator()(photon_write_options* p) const { photon_write_options_free(p); }
  void operator()(photon_load_options* p) const { photon_load_options_free(p); }
};
using ModelPtr = std::unique_ptr<photon_model, PhotonDeleter>;
using SessionPtr = std::unique_ptr<photon_session, PhotonDeleter>;
using SessionOptionsPtr = std::unique_ptr<photon_session_options, PhotonDeleter>;
using WriteOptionsPtr = std::unique_ptr<photon_write_options, PhotonDeleter>;
using LoadOptionsPtr = std::unique_ptr<photon_load_options, PhotonDeleter>;

// The model named by -m / --model, else $PHOTON_MODEL; UsageError when neither is set.
std::string model_path(const Args& args);
// Where a model computes and how its products round: --device ("cpu", "auto", "cuda", "cuda:N")
// and --precision ("exact", "bf16", "int8"; empty: the device's default).
struct DeviceOptions {
  std::string device = "cpu";
  std::string precision;
};
// Loads a model onto a device computing with at most `threads` CPU threads
// (photon_load_options_set_threads; 0: every core), with a progress bar when stderr is a
// terminal; `verify` reads every weight (photon_load_options_set_verify). A device or precision
// that is not one of those is a UsageError naming --device or --precision.
ModelPtr load_model(const std::string& path, const DeviceOptions& device = {}, int32_t threads = 0,
                    bool verify = false);
// The model's embedded sentencepiece model (photon_model_tokenizer_model).
std::string tokenizer_model(const photon_model* model);
// Writes `data` to `path` (through "<path>.tmp", renamed); RuntimeFailure naming `what` and path.
void write_file(const std::string& path, const std::string& data, const std::string& what);
// The --device (default "cpu") and --precision values of a command.
DeviceOptions device_options(const Args& args);
// --threads N (N >= 1), or 0 (the library's default: every core) when not given.
int32_t parse_threads(const Args& args);

// The whole content of a file ("-" reads stdin); RuntimeFailure naming `what` and the path.
std::string read_file(const std::string& path, const std::string& what);

std::vector<int32_t> tokenize(const photon_model* model, const std::string& text, bool add_bos);
std::string detokenize(const photon_model* model, const std::vector<int32_t>& tokens);

// Storage dtypes by their command-line names: of KV caches (f32, f16, bf16) and of weights (those
// and q8).
photon_dtype parse_kv_type(const std::string& text, const std::string& what);
photon_dtype parse_weight_dtype(const std::string& text, const std::string& what);
// "auto" | "hiergen" | "recgen" (UsageError naming --mode otherwise), and back.
photon_mode parse_mode(const std::string& text);
const char* mode_name(photon_mode mode);
const char* dtype_name(photon_dtype dtype);

class ProgressBar;
// Write options from the shared --dtype / --tokenizer / --seed flags; progress may be NULL.
WriteOptionsPtr make_write_options(const Args& args, ProgressBar* progress);

// 1234567 -> "1,234,567".
std::string group_digits(uint64_t value);
// 1536 -> "1.5 KiB".
std::string human_bytes(uint64_t bytes);
// Text with control and non-ASCII bytes escaped (\n, \t, \xNN), in double quotes.
std::string quoted(const std::string& text);

bool stderr_is_terminal();

// A progress bar on stderr, drawn only when stderr is a terminal; usable as a
// photon_progress_callback with the bar as user data.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  static int callback(void* user_data, float fraction);
  // Clears the bar's line so that the next message starts clean; the destructor calls it too.
  void finish();

 private:
  void draw(float fraction);
  std::string label_;
  bool enabled_;
  int last_percent_ = -1;
};

}  // namespace photon::cli
