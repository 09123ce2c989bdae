// photon bench: the PHOTON paper's benchmark protocol on this machine. Throughput and memory per
// sample in the prefill-heavy and decode-heavy regimes, decode cost against context length, and
// KV bytes against the configuration's formula; JSON lines and markdown tables.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "bench_report.h"
#include "bench_util.h"
#include "commands.h"
#include "common.h"

namespace photon::cli {
namespace {

using bench::BenchModel;
using bench::Record;
using bench::Row;
using Clock = std::chrono::steady_clock;

struct Regime {
  std::string name;  // "PF", "DE" or "P:G"
  int32_t prompt = 0;
  int32_t generate = 0;
};

// What a run of `photon bench` does: its options' values (the defaults are the options' fallbacks
// in the table below).
struct Plan {
  std::string study;
  std::vector<bench::ModelSource> sources;
  bench::WriteSettings write;
  std::vector<Row> rows;  // --mode filter; empty: every row a model has
  uint64_t seed = 0;
  std::vector<Regime> regimes;
  int batch = 0;
  std::optional<uint64_t> memory_budget;  // bytes the batch may add above the loaded model
  int max_batch = 0;
  std::vector<int32_t> contexts;
  int32_t decode_tokens = 0;
  int32_t kv_context = 0;
  DeviceOptions device;
  int32_t threads = 0;
  photon_dtype kv_type = PHOTON_DTYPE_F32;
  std::optional<std::string> json;
  std::optional<std::string> markdown;
  std::vector<std::string> tables_from;  // saved runs to render instead of running models
};

Regime parse_regime(const std::string& text) {
  if (text == "pf" || text == "PF") return {"PF", 2048, 128};
  if (text == "de" || text == "DE") return {"DE", 128, 2048};
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    throw UsageError("--regime: '" + text + "' is not pf, de or PROMPT:GENERATED");
  }
  Regime regime{text, parse_int32(text.substr(0, colon), "--regime prompt length"),
                parse_int32(text.substr(colon + 1), "--regime generated length")};
  if (regime.prompt < 1 || regime.generate < 1) {
    throw UsageError("--regime: '" + text + "' needs at least one prompt and one generated token");
  }
  return regime;
}

std::vector<int32_t> parse_contexts(const std::string& text, const std::string& what) {
  std::vector<int32_t> contexts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    contexts.push_back(parse_positive(text.substr(start, comma - start), what));
    start = comma + 1;
  }
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  return contexts;
}

constexpr const char* kModelDirName = "photon-bench-models";

std::string default_model_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/" + kModelDirName;
}

// JSON lines to a file (appended) or stdout, and the records kept for the tables.
class Sink {
 public:
  explicit Sink(const std::optional<std::string>& path) {
    if (!path) return;
    if (*path == "-") {
      file_ = stdout;
      return;
    }
    file_ = std::fopen(path->c_str(), "a");
    if (file_ == nullptr) throw RuntimeFailure("cannot open '" + *path + "' for the JSON lines");
    owned_ = true;
  }
  ~Sink() {
    if (owned_) std::fclose(file_);
  }
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  bool to_stdout() const { return file_ == stdout; }
  void emit(const Record& record) {
    records_.push_back(record);
    if (file_ == nullptr) return;
    std::fprintf(file_, "%s\n", record.dump().c_str());
    std::fflush(file_);
  }
  const std::vector<Record>& records() const { return records_; }

 private:
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  std::vector<Record> records_;
};

// A progress bar over a known amount of work (tokens prefilled and generated).
struct Progress {
  explicit Progress(const std::string& label, double total_work)
      : bar(label), total(total_work > 0 ? total_work : 1) {}
  void advance(double work) {
    done += work;
    ProgressBar::callback(&bar, static_cast<float>(done / total));
  }
  ProgressBar bar;
  double total;
  double done = 0;
};

int on_batch_token(void* user_data, size_t, int32_t, const char*, size_t, float) {
  static_cast<Progress*>(user_data)->advance(1);
  return 0;
}

uint64_t growth(uint64_t after, uint64_t before) {
  return after > before ? after - before : 0;
}

Record base_record(const char* study, const BenchModel& model, Row row) {
  Record record;
  record["study"] = study;
  record["model"] = model.name;
  record["arch"] = model.arch;
  record["levels"] = model.levels;
  record["parameters"] = model.parameters;
  record["mode"] = bench::row_name(row);
  record["device"] = photon_model_device(model.model.get());
  record["precision"] = photon_model_precision(model.model.get());
  record["kv_type"] = dtype_name(model.kv_type);
  record["cpu"] = bench::cpu_name();
  record["hardware_threads"] = bench::hardware_threads();
  record["load_average"] = bench::load_average();
  // The thread budget: --threads, else every core (null). OMP_NUM_THREADS no longer applies; it
  // is recorded for runs compared with older ones.
  record["threads"] = model.threads > 0 ? Record(model.threads) : Record();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  record["OMP_NUM_THREADS"] = omp != nullptr ? Record(omp) : Record();
  record["sdk_version"] = photon_version();
  return record;
}

void require_context(const BenchModel& model, int64_t tokens, const std::string& what) {
  const int64_t limit = photon_model_context_length(model.model.get());
  if (tokens > limit) {
    throw RuntimeFailure(what + " needs " + std::to_string(tokens) + " tokens, but model '" +
                         model.name + "' holds at most " + std::to_string(limit));
  }
}

// ---------------------------------------------------------------------------------------------
// Throughput: `batch` sessions, each prefilled with its own random prompt, then advanced together.

struct BatchResult {
  double prefill_s = 0, decode_s = 0, wall_s = 0;
  uint64_t generated = 0;
  // The whole batch: the process's resident memory, and the model's device memory
  // (photon_model_memory), each as it grew and at its peak.
  uint64_t resident_growth = 0, peak_growth = 0;
  uint64_t device_growth = 0, device_peak_growth = 0;
  bench::KvUse kv;  // summed over the sessions
};

// Memory per sample is the growth of resident memory on the CPU, where the sessions live in the
// process, and of the model's device memory on a GPU, where the process barely grows.
bool measures_device_memory(const BenchModel& model) {
  return std::string(photon_model_device(model.model.get())) != "cpu";
}
uint64_t memory_growth(const BenchModel& model, const BatchResult& run) {
  return measures_device_memory(model) ? run.device_growth : run.resident_growth;
}
uint64_t memory_peak_growth(const BenchModel& model, const BatchResult& run) {
  return measures_device_memory(model) ? run.device_peak_growth : run.peak_growth;
}

// Sessions hold `context` tokens (at least prompt + generate), allocated when they are created.
BatchResult run_batch(const BenchModel& model, Row row, int32_t prompt, int32_t generate,
                      int32_t context, int batch, uint64_t seed, Progress* progress) {
  BatchResult result;
  bench::release_free_heap();
  const uint64_t before = bench::resident_bytes();
  bench::reset_peak_resident();
  uint64_t device_before = 0, device_peak = 0;
  check(photon_model_memory(model.model.get(), &device_before, nullptr, 1),
        "memory of " + model.name);
  const Clock::time_point start = Clock::now();
  std::vector<SessionPtr> sessions;
  std::vector<photon_session*> handles;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<const int32_t*> tokens;
  std::vector<size_t> lengths;
  for (int b = 0; b < batch; ++b) {
    sessions.push_back(bench::open_session(model, row, context, seed + b));
    handles.push_back(sessions.back().get());
    prompts.push_back(bench::random_tokens(model.model.get(), prompt, seed * 1000003 + b, true));
    tokens.push_back(prompts.back().data());
    lengths.push_back(prompts.back().size());
  }
  // The prompts together, as a server prefills the requests that arrive at once.
  check(photon_session_prefill_batch(handles.data(), handles.size(), tokens.data(), lengths.data()),
        "prefill of " + model.name);
  if (progress != nullptr) progress->advance(static_cast<double>(batch) * prompt);
  result.prefill_s = bench::seconds_since(start);
  const Clock::time_point decode_start = Clock::now();
  std::vector<int32_t> counts(batch);
  check(photon_session_generate_batch(handles.data(), handles.size(), generate,
                                      progress != nullptr ? &on_batch_token : nullptr, progress,
                                      counts.data()),
        "generation of " + model.name);
  result.decode_s = bench::seconds_since(decode_start);
  result.wall_s = bench::seconds_since(start);
  result.resident_growth = growth(bench::resident_bytes(), before);
  result.peak_growth = growth(bench::peak_resident_bytes(), before);
  uint64_t device_now = 0;
  check(photon_model_memory(model.model.get(), &device_now, &device_peak, 0),
        "memory of " + model.name);
  result.device_growth = growth(device_now, device_before);
  result.device_peak_growth = growth(device_peak, device_before);
  for (int32_t count : counts) result.generated += static_cast<uint64_t>(count);
  for (photon_session* session : handles) {
    const bench::KvUse use = bench::kv_use(model, session);
    result.kv.encoder_total += use.encoder_total;
    result.kv.window_total += use.window_total;
  }
  return result;
}

// The largest batch whose peak memory fits the budget, by doubling then bisection over trial
// runs (prefill and one generated token: every cache is allocated up front for the full context,
// so the trial holds the memory the real run will hold).
int find_batch(const BenchModel& model, Row row, const Regime& regime, uint64_t budget,
               int max_batch, uint64_t seed, Record& trials) {
  auto fits = [&](int batch) {
    Progress progress("sizing " + model.name + " " + bench::row_name(row) + " " + regime.name +
                          " batch " + std::to_string(batch),
                      static_cast<double>(batch) * (regime.prompt + 1));
    BatchResult trial;
    try {
      trial = run_batch(model, row, regime.prompt, 1, regime.prompt + regime.generate, batch, seed,
                        &progress);
    } catch (const OutOfMemory& e) {
      // The budget is more than the device has free (other models, the driver's own share).
      trials.push_back({{"batch", batch}, {"fits", false}, {"error", e.what()}});
      return false;
    }
    const uint64_t peak = memory_peak_growth(model, trial);
    const bool ok = peak <= budget;
    trials.push_back({{"batch", batch}, {"peak_growth_bytes", peak}, {"fits", ok}});
    return ok;
  };
  if (!fits(1)) {
    if (trials.back().contains("error"))
      throw OutOfMemory(trials.back()["error"].get<std::string>());
    throw RuntimeFailure("one " + model.name + " " + bench::row_name(row) + " sample in " +
                         regime.name + " needs " +
                         human_bytes(trials.back()["peak_growth_bytes"].get<uint64_t>()) +
                         ", more than --memory-budget");
  }
  int fitting = 1, failing = 0;
  while (failing == 0 && fitting < max_batch) {
    const int next = std::min(fitting * 2, max_batch);
    if (fits(next))
      fitting = next;
    else
      failing = next;
  }
  while (failing - fitting > 1) {
    const int middle = fitting + (failing - fitting) / 2;
    if (fits(middle))
      fitting = middle;
    else
      failing = middle;
  }
  return fitting;
}

// Tokens generated by the warm-up of a throughput run on a GPU: past a top-level unit of the
// paper's models (16 tokens), so that every step's shape has run.
constexpr int32_t kWarmUpTokens = 32;

void study_throughput(const Plan& plan, const BenchModel& model, Row row, Sink& sink) {
  for (const Regime& regime : plan.regimes) {
    const int32_t context = regime.prompt + regime.generate;
    require_context(model, context, "regime " + regime.name);
    Record trials = Record::array();
    const int batch = plan.memory_budget ? find_batch(model, row, regime, *plan.memory_budget,
                                                      plan.max_batch, plan.seed, trials)
                                         : plan.batch;
    Record record = base_record("throughput", model, row);
    const std::string label = model.name + " " + bench::row_name(row) + " " + regime.name +
                              " batch " + std::to_string(batch);
    // On a GPU each new shape loads its kernels and plans its GEMMs on first use (milliseconds
    // each, once per process): a run of the same batch and prompts, generating less, meets them
    // before the timed one, as a server's first requests do before its steady state.
    const int32_t warm_up =
        measures_device_memory(model) ? std::min(regime.generate, kWarmUpTokens) : 0;
    if (measures_device_memory(model)) {
      Progress progress("warm-up of " + label,
                        static_cast<double>(batch) * (regime.prompt + warm_up));
      run_batch(model, row, regime.prompt, warm_up, context, batch, plan.seed, &progress);
    }
    BatchResult run;
    {
      Progress progress(label, static_cast<double>(batch) * context);
      run = run_batch(model, row, regime.prompt, regime.generate, context, batch, plan.seed,
                      &progress);
    }
    const double throughput = run.generated / run.wall_s;
    const double resident = static_cast<double>(run.resident_growth) / batch;
    const double memory = static_cast<double>(memory_growth(model, run)) / batch;
    const double kv_f32 = static_cast<double>(bench::analytic_kv_bytes(model, row, context, 4));
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    record["regime"] = regime.name;
    record["prompt_tokens"] = regime.prompt;
    record["generated_tokens"] = regime.generate;
    record["batch"] = batch;
    record["batch_rule"] = plan.memory_budget ? "memory_budget" : "fixed";
    record["warm_up_tokens"] = warm_up;
    record["memory_budget_bytes"] = plan.memory_budget ? Record(*plan.memory_budget) : Record();
    if (plan.memory_budget) record["batch_trials"] = trials;
    record["prefill_s"] = run.prefill_s;
    record["decode_s"] = run.decode_s;
    record["wall_s"] = run.wall_s;
    record["tokens_generated"] = run.generated;
    record["throughput_tok_s"] = throughput;
    record["kv_analytic_bytes_per_sample"] = kv_f32;
    record["kv_analytic_bf16_bytes_per_sample"] = bench::analytic_kv_bytes(model, row, context, 2);
    record["kv_engine_bytes_per_sample"] = static_cast<double>(run.kv.encoder_total) / batch;
    record["kv_engine_window_bytes_per_sample"] = static_cast<double>(run.kv.window_total) / batch;
    record["resident_growth_bytes_per_sample"] = resident;
    record["peak_growth_bytes_per_sample"] = static_cast<double>(run.peak_growth) / batch;
    record["device_growth_bytes_per_sample"] = static_cast<double>(run.device_growth) / batch;
    record["device_peak_growth_bytes_per_sample"] =
        static_cast<double>(run.device_peak_growth) / batch;
    record["memory_measured"] = measures_device_memory(model) ? "device" : "resident";
    record["memory_bytes_per_sample"] = memory;
    record["tpm_tok_s_per_gib"] = memory > 0 ? throughput / (memory / kGiB) : 0.0;
    record["tpm_resident_tok_s_per_gib"] = resident > 0 ? throughput / (resident / kGiB) : 0.0;
    record["tpm_kv_tok_s_per_gib"] = kv_f32 > 0 ? throughput / (kv_f32 / kGiB) : 0.0;
    sink.emit(record);
    std::fprintf(
        stderr, "photon bench: %s: %s tok/s, %s MiB/sample %s, %s MiB KV (%s), %s products\n",
        label.c_str(), bench::significant(throughput).c_str(), bench::mebibytes(memory).c_str(),
        measures_device_memory(model) ? "device memory" : "resident",
        bench::mebibytes(static_cast<double>(run.kv.encoder_total) / batch).c_str(),
        dtype_name(model.kv_type), photon_model_precision(model.model.get()));
  }
}

// ---------------------------------------------------------------------------------------------
// Scaling: decode time per token at growing context lengths, one session.

Record scaling_record(const BenchModel& model, Row row, const photon_session* session,
                      int32_t generate, int32_t generated, double seconds) {
  Record record = base_record("scaling", model, row);
  const int32_t position = photon_session_position(session);
  const bench::KvUse use = bench::kv_use(model, session);
  record["context_tokens"] = position;
  record["decode_tokens"] = generate;
  record["tokens_generated"] = generated;
  record["decode_s"] = seconds;
  record["decode_ms_per_token"] = generated > 0 ? 1000.0 * seconds / generated : 0.0;
  record["kv_engine_bytes"] = use.encoder_total;
  record["kv_engine_window_bytes"] = use.window_total;
  // The newest sampled token has not yet run through the model: its KV does not exist yet.
  record["kv_analytic_bytes"] = bench::analytic_kv_bytes(model, row, position - 1, 4);
  return record;
}

int32_t timed_generate(photon_session* session, int32_t tokens, double* seconds) {
  int32_t generated = 0;
  const Clock::time_point start = Clock::now();
  check(photon_session_generate(session, tokens, nullptr, nullptr, &generated), "generation");
  *seconds = bench::seconds_since(start);
  return generated;
}

void study_scaling(const Plan& plan, const BenchModel& model, Row row, Sink& sink) {
  const int32_t g = plan.decode_tokens;
  for (int32_t context : plan.contexts) {
    if (context <= g + 1) {
      throw UsageError("--contexts: " + std::to_string(context) +
                       " must exceed --decode-tokens by at least 2");
    }
    require_context(model, context, "context " + std::to_string(context));
  }
  double work = 0;
  for (int32_t context : plan.contexts) work += context;
  Progress progress(model.name + " " + bench::row_name(row) + " scaling", work);
  // RecGen takes no prompt after it has generated: a fresh session per context. The others grow
  // one session: prefill up to the next context, time the generated tokens, and go on.
  SessionPtr shared;
  if (row != Row::RecGen) {
    shared = bench::open_session(model, row, plan.contexts.back(), plan.seed);
  }
  for (int32_t context : plan.contexts) {
    SessionPtr fresh;
    if (row == Row::RecGen) fresh = bench::open_session(model, row, context, plan.seed);
    photon_session* session = row == Row::RecGen ? fresh.get() : shared.get();
    // One untimed token first: it runs the prompt's last position and any per-session setup, so
    // the timed tokens are steady decoding between context - g and context.
    const int32_t prompt_end = context - g - 1;
    int32_t position = photon_session_position(session);
    while (position < prompt_end) {
      // Chunks only show progress; RecGen's prompt must arrive in one prefill.
      const int32_t step =
          row == Row::RecGen ? prompt_end - position : std::min(prompt_end - position, 1024);
      const std::vector<int32_t> tokens =
          bench::random_tokens(model.model.get(), step, plan.seed * 7919 + position, position == 0);
      check(photon_session_prefill(session, tokens.data(), tokens.size()),
            "prefill of " + model.name);
      position += step;
      progress.advance(step);
    }
    check(photon_session_generate(session, 1, nullptr, nullptr, nullptr), "generation");
    double seconds = 0;
    const int32_t generated = timed_generate(session, g, &seconds);
    progress.advance(g);
    sink.emit(scaling_record(model, row, session, g, generated, seconds));
  }
  progress.bar.finish();
  std::fprintf(stderr, "photon bench: %s %s: decode time per token at %zu context lengths\n",
               model.name.c_str(), bench::row_name(row), plan.contexts.size());
}

// ---------------------------------------------------------------------------------------------
// KV: one session whose model has consumed `context` tokens, the last few of them generated.
// A generated token runs through the model only when the next one is produced, so the session
// holds one token more than its caches have seen.

void study_kv(const Plan& plan, const BenchModel& model, Row row, Sink& sink) {
  const int32_t context = plan.kv_context, g = plan.decode_tokens;
  if (context < g) throw UsageError("--context must be at least --decode-tokens");
  require_context(model, context + 1, "--context");
  Record record = base_record("kv", model, row);
  uint64_t resident = 0;
  {
    Progress progress(model.name + " " + bench::row_name(row) + " KV", context);
    bench::release_free_heap();
    const uint64_t before = bench::resident_bytes();
    SessionPtr session = bench::open_session(model, row, context + 1, plan.seed);
    const std::vector<int32_t> tokens =
        bench::random_tokens(model.model.get(), context + 1 - g, plan.seed, true);
    check(photon_session_prefill(session.get(), tokens.data(), tokens.size()),
          "prefill of " + model.name);
    progress.advance(context + 1 - g);
    check(photon_session_generate(session.get(), g, nullptr, nullptr, nullptr),
          "generation of " + model.name);
    progress.advance(g);
    resident = growth(bench::resident_bytes(), before);
    const int32_t consumed = photon_session_position(session.get()) - 1;
    const bench::KvUse use = bench::kv_use(model, session.get());
    Record levels = Record::array();
    const auto caches = bench::growing_caches(model, row);
    for (size_t l = 0; l < use.encoder.size(); ++l) {
      uint64_t analytic = 0;
      for (const bench::GrowingCache& cache : caches) {
        if (cache.level == static_cast<int>(l + 1)) analytic = cache.bytes(consumed, 4);
      }
      levels.push_back({{"level", l + 1},
                        {"engine_encoder_bytes", use.encoder[l]},
                        {"engine_window_bytes", use.window[l]},
                        {"analytic_encoder_bytes", analytic}});
    }
    record["context_tokens"] = consumed;
    record["session_tokens"] = consumed + 1;
    record["decode_tokens"] = g;
    record["levels"] = levels;
    record["kv_engine_bytes"] = use.encoder_total;
    record["kv_engine_window_bytes"] = use.window_total;
    record["kv_analytic_bytes"] = bench::analytic_kv_bytes(model, row, consumed, 4);
    record["kv_analytic_bf16_bytes"] = bench::analytic_kv_bytes(model, row, consumed, 2);
  }
  record["resident_growth_bytes"] = resident;
  sink.emit(record);
  std::fprintf(stderr, "photon bench: %s %s: %s MiB KV at %d tokens (formula %s MiB)\n",
               model.name.c_str(), bench::row_name(row),
               bench::mebibytes(record["kv_engine_bytes"].get<double>()).c_str(),
               record["context_tokens"].get<int>(),
               bench::mebibytes(record["kv_analytic_bytes"].get<double>()).c_str());
}

// ---------------------------------------------------------------------------------------------
// The options, each spelled once, in one table (args.h, OptionDef): Args parses by it, --help
// lists it, and each option's `apply` checks a value and puts it into the plan.

// The --help sections, in order.
enum Section { kModels, kRuns, kThroughput, kScaling, kKv, kOutput };
constexpr const char* kSectionHeaders[] = {
    "models (presets first, then configs, then files):",
    "runs:",
    "throughput study:",
    "scaling study:",
    "kv study:",
    "output:",
};

using BenchOption = OptionDef<Plan>;

// --decode-tokens when it is not given: tokens timed per context, and tokens the kv study
// generates.
constexpr int32_t kTimedTokens = 32;
constexpr int32_t kKvGeneratedTokens = 4;

// What each option does with its value (the table below says which is which).
void add_file(Plan& plan, const std::string& value, const std::string&) {
  plan.sources.push_back({bench::ModelSource::Kind::File, value});
}
void add_preset(Plan& plan, const std::string& value, const std::string&) {
  plan.sources.push_back({bench::ModelSource::Kind::Preset, value});
}
void add_config(Plan& plan, const std::string& value, const std::string&) {
  plan.sources.push_back({bench::ModelSource::Kind::Config, value});
}
void set_model_dir(Plan& plan, const std::string& value, const std::string&) {
  plan.write.dir = value;
}
void set_dtype(Plan& plan, const std::string& value, const std::string& label) {
  plan.write.dtype = parse_weight_dtype(value, label);
}
void set_seed(Plan& plan, const std::string& value, const std::string& label) {
  plan.seed = parse_uint64(value, label);
  plan.write.seed = plan.seed;
}
void set_study(Plan& plan, const std::string& value, const std::string& label) {
  if (value != "throughput" && value != "scaling" && value != "kv")
    throw UsageError(label + ": '" + value + "' is not one of throughput, scaling, kv");
  plan.study = value;
}
void add_mode(Plan& plan, const std::string& value, const std::string&) {
  plan.rows.push_back(bench::parse_row(value));
}
void set_kv_type(Plan& plan, const std::string& value, const std::string& label) {
  plan.kv_type = parse_kv_type(value, label);
}
void add_regime(Plan& plan, const std::string& value, const std::string&) {
  plan.regimes.push_back(parse_regime(value));
}
void set_batch(Plan& plan, const std::string& value, const std::string& label) {
  plan.batch = parse_positive(value, label);
}
void set_memory_budget(Plan& plan, const std::string& value, const std::string& label) {
  // Checked as a float, converted as a double: 0.05 GiB is 53687091 bytes, not float's 92.
  parse_float(value, label);
  const double gib = std::strtod(value.c_str(), nullptr);
  if (!(gib > 0)) throw UsageError(label + ": '" + value + "' must be positive (GiB)");
  plan.memory_budget = static_cast<uint64_t>(gib * 1024 * 1024 * 1024);
}
void set_max_batch(Plan& plan, const std::string& value, const std::string& label) {
  plan.max_batch = parse_positive(value, label);
}
void set_contexts(Plan& plan, const std::string& value, const std::string& label) {
  plan.contexts = parse_contexts(value, label);
}
void set_decode_tokens(Plan& plan, const std::string& value, const std::string& label) {
  plan.decode_tokens = parse_positive(value, label);
}
void set_kv_context(Plan& plan, const std::string& value, const std::string& label) {
  plan.kv_context = parse_positive(value, label);
}
void set_json(Plan& plan, const std::string& value, const std::string&) {
  plan.json = value;
}
void set_markdown(Plan& plan, const std::string& value, const std::string&) {
  plan.markdown = value;
}
void add_tables_from(Plan& plan, const std::string& value, const std::string&) {
  plan.tables_from.push_back(value);
}

const std::vector<BenchOption>& bench_options() {
  static const std::string decode_tokens_help =
      "tokens timed at each length (default " + std::to_string(kTimedTokens) +
      "); in the kv study,\ntokens generated (default " + std::to_string(kKvGeneratedTokens) + ")";
  static const std::string model_dir_help =
      std::string("where written models are kept (default $TMPDIR/") + kModelDirName + ")";
  // clang-format off
  static const std::vector<BenchOption> options = {
    {"model", 'm', "M.photon", kModels, "a model file", true, {}, add_file},
    {"preset", 0, "NAME", kModels, "a built-in preset, one of 'photon init --list-presets'", true,
     {}, add_preset},
    {"config", 0, "C.json", kModels, "a configuration file; its runs take the file's name", true,
     {}, add_config},
    {"model-dir", 0, "DIR", kModels, model_dir_help, false, {}, set_model_dir},
    {"dtype", 0, "f32|f16|bf16|q8", kModels, "storage type of written models", false, {"f32"},
     set_dtype},
    {"seed", 0, "S", kModels, "seed of the weights, prompts and samplers", false, {"0"},
     set_seed},
    {"study", 0, "S", kRuns, "throughput, scaling or kv (above)", false, {"throughput"},
     set_study},
    {"mode", 0, "MODE", kRuns, "only vanilla, block, hiergen or recgen runs", true, {},
     add_mode},
    {"kv-type", 0, "T", kRuns, "storage of the sessions' KV caches: f32, f16 or bf16", false,
     {"f32"}, set_kv_type},
    {"device", 0, "DEV", kRuns,
     "cpu (default), cuda, cuda:N or auto; on a GPU, memory per sample\n"
     "and --memory-budget count the model's device memory", false, {}, nullptr},
    {"precision", 0, "P", kRuns,
     "exact, bf16 or int8 (q8 models on the CPU): how products round\n"
     "(default: the device's, exact on the CPU, bf16 on a GPU)", false, {}, nullptr},
    {"threads", 0, "N", kRuns, "compute with at most N threads (default: every core)", false,
     {}, nullptr},
    {"regime", 0, "R", kThroughput,
     "pf (2048 prompt / 128 generated), de (128 / 2048) or\nPROMPT:GENERATED", true,
     {"pf", "de"}, add_regime},
    {"batch", 0, "N", kThroughput, "sessions per run", false, {"1"}, set_batch},
    {"memory-budget", 0, "GIB", kThroughput,
     "instead: the largest batch whose peak memory above the loaded model\n"
     "fits GIB, found by doubling and bisection over trial runs", false, {}, set_memory_budget},
    {"max-batch", 0, "N", kThroughput, "upper bound of that search", false, {"256"},
     set_max_batch},
    {"contexts", 0, "N,N,...", kScaling, "context lengths", false,
     {"256,512,1024,2048,4096,8192,16384"}, set_contexts},
    {"decode-tokens", 0, "N", kScaling, decode_tokens_help, false, {}, set_decode_tokens},
    {"context", 0, "T", kKv, "tokens consumed at the end, as in the DE regime", false,
     {"2176"}, set_kv_context},
    {"json", 0, "FILE", kOutput,
     "append one JSON line per run to FILE ('-': stdout, no table there)", false, {}, set_json},
    {"markdown", 0, "FILE", kOutput, "also write the table(s) to FILE", false, {},
     set_markdown},
    {"tables-from", 0, "FILE", kOutput, "print the tables of runs saved by --json (no models)",
     true, {}, add_tables_from},
  };
  // clang-format on
  return options;
}

// Presets first, then configs, then files, each in the order given.
int source_rank(const bench::ModelSource& source) {
  switch (source.kind) {
    case bench::ModelSource::Kind::Preset: return 0;
    case bench::ModelSource::Kind::Config: return 1;
    case bench::ModelSource::Kind::File: return 2;
  }
  return 3;
}

Plan parse_plan(const std::vector<std::string>& argv) {
  Args args(option_specs(bench_options()), 0);
  args.parse(argv);
  Plan plan;
  apply_options(bench_options(), args, plan);
  plan.device = device_options(args);
  plan.threads = parse_threads(args);
  if (args.has("batch") && args.has("memory-budget"))
    throw UsageError("give at most one of --batch and --memory-budget");
  if (!plan.tables_from.empty() && !plan.sources.empty())
    throw UsageError("--tables-from renders saved runs: give no models with it");
  if (plan.sources.empty() && plan.tables_from.empty())
    throw UsageError("no model: give -m MODEL, --preset NAME or --config C.json");
  std::stable_sort(plan.sources.begin(), plan.sources.end(),
                   [](const bench::ModelSource& a, const bench::ModelSource& b) {
                     return source_rank(a) < source_rank(b);
                   });
  if (plan.write.dir.empty()) plan.write.dir = default_model_dir();
  if (plan.decode_tokens == 0)
    plan.decode_tokens = plan.study == "kv" ? kKvGeneratedTokens : kTimedTokens;
  return plan;
}

std::string bench_help() {
  std::string text =
      "usage: photon bench (-m M.photon | --preset NAME | --config C.json)... [options]\n"
      "       photon bench --tables-from RUNS.jsonl... [--markdown FILE]\n"
      "\n"
      "Runs the PHOTON paper's benchmark protocol on this machine with random token ids and EOS\n"
      "ignored. A model runs in each mode it has: vanilla; block (PHOTON with one level); PHOTON\n"
      "hiergen and recgen. Presets and configs are written with random weights into --model-dir\n"
      "first (reused later). Prints markdown tables; --json appends one JSON line per run.\n"
      "\n"
      "studies (--study):\n"
      "  throughput  per regime: prefill `batch` sessions, generate with all of them together;\n"
      "              throughput = generated tokens / wall time including prefill; memory per\n"
      "              sample by the KV formula, by the engine's accounting, and as the growth of\n"
      "              memory per sample (resident memory on the CPU, the model's device memory on\n"
      "              a GPU); TPM = throughput / memory per sample; on a GPU after a warm-up\n"
      "              run of the same batch and prompts generating 32 tokens\n"
      "  scaling     decode time per token and KV bytes at each --contexts length, one session\n"
      "  kv          KV bytes per level once the model has consumed --context tokens, the last\n"
      "              --decode-tokens of them generated, against the configuration's formula\n";
  for (int section = 0; section < static_cast<int>(std::size(kSectionHeaders)); ++section) {
    text += std::string("\n") + kSectionHeaders[section] + "\n";
    for (const BenchOption& option : bench_options())
      if (option.section == section) text += option_help(option);
  }
  return text + "\nOn stderr: a progress bar when it is a terminal, and a line per finished run.\n";
}

void write_tables(const std::string& tables, const std::optional<std::string>& path,
                  bool to_stdout) {
  if (path) {
    std::FILE* file = std::fopen(path->c_str(), "w");
    if (file == nullptr) throw RuntimeFailure("cannot write '" + *path + "'");
    std::fputs(tables.c_str(), file);
    if (std::fclose(file) != 0) throw RuntimeFailure("cannot write '" + *path + "'");
  }
  if (to_stdout) std::fputs(tables.c_str(), stdout);
}

int run_bench(const std::vector<std::string>& argv) {
  const Plan plan = parse_plan(argv);
  if (!plan.tables_from.empty()) {
    std::vector<Record> records;
    for (const std::string& path : plan.tables_from) {
      for (Record& record : bench::read_records(path)) records.push_back(std::move(record));
    }
    write_tables(bench::tables(records), plan.markdown, true);
    return 0;
  }
  Sink sink(plan.json);

  std::vector<BenchModel> models;
  for (const bench::ModelSource& source : plan.sources) {
    models.push_back(bench::open_model(source, plan.write, plan.device, plan.threads));
    models.back().kv_type = plan.kv_type;
  }
  size_t runs = 0;
  for (const BenchModel& model : models) {
    for (Row row : model.rows) {
      if (!plan.rows.empty() &&
          std::find(plan.rows.begin(), plan.rows.end(), row) == plan.rows.end()) {
        continue;
      }
      // Thread pools and lazily sized buffers come into being on the first calls: not a sample's
      // memory nor its time.
      run_batch(model, row, 16, 4, 20, 1, plan.seed + 99, nullptr);
      if (plan.study == "throughput")
        study_throughput(plan, model, row, sink);
      else if (plan.study == "scaling")
        study_scaling(plan, model, row, sink);
      else
        study_kv(plan, model, row, sink);
      ++runs;
    }
  }
  if (runs == 0) throw UsageError("no model runs in the --mode given");

  write_tables(bench::tables(sink.records()), plan.markdown, !sink.to_stdout());
  return 0;
}

// Built from the options' table before main runs (kBenchCommand points into it).
const std::string kBenchHelp = bench_help();

}  // namespace

const Command kBenchCommand = {
    "bench", "measure throughput, memory per sample and decode scaling (the paper's protocol)",
    kBenchHelp.c_str(), run_bench};

}  // namespace photon::cli
