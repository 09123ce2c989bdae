#include "common.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace photon::cli {

namespace {

std::string library_message(photon_status status) {
  const char* message = photon_last_error();
  std::string text = message != nullptr && message[0] != '\0' ? message : "(no message)";
  return text + " (" + photon_status_name(status) + ")";
}

}  // namespace

void check(photon_status status, const std::string& what) {
  if (status == PHOTON_OK) return;
  if (status == PHOTON_ERR_OUT_OF_MEMORY) throw OutOfMemory(what + ": " + library_message(status));
  throw RuntimeFailure(what + ": " + library_message(status));
}

void check_setting(photon_status status, const std::string& option) {
  if (status != PHOTON_OK) throw UsageError(option + ": " + library_message(status));
}

std::string model_path(const Args& args) {
  if (std::optional<std::string> path = args.value("model")) return *path;
  const char* from_env = std::getenv("PHOTON_MODEL");
  if (from_env != nullptr && from_env[0] != '\0') return from_env;
  throw UsageError("no model given: pass -m MODEL or set PHOTON_MODEL");
}

DeviceOptions device_options(const Args& args) {
  DeviceOptions chosen{args.value("device").value_or("cpu"), args.value("precision").value_or("")};
  // Checked here, before any model is loaded or port opened, so that a mistake fails fast.
  photon_load_options* raw_options = nullptr;
  check(photon_load_options_create(&raw_options), "cannot create load options");
  const LoadOptionsPtr options(raw_options);
  check_setting(photon_load_options_set_device(options.get(), chosen.device.c_str()), "--device");
  if (!chosen.precision.empty())
    check_setting(photon_load_options_set_precision(options.get(), chosen.precision.c_str()),
                  "--precision");
  return chosen;
}

int32_t parse_threads(const Args& args) {
  const std::optional<std::string> text = args.value("threads");
  if (!text) return 0;
  const int32_t threads = parse_int32(*text, "--threads");
  if (threads < 1) throw UsageError("--threads: must be at least 1, got " + *text);
  return threads;
}

ModelPtr load_model(const std::string& path, const DeviceOptions& device, int32_t threads,
                    bool verify) {
  photon_load_options* raw_options = nullptr;
  check(photon_load_options_create(&raw_options), "cannot create load options");
  LoadOptionsPtr options(raw_options);
  check_setting(photon_load_options_set_device(options.get(), device.device.c_str()), "--device");
  if (!device.precision.empty())
    check_setting(photon_load_options_set_precision(options.get(), device.precision.c_str()),
                  "--precision");
  check_setting(photon_load_options_set_threads(options.get(), threads), "--threads");
  check(photon_load_options_set_verify(options.get(), verify ? 1 : 0), "cannot set --verify");
  ProgressBar bar("loading");
  check(photon_load_options_set_progress(options.get(), &ProgressBar::callback, &bar),
        "cannot set load progress");
  photon_model* model = nullptr;
  check(photon_model_load(path.c_str(), options.get(), &model), "cannot load model");
  return ModelPtr(model);
}

std::string tokenizer_model(const photon_model* model) {
  size_t size = 0;
  photon_status status = photon_model_tokenizer_model(model, nullptr, 0, &size);
  if (status != PHOTON_ERR_BUFFER_TOO_SMALL) {
    check(status, "cannot read the tokenizer");
    return {};
  }
  std::string bytes(size, '\0');
  check(photon_model_tokenizer_model(model, bytes.data(), bytes.size(), &size),
        "cannot read the tokenizer");
  bytes.resize(size);
  return bytes;
}

void write_file(const std::string& path, const std::string& data, const std::string& what) {
  const std::string partial = path + ".tmp";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out)
      throw RuntimeFailure("cannot write " + what + " '" + path + "': " + std::strerror(errno));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) {
      std::remove(partial.c_str());
      throw RuntimeFailure("cannot write " + what + " '" + path + "'");
    }
  }
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) {
    std::remove(partial.c_str());
    throw RuntimeFailure("cannot write " + what + " '" + path + "': " + error.message());
  }
}

std::string read_file(const std::string& path, const std::string& what) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  // A directory opens as a stream that reads nothing: it would pass for an empty file.
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    throw RuntimeFailure("cannot read " + what + " '" + path + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeFailure("cannot read " + what + " '" + path + "': " + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw RuntimeFailure("cannot read " + what + " '" + path + "'");
  return content.str();
}

std::vector<int32_t> tokenize(const photon_model* model, const std::string& text, bool add_bos) {
  size_t needed = 0;
  photon_status status =
      photon_model_tokenize(model, text.data(), text.size(), add_bos ? 1 : 0, nullptr, 0, &needed);
  if (status == PHOTON_OK) return {};
  if (status != PHOTON_ERR_BUFFER_TOO_SMALL) check(status, "cannot tokenize the text");
  std::vector<int32_t> tokens(needed);
  size_t written = 0;
  check(photon_model_tokenize(model, text.data(), text.size(), add_bos ? 1 : 0, tokens.data(),
                              tokens.size(), &written),
        "cannot tokenize the text");
  tokens.resize(written);
  return tokens;
}

std::string detokenize(const photon_model* model, const std::vector<int32_t>& tokens) {
  size_t needed = 0;
  photon_status status =
      photon_model_detokenize(model, tokens.data(), tokens.size(), nullptr, 0, &needed);
  if (status != PHOTON_ERR_BUFFER_TOO_SMALL) {
    check(status, "cannot detokenize");
    return {};
  }
  std::string text(needed + 1, '\0');
  size_t length = 0;
  check(photon_model_detokenize(model, tokens.data(), tokens.size(), text.data(), text.size(),
                                &length),
        "cannot detokenize");
  text.resize(length);
  return text;
}

photon_mode parse_mode(const std::string& text) {
  if (text == "auto") return PHOTON_MODE_AUTO;
  if (text == "hiergen") return PHOTON_MODE_HIERGEN;
  if (text == "recgen") return PHOTON_MODE_RECGEN;
  throw UsageError("--mode: '" + text + "' is not one of auto, hiergen, recgen");
}

const char* mode_name(photon_mode mode) {
  switch (mode) {
    case PHOTON_MODE_AUTO: return "auto";
    case PHOTON_MODE_HIERGEN: return "hiergen";
    case PHOTON_MODE_RECGEN: return "recgen";
  }
  return "unknown";
}

photon_dtype parse_kv_type(const std::string& text, const std::string& what) {
  if (text == "f32") return PHOTON_DTYPE_F32;
  if (text == "f16") return PHOTON_DTYPE_F16;
  if (text == "bf16") return PHOTON_DTYPE_BF16;
  throw UsageError(what + ": '" + text + "' is not one of f32, f16, bf16");
}

photon_dtype parse_weight_dtype(const std::string& text, const std::string& what) {
  if (text == "q8") return PHOTON_DTYPE_Q8;
  if (text == "f32" || text == "f16" || text == "bf16") return parse_kv_type(text, what);
  throw UsageError(what + ": '" + text + "' is not one of f32, f16, bf16, q8");
}

const char* dtype_name(photon_dtype dtype) {
  switch (dtype) {
    case PHOTON_DTYPE_F32: return "f32";
    case PHOTON_DTYPE_F16: return "f16";
    case PHOTON_DTYPE_BF16: return "bf16";
    case PHOTON_DTYPE_Q8: return "q8";
  }
  return "unknown";
}

WriteOptionsPtr make_write_options(const Args& args, ProgressBar* progress) {
  photon_write_options* raw = nullptr;
  check(photon_write_options_create(&raw), "cannot create write options");
  WriteOptionsPtr options(raw);
  if (std::optional<std::string> dtype = args.value("dtype")) {
    check_setting(
        photon_write_options_set_dtype(options.get(), parse_weight_dtype(*dtype, "--dtype")),
        "--dtype");
  }
  if (std::optional<std::string> seed = args.value("seed")) {
    check_setting(photon_write_options_set_seed(options.get(), parse_uint64(*seed, "--seed")),
                  "--seed");
  }
  if (std::optional<std::string> tokenizer = args.value("tokenizer")) {
    check_setting(photon_write_options_set_tokenizer_file(options.get(), tokenizer->c_str()),
                  "--tokenizer");
  }
  if (progress != nullptr) {
    check(photon_write_options_set_progress(options.get(), &ProgressBar::callback, progress),
          "cannot set write progress");
  }
  return options;
}

std::string group_digits(uint64_t value) {
  const std::string digits = std::to_string(value);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
}

std::string human_bytes(uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  }
  return text;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);  // UTF-8 sequences pass through for the terminal
        }
    }
  }
  return out + "\"";
}

bool stderr_is_terminal() {
  return isatty(STDERR_FILENO) == 1;
}

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)), enabled_(stderr_is_terminal()) {}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::finish() {
  if (enabled_ && last_percent_ >= 0) std::fputs("\r\033[K", stderr);
  last_percent_ = -1;
}

int ProgressBar::callback(void* user_data, float fraction) {
  static_cast<ProgressBar*>(user_data)->draw(fraction);
  return 0;
}

void ProgressBar::draw(float fraction) {
  if (!enabled_) return;
  if (!(fraction >= 0.0f)) fraction = 0.0f;
  if (fraction > 1.0f) fraction = 1.0f;
  const int percent = static_cast<int>(fraction * 100.0f);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  constexpr int kWidth = 30;
  const int filled = percent * kWidth / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled,
               "##############################", kWidth - filled, "", percent);
  std::fflush(stderr);
}

}  // namespace photon::cli
