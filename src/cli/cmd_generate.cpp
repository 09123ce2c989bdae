// photon generate: streams a completion of a prompt through the session callback.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "commands.h"
#include "common.h"
#include "last_top_logprobs.h"

namespace photon::cli {
namespace {

// The session Ctrl-C cancels. photon_session_cancel only stores an atomic flag, so calling it
// from the signal handler is async-signal-safe. g_interrupted also records a Ctrl-C that arrives
// between library calls, which the next call would otherwise clear on entry.
std::atomic<photon_session*> g_interruptible{nullptr};
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<photon_session*>::is_always_lock_free);
static_assert(std::atomic<bool>::is_always_lock_free);

void on_interrupt(int) {
  g_interrupted.store(true);
  photon_session_cancel(g_interruptible.load());
}

// While alive, Ctrl-C cancels `session` instead of killing the process; a second Ctrl-C kills
// (SA_RESETHAND restores the default action after the first).
class InterruptGuard {
 public:
  explicit InterruptGuard(photon_session* session) {
    g_interruptible.store(session);
    struct sigaction action = {};
    action.sa_handler = &on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &previous_, nullptr);
    g_interruptible.store(nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction previous_ = {};
};

const char* stop_reason_name(photon_stop_reason reason) {
  switch (reason) {
    case PHOTON_STOP_NONE: return "none";
    case PHOTON_STOP_LENGTH: return "length";
    case PHOTON_STOP_EOS: return "eos";
    case PHOTON_STOP_STRING: return "stop_string";
    case PHOTON_STOP_CALLBACK: return "callback";
    case PHOTON_STOP_CANCELLED: return "cancelled";
    case PHOTON_STOP_CONTEXT_FULL: return "context_full";
    case PHOTON_STOP_ERROR: return "error";
  }
  return "unknown";
}

// Applies the session flags to `o`: all of them for a new session, the sampling ones over a resumed
// session's saved settings.
void apply_flags(const Args& args, photon_session_options* o) {
  if (auto text = args.value("mode")) {
    check_setting(photon_session_options_set_mode(o, parse_mode(*text)), "--mode");
  }
  if (auto text = args.value("ctx")) {
    const int32_t context = parse_int32(*text, "--ctx");
    if (context < 1) throw UsageError("--ctx: must be at least 1, got " + *text);
    check_setting(photon_session_options_set_context_length(o, context), "--ctx");
  }
  if (auto text = args.value("kv-type")) {
    check_setting(photon_session_options_set_kv_type(o, parse_kv_type(*text, "--kv-type")),
                  "--kv-type");
  }
  if (auto text = args.value("seed")) {
    check_setting(photon_session_options_set_seed(o, parse_uint64(*text, "--seed")), "--seed");
  }
  if (auto text = args.value("temperature")) {
    check_setting(photon_session_options_set_temperature(o, parse_float(*text, "--temperature")),
                  "--temperature");
  }
  if (auto text = args.value("top-k")) {
    check_setting(photon_session_options_set_top_k(o, parse_int32(*text, "--top-k")), "--top-k");
  }
  if (auto text = args.value("top-p")) {
    check_setting(photon_session_options_set_top_p(o, parse_float(*text, "--top-p")), "--top-p");
  }
  if (auto text = args.value("min-p")) {
    check_setting(photon_session_options_set_min_p(o, parse_float(*text, "--min-p")), "--min-p");
  }
  if (args.has("repeat-penalty") || args.has("repeat-last-n")) {
    const auto penalty = args.value("repeat-penalty");
    const auto last_n = args.value("repeat-last-n");
    check_setting(photon_session_options_set_repetition_penalty(
                      o, penalty ? parse_float(*penalty, "--repeat-penalty") : 1.0f,
                      last_n ? parse_int32(*last_n, "--repeat-last-n") : 64),
                  penalty ? "--repeat-penalty" : "--repeat-last-n");
  }
  if (auto text = args.value("presence-penalty")) {
    check_setting(
        photon_session_options_set_presence_penalty(o, parse_float(*text, "--presence-penalty")),
        "--presence-penalty");
  }
  if (auto text = args.value("frequency-penalty")) {
    check_setting(
        photon_session_options_set_frequency_penalty(o, parse_float(*text, "--frequency-penalty")),
        "--frequency-penalty");
  }
  if (auto text = args.value("top-logprobs")) {
    check_setting(photon_session_options_set_top_logprobs(o, parse_int32(*text, "--top-logprobs")),
                  "--top-logprobs");
  }
  if (args.has("logit-bias")) {
    std::vector<int32_t> tokens;
    std::vector<float> biases;
    for (const std::string& entry : args.values("logit-bias")) {
      const size_t equals = entry.find('=');
      if (equals == std::string::npos)
        throw UsageError("--logit-bias: expected ID=BIAS, got '" + entry + "'");
      tokens.push_back(parse_int32(entry.substr(0, equals), "--logit-bias"));
      biases.push_back(parse_float(entry.substr(equals + 1), "--logit-bias"));
    }
    check_setting(
        photon_session_options_set_logit_bias(o, tokens.data(), biases.data(), tokens.size()),
        "--logit-bias");
  }
  if (args.has("ignore-eos")) {
    check_setting(photon_session_options_set_ignore_eos(o, 1), "--ignore-eos");
  }
  if (args.has("context-shift")) {
    check_setting(photon_session_options_set_context_shift(o, 1), "--context-shift");
  }
  for (const std::string& stop : args.values("stop")) {
    check_setting(photon_session_options_add_stop_string(o, stop.c_str()), "--stop");
  }
}

// Session settings from the flags, checked before the model is loaded so that mistakes fail fast.
SessionOptionsPtr session_options(const Args& args) {
  photon_session_options* raw = nullptr;
  check(photon_session_options_create(&raw), "cannot create session options");
  SessionOptionsPtr options(raw);
  apply_flags(args, options.get());
  return options;
}

struct Stream {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;  // each token's alternatives
  std::string text;                                         // the generated text, as streamed
  bool write_failed = false;
};

int on_token(void* user_data, int32_t token, const char* piece, size_t piece_len, float logprob) {
  Stream& stream = *static_cast<Stream*>(user_data);
  try {
    stream.tokens.push_back(token);
    stream.logprobs.push_back(logprob);
    stream.top.push_back(last_top_logprobs());
    stream.text.append(piece, piece_len);
  } catch (...) {
    return 1;  // out of memory: stop rather than let an exception cross the C API
  }
  if (piece_len > 0 &&
      (std::fwrite(piece, 1, piece_len, stdout) != piece_len || std::fflush(stdout) != 0)) {
    stream.write_failed = true;
    return 1;
  }
  return 0;
}

// `chosen`: how the mode was chosen, when the user did not name it.
void print_summary(const photon_model* model, const photon_session* session, const char* chosen,
                   photon_stop_reason reason, const Stream& stream, size_t prompt_tokens,
                   double prefill_seconds, double generate_seconds) {
  const double rate =
      generate_seconds > 0 ? static_cast<double>(stream.tokens.size()) / generate_seconds : 0.0;
  std::fprintf(stderr,
               "photon generate: %s%s on %s, prompt %zu tokens in %.3f s, generated %zu tokens in "
               "%.3f s (%.1f tok/s), stop: %s\n",
               mode_name(photon_session_mode(session)), chosen, photon_model_device(model),
               prompt_tokens, prefill_seconds, stream.tokens.size(), generate_seconds, rate,
               stop_reason_name(reason));
}

constexpr int kInterruptedExitCode = 130;  // the shell's 128 + SIGINT convention

int run_generate(const std::vector<std::string>& argv) {
  Args args({{"model", 'm'},
             {"prompt", 'p'},
             {"tokens"},
             {"mode"},
             {"n-predict", 'n'},
             {"temperature"},
             {"top-k"},
             {"top-p"},
             {"min-p"},
             {"repeat-penalty"},
             {"repeat-last-n"},
             {"presence-penalty"},
             {"frequency-penalty"},
             {"logit-bias"},
             {"top-logprobs"},
             {"seed"},
             {"stop"},
             {"ctx"},
             {"save-session"},
             {"resume"},
             {"threads"},
             {"ignore-eos", 0, false},
             {"device"},
             {"kv-type"},
             {"precision"},
             {"json", 0, false},
             {"context-shift", 0, false}},
            0);
  args.parse(argv);
  const bool resume = args.has("resume");
  if (args.has("prompt") && args.has("tokens"))
    throw UsageError("give only one of -p TEXT and --tokens IDS");
  if (!resume && !args.has("prompt") && !args.has("tokens")) {
    throw UsageError("give -p TEXT, --tokens IDS or --resume FILE");
  }
  if (resume && (args.has("mode") || args.has("ctx") || args.has("kv-type"))) {
    throw UsageError("--mode, --ctx and --kv-type come from the saved session with --resume");
  }
  std::vector<int32_t> prompt;
  if (args.has("tokens")) prompt = parse_token_list(*args.value("tokens"), "--tokens");
  int32_t max_tokens = 64;
  if (auto text = args.value("n-predict")) {
    max_tokens = parse_int32(*text, "-n");
    if (max_tokens < 0) throw UsageError("-n: must be at least 0, got " + *text);
  }
  const bool json = args.has("json");
  const SessionOptionsPtr options = session_options(args);
  const std::string path = model_path(args);
  const int32_t threads = parse_threads(args);

  // -p - reads the prompt from stdin (before the model loads, so that a closed stdin fails fast).
  std::string prompt_text;
  if (auto text = args.value("prompt"))
    prompt_text = *text == "-" ? read_file("-", "prompt") : *text;

  const ModelPtr model = load_model(path, device_options(args), threads);
  if (args.has("prompt")) prompt = tokenize(model.get(), prompt_text, !resume);
  if (!resume && prompt.empty()) throw RuntimeFailure("the prompt gives no tokens");
  const int32_t model_context = photon_model_context_length(model.get());
  int32_t context = model_context;
  if (auto text = args.value("ctx")) {
    context = parse_int32(*text, "--ctx");
    if (context > model_context) {
      throw UsageError("--ctx: " + *text + " exceeds the model's context length " +
                       std::to_string(model_context));
    }
  }
  if (prompt.size() > static_cast<size_t>(context)) {
    throw RuntimeFailure("the prompt has " + std::to_string(prompt.size()) +
                         " tokens but the context holds " + std::to_string(context));
  }

  photon_session* raw_session = nullptr;
  if (resume) {
    const std::string state = *args.value("resume");
    check(photon_session_restore_file(model.get(), state.c_str(), &raw_session),
          "cannot resume " + state);
  } else {
    check(photon_session_create(model.get(), options.get(), &raw_session),
          "cannot create a session");
  }
  SessionPtr session(raw_session);
  if (resume) {  // the saved settings, with the sampling flags given here on top
    photon_session_options* raw = nullptr;
    check(photon_session_get_options(session.get(), &raw), "cannot read the session's settings");
    SessionOptionsPtr saved(raw);
    apply_flags(args, saved.get());
    check(photon_session_set_sampler(session.get(), saved.get()),
          "cannot apply the sampling flags");
  }
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout shows up as a failed write, not a signal

  Stream stream;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  Clock::time_point prefilled;
  {
    InterruptGuard interrupt(session.get());
    if (args.has("prompt")) {
      std::fwrite(prompt_text.data(), 1, prompt_text.size(), stdout);
      std::fflush(stdout);
    }
    start = Clock::now();
    const photon_status status =
        prompt.empty() ? PHOTON_OK
                       : photon_session_prefill(session.get(), prompt.data(), prompt.size());
    if (status == PHOTON_ERR_CANCELLED || g_interrupted.load()) {
      std::fprintf(stderr, "\nphoton generate: cancelled while reading the prompt\n");
      return kInterruptedExitCode;
    }
    check(status, "cannot process the prompt");
    prefilled = Clock::now();
    check(photon_session_generate(session.get(), max_tokens, &on_token, &stream, nullptr),
          "generation failed");
  }
  const Clock::time_point done = Clock::now();
  if (stream.write_failed) throw RuntimeFailure("cannot write to standard output");
  if (auto state = args.value("save-session")) {
    check(photon_session_save_file(session.get(), state->c_str()),
          "cannot save the session to " + *state);
  }

  std::fputs("\n", stdout);
  // The text ends before the summary starts when stdout and stderr go to one file.
  std::fflush(stdout);
  const photon_stop_reason reason = photon_session_stop_reason(session.get());
  if (json) {
    nlohmann::ordered_json out;
    out["text"] = stream.text;
    out["tokens"] = stream.tokens;
    out["logprobs"] = stream.logprobs;
    if (args.has("top-logprobs")) out["top_logprobs"] = stream.top;
    out["stop_reason"] = stop_reason_name(reason);
    out["prompt_tokens"] = prompt.size();
    out["mode"] = mode_name(photon_session_mode(session.get()));
    out["device"] = photon_model_device(model.get());
    out["precision"] = photon_model_precision(model.get());
    out["kv_type"] = dtype_name(photon_session_kv_type(session.get()));
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    const std::chrono::duration<double> prefill_time = prefilled - start;
    const std::chrono::duration<double> generate_time = done - prefilled;
    const char* chosen = resume             ? " (the saved session's mode)"
                         : args.has("mode") ? ""
                                            : " (the model's default)";
    print_summary(model.get(), session.get(), chosen, reason, stream, prompt.size(),
                  prefill_time.count(), generate_time.count());
  }
  std::fflush(stdout);
  return reason == PHOTON_STOP_CANCELLED ? kInterruptedExitCode : 0;
}

}  // namespace

const Command kGenerateCommand = {
    "generate", "stream a completion of a prompt",
    "usage: photon generate -m M.photon (-p TEXT | --tokens 1,2,3) [options]\n"
    "       photon generate -m M.photon --resume FILE [-p TEXT | --tokens IDS] [options]\n"
    "\n"
    "Streams the completion to stdout as it is generated (after the prompt text, with -p; with\n"
    "--tokens only the generated text). Ctrl-C stops generation cleanly (exit code 130).\n"
    "\n"
    "options:\n"
    "  -m, --model M.photon the model (default: $PHOTON_MODEL)\n"
    "  -p, --prompt TEXT    prompt text, tokenized with BOS first ('-' reads it from stdin)\n"
    "  --tokens IDS         comma-separated prompt token ids, used exactly as given\n"
    "  --mode MODE          auto (default: the mode the model file recommends, else RecGen for\n"
    "                       PHOTON with >= 2 levels), hiergen, recgen\n"
    "  -n, --n-predict N    generate at most N tokens (default 64)\n"
    "  --temperature T      softmax temperature; 0 (default) is greedy\n"
    "  --top-k K            keep the K most likely tokens (0, the default, keeps all)\n"
    "  --top-p P            nucleus sampling, P in (0, 1] (default 1)\n"
    "  --min-p P            drop tokens below P times the top probability, P in [0, 1)\n"
    "  --repeat-penalty X   repetition penalty >= 1 (default 1, off)\n"
    "  --presence-penalty X subtract X from the logit of each token in the penalty window\n"
    "                       (default 0, off; negative favours repeats)\n"
    "  --frequency-penalty X\n"
    "                       subtract X times each token's count in the penalty window\n"
    "  --repeat-last-n N    the penalty window: tokens of history the penalties look at\n"
    "                       (default 64)\n"
    "  --logit-bias ID=B    add B to token ID's logit before sampling (repeatable; -100 bans)\n"
    "  --seed S             sampler seed (default 0): same seed, same output\n"
    "  --stop STR           stop once the generated text contains STR (repeatable)\n"
    "  --ctx N              session context length, at most the model's (default: the model's)\n"
    "  --kv-type T          storage of the KV caches: f32 (default, exact), bf16 or f16 (half\n"
    "                       the memory; keys and values rounded once when stored)\n"
    "  --ignore-eos         keep generating past the end-of-sequence token\n"
    "  --context-shift      keep generating past a full context: keep the last half of the\n"
    "                       tokens, prefill them again and go on (as a new session prompted\n"
    "                       with them would)\n"
    "  --device DEV         cpu (default), cuda, cuda:N (GPU N) or auto (a GPU when one is\n"
    "                       usable, else the CPU); on a GPU, bf16 weights and the whole --ctx\n"
    "                       in device memory\n"
    "  --precision P        exact, bf16 or int8: activations enter products in f32, rounded\n"
    "                       to bf16, or (q8 weights on the CPU) quantized to int8 per block\n"
    "                       (default: the device's, exact on the CPU, bf16 on a GPU)\n"
    "  --threads N          compute with at most N threads (default: every core)\n"
    "  --save-session FILE  save the session's state at the end (resume it with --resume)\n"
    "  --resume FILE        continue a saved session: its mode, context, kv type and sampler\n"
    "                       settings apply, sampling flags given here override them; -p /\n"
    "                       --tokens add more prompt first (no BOS)\n"
    "  --top-logprobs K     with --json: each token's K most likely alternatives as\n"
    "                       [id, logprob] pairs (top_logprobs), K up to 20\n"
    "  --json               after the text, one JSON line: text (the generated text), tokens,\n"
    "                       logprobs, stop_reason, prompt_tokens, mode, device, precision,\n"
    "                       kv_type\n",
    run_generate};

}  // namespace photon::cli
