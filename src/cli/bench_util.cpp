#include "bench_util.h"

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

namespace photon::cli::bench {

namespace {

std::string preset_json(const std::string& name) {
  size_t length = 0;
  const photon_status status = photon_preset_config(name.c_str(), nullptr, 0, &length);
  if (status == PHOTON_ERR_INVALID_ARGUMENT) {
    throw UsageError("--preset: unknown preset '" + name + "' (see 'photon init --list-presets')");
  }
  if (status != PHOTON_ERR_BUFFER_TOO_SMALL) check(status, "cannot read preset '" + name + "'");
  std::string json(length + 1, '\0');
  check(photon_preset_config(name.c_str(), json.data(), json.size(), &length),
        "cannot read preset '" + name + "'");
  json.resize(length);
  return json;
}

// FNV-1a: names a written model after everything that determines its bytes.
uint64_t fingerprint(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::string write_random_model(const std::string& name, const std::string& config_json,
                               const std::string& origin, const WriteSettings& settings) {
  char suffix[64];
  std::snprintf(
      suffix, sizeof suffix, "-%s-%08llx.photon", dtype_name(settings.dtype),
      static_cast<unsigned long long>(
          fingerprint(config_json + dtype_name(settings.dtype) + std::to_string(settings.seed)) &
          0xffffffffull));
  const std::string path = settings.dir + "/" + name + suffix;
  std::error_code error;
  if (std::filesystem::exists(path, error)) return path;
  std::filesystem::create_directories(settings.dir, error);
  if (error) {
    throw RuntimeFailure("cannot create the model directory '" + settings.dir +
                         "': " + error.message());
  }
  ProgressBar bar("writing " + name);
  photon_write_options* raw = nullptr;
  check(photon_write_options_create(&raw), "cannot create write options");
  WriteOptionsPtr options(raw);
  check(photon_write_options_set_dtype(options.get(), settings.dtype), "cannot set the dtype");
  check(photon_write_options_set_seed(options.get(), settings.seed), "cannot set the seed");
  check(photon_write_options_set_metadata(options.get(), "source", origin.c_str()),
        "cannot record the configuration's origin");
  check(photon_write_options_set_progress(options.get(), &ProgressBar::callback, &bar),
        "cannot set write progress");
  check(photon_model_init_random(config_json.c_str(), path.c_str(), options.get()),
        "cannot write '" + path + "'");
  return path;
}

int64_t json_int(const nlohmann::json& object, const char* key, const std::string& model) {
  if (!object.contains(key) || !object[key].is_number_integer()) {
    throw RuntimeFailure("model '" + model + "': configuration has no integer '" + key + "'");
  }
  return object[key].get<int64_t>();
}

// splitmix64: a small, well-mixed generator, so that prompts are reproducible everywhere.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

const char* row_name(Row row) {
  switch (row) {
    case Row::Vanilla: return "vanilla";
    case Row::Block: return "block";
    case Row::HierGen: return "hiergen";
    case Row::RecGen: return "recgen";
  }
  return "unknown";
}

Row parse_row(const std::string& text) {
  for (Row row : {Row::Vanilla, Row::Block, Row::HierGen, Row::RecGen}) {
    if (text == row_name(row)) return row;
  }
  throw UsageError("--mode: '" + text + "' is not one of vanilla, block, hiergen, recgen");
}

BenchModel open_model(const ModelSource& source, const WriteSettings& settings,
                      const DeviceOptions& device, int32_t threads) {
  BenchModel bench;
  if (source.kind == ModelSource::Kind::File) {
    bench.path = source.value;
    bench.name = std::filesystem::path(source.value).stem().string();
  } else if (source.kind == ModelSource::Kind::Preset) {
    bench.name = source.value;
    bench.path = write_random_model(bench.name, preset_json(source.value), "preset " + source.value,
                                    settings);
  } else {
    bench.name = std::filesystem::path(source.value).stem().string();
    bench.path =
        write_random_model(bench.name, read_file(source.value, "config"), source.value, settings);
  }
  bench.model = load_model(bench.path, device, threads);
  bench.threads = threads;
  bench.config = nlohmann::json::parse(photon_model_config_json(bench.model.get()));
  bench.parameters = photon_model_parameter_count(bench.model.get());
  bench.arch = photon_model_arch(bench.model.get());
  bench.levels = photon_model_levels(bench.model.get());
  if (bench.arch == "vanilla")
    bench.rows = {Row::Vanilla};
  else if (bench.levels == 1)
    bench.rows = {Row::Block};
  else
    bench.rows = {Row::HierGen, Row::RecGen};
  return bench;
}

SessionPtr open_session(const BenchModel& model, Row row, int32_t context, uint64_t seed) {
  photon_session_options* raw = nullptr;
  check(photon_session_options_create(&raw), "cannot create session options");
  SessionOptionsPtr options(raw);
  const photon_mode mode = row == Row::RecGen    ? PHOTON_MODE_RECGEN
                           : row == Row::Vanilla ? PHOTON_MODE_AUTO
                                                 : PHOTON_MODE_HIERGEN;
  check(photon_session_options_set_mode(options.get(), mode), "cannot set the mode");
  check(photon_session_options_set_context_length(options.get(), context),
        "cannot set the context length to " + std::to_string(context));
  check(photon_session_options_set_kv_type(options.get(), model.kv_type), "cannot set --kv-type");
  check(photon_session_options_set_ignore_eos(options.get(), 1), "cannot ignore EOS");
  check(photon_session_options_set_temperature(options.get(), 1.0f), "cannot set temperature");
  check(photon_session_options_set_seed(options.get(), seed), "cannot set the sampler seed");
  photon_session* session = nullptr;
  check(photon_session_create(model.model.get(), options.get(), &session),
        std::string("cannot create a ") + row_name(row) + " session");
  return SessionPtr(session);
}

std::vector<int32_t> random_tokens(const photon_model* model, size_t n, uint64_t seed,
                                   bool with_bos) {
  const uint64_t vocab = static_cast<uint64_t>(photon_model_vocab_size(model));
  if (vocab <= 3) throw RuntimeFailure("the vocabulary is too small for random prompts");
  std::vector<int32_t> tokens;
  tokens.reserve(n);
  const int32_t bos = photon_model_bos(model);
  if (with_bos && n > 0 && bos >= 0) tokens.push_back(bos);
  uint64_t state = seed;
  while (tokens.size() < n) {
    tokens.push_back(static_cast<int32_t>(3 + next_random(state) % (vocab - 3)));
  }
  return tokens;
}

uint64_t GrowingCache::bytes(int64_t tokens, int bytes_per_value) const {
  return static_cast<uint64_t>(layers * 2 * (tokens / tokens_per_position) * kv_dim *
                               bytes_per_value);
}

std::vector<GrowingCache> growing_caches(const BenchModel& model, Row row) {
  const nlohmann::json& c = model.config;
  if (row == Row::Vanilla) {
    return {{1, json_int(c, "layers", model.name),
             json_int(c, "kv_heads", model.name) * json_int(c, "head_dim", model.name), 1}};
  }
  std::vector<GrowingCache> caches;
  int64_t block = 1;
  const nlohmann::json& levels = c.at("levels");
  for (size_t l = 0; l < levels.size(); ++l) {
    const nlohmann::json& encoder = levels[l].at("encoder");
    block *= json_int(levels[l], "chunk_len", model.name);
    caches.push_back(
        {static_cast<int>(l + 1), json_int(encoder, "layers", model.name),
         json_int(encoder, "kv_heads", model.name) * json_int(encoder, "head_dim", model.name),
         block});
  }
  if (row == Row::RecGen) caches.erase(caches.begin(), caches.end() - 1);
  return caches;
}

uint64_t analytic_kv_bytes(const BenchModel& model, Row row, int64_t tokens, int bytes_per_value) {
  uint64_t total = 0;
  for (const GrowingCache& cache : growing_caches(model, row)) {
    total += cache.bytes(tokens, bytes_per_value);
  }
  return total;
}

KvUse kv_use(const BenchModel& model, const photon_session* session) {
  KvUse use;
  const int levels = model.levels > 0 ? model.levels : 1;
  for (int level = 1; level <= levels; ++level) {
    uint64_t encoder = 0, window = 0;
    check(photon_session_kv_bytes(session, level, &encoder, &window),
          "cannot read the KV bytes of level " + std::to_string(level));
    use.encoder.push_back(encoder);
    use.window.push_back(window);
    use.encoder_total += encoder;
    use.window_total += window;
  }
  return use;
}

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return resident_bytes();
}

void reset_peak_resident() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";  // "5" resets VmHWM to the current resident size (Linux 4.0+)
}

void release_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

std::string cpu_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown";
}

unsigned hardware_threads() {
  return std::thread::hardware_concurrency();
}

double load_average() {
  std::ifstream loadavg("/proc/loadavg");
  double one_minute = -1.0;
  if (!(loadavg >> one_minute)) return -1.0;
  return one_minute;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace photon::cli::bench
