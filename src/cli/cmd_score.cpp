// photon score: log-probabilities of a token sequence (teacher-forced, or as a RecGen session
// conditions them), its NLL and perplexity.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"

namespace photon::cli {
namespace {

// How a token reads in the table: special tokens by role, others as their quoted text.
std::string piece_label(const photon_model* model, int32_t token) {
  if (token == photon_model_bos(model)) return "<bos>";
  if (token == photon_model_eos(model)) return "<eos>";
  return quoted(detokenize(model, {token}));
}

int run_score(const std::vector<std::string>& argv) {
  Args args({{"model", 'm'},
             {"tokens"},
             {"file", 'f'},
             {"mode"},
             {"prompt-tokens"},
             {"stride"},
             {"top-logprobs"},
             {"device"},
             {"precision"},
             {"threads"},
             {"json", 0, false}},
            0);
  args.parse(argv);
  if (args.has("tokens") == args.has("file")) {
    throw UsageError("give exactly one of --tokens IDS and -f FILE");
  }
  // Checked before the model is loaded so that mistakes fail fast.
  const photon_mode mode = parse_mode(args.value("mode").value_or("auto"));
  const int64_t prompt_tokens =
      args.has("prompt-tokens") ? parse_positive(*args.value("prompt-tokens"), "--prompt-tokens")
                                : 1;
  const int32_t stride = args.has("stride") ? parse_positive(*args.value("stride"), "--stride") : 0;
  const int32_t top_k =
      args.has("top-logprobs") ? parse_positive(*args.value("top-logprobs"), "--top-logprobs") : 0;
  if (top_k > 0 && mode == PHOTON_MODE_RECGEN)
    throw UsageError(
        "--top-logprobs: alternatives are given for teacher-forced scoring only, "
        "not with --mode recgen");
  std::vector<int32_t> tokens;
  if (args.has("tokens")) tokens = parse_token_list(*args.value("tokens"), "--tokens");
  const std::string path = model_path(args);
  const int32_t threads = parse_threads(args);
  // Read the text before loading the model so that a missing file fails fast.
  const std::string text = args.has("file") ? read_file(*args.value("file"), "text") : "";

  ModelPtr model = load_model(path, device_options(args), threads);
  if (args.has("file")) tokens = tokenize(model.get(), text, true);
  if (tokens.empty()) throw RuntimeFailure("nothing to score: the text gives no tokens");
  const int64_t context = photon_model_context_length(model.get());
  if (stride >= context && static_cast<int64_t>(tokens.size()) > context) {
    throw UsageError("--stride: " + std::to_string(stride) + " must be below the model's context " +
                     std::to_string(context) + " (the input of " + std::to_string(tokens.size()) +
                     " tokens needs sliding windows)");
  }
  std::vector<float> logprobs(tokens.size());
  photon_score_options* raw = nullptr;
  check(photon_score_options_create(&raw), "cannot score");
  const std::unique_ptr<photon_score_options, decltype(&photon_score_options_free)> options(
      raw, photon_score_options_free);
  check_setting(photon_score_options_set_mode(options.get(), mode), "--mode");
  check_setting(
      photon_score_options_set_prompt_tokens(options.get(), static_cast<size_t>(prompt_tokens)),
      "--prompt-tokens");
  check_setting(photon_score_options_set_stride(options.get(), stride), "--stride");
  // top[i * top_k + j]: position i's alternatives.
  std::vector<int32_t> top_ids(tokens.size() * static_cast<size_t>(top_k));
  std::vector<float> top_logprobs(top_ids.size());
  if (top_k > 0) {
    if (top_k > photon_model_vocab_size(model.get()))
      throw UsageError("--top-logprobs: " + std::to_string(top_k) +
                       " exceeds the model's vocabulary of " +
                       std::to_string(photon_model_vocab_size(model.get())));
    check(photon_model_score_top(model.get(), tokens.data(), tokens.size(), options.get(), top_k,
                                 logprobs.data(), top_ids.data(), top_logprobs.data()),
          "cannot score");
  } else {
    check(photon_model_score_with(model.get(), tokens.data(), tokens.size(), options.get(),
                                  logprobs.data()),
          "cannot score");
  }
  const auto alternatives = [&](size_t i) {
    std::vector<std::pair<int32_t, float>> out;
    for (size_t j = 0; j < static_cast<size_t>(top_k); ++j)
      out.emplace_back(top_ids[i * static_cast<size_t>(top_k) + j],
                       top_logprobs[i * static_cast<size_t>(top_k) + j]);
    return out;
  };

  double nll = 0.0;
  for (size_t i = 1; i < logprobs.size(); ++i) nll -= logprobs[i];
  const size_t predicted = tokens.size() - 1;
  const double perplexity = predicted > 0 ? std::exp(nll / static_cast<double>(predicted)) : NAN;
  // Windows as photon_score_options_set_stride lays them out.
  const int64_t window_stride = stride > 0 ? stride : std::max<int64_t>(context / 2, 1);
  const int64_t excess = static_cast<int64_t>(tokens.size()) - context;
  const int64_t windows = excess > 0 ? 1 + (excess + window_stride - 1) / window_stride : 1;

  if (args.has("json")) {
    using json = nlohmann::ordered_json;
    json out;
    out["tokens"] = tokens;
    json values = json::array();
    for (size_t i = 0; i < logprobs.size(); ++i) {
      values.push_back(i == 0 ? json(nullptr) : json(logprobs[i]));
    }
    out["logprobs"] = values;
    if (top_k > 0) {
      json tops = json::array({nullptr});
      for (size_t i = 1; i < tokens.size(); ++i) {
        json row = json::array();
        for (const auto& [id, logprob] : alternatives(i)) row.push_back({id, logprob});
        tops.push_back(std::move(row));
      }
      out["top_logprobs"] = std::move(tops);
    }
    out["predicted"] = predicted;
    out["nll"] = nll;
    out["perplexity"] = predicted > 0 ? json(perplexity) : json(nullptr);
    out["context"] = context;
    out["windows"] = windows;
    out["stride"] = windows > 1 ? json(window_stride) : json(nullptr);
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }

  std::printf("%6s %8s  %-24s %12s\n", "pos", "token", "piece", "logprob");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string piece = piece_label(model.get(), tokens[i]);
    if (i == 0) {
      std::printf("%6zu %8d  %-24s %12s\n", i, tokens[i], piece.c_str(), "-");
    } else {
      std::printf("%6zu %8d  %-24s %12.4f\n", i, tokens[i], piece.c_str(), logprobs[i]);
      for (const auto& [id, logprob] : alternatives(i))
        std::printf("%6s %8d  %-24s %12.4f\n", "", id, piece_label(model.get(), id).c_str(),
                    logprob);
    }
  }
  std::printf("\ntokens %zu (%zu predicted)  nll %.4f  ", tokens.size(), predicted, nll);
  if (predicted > 0) {
    std::printf("perplexity %.4f", perplexity);
  } else {
    std::printf("perplexity n/a");
  }
  if (windows > 1) {
    std::printf("  windows %lld of %lld tokens, stride %lld", static_cast<long long>(windows),
                static_cast<long long>(context), static_cast<long long>(window_stride));
  }
  std::printf("\n");
  return 0;
}

}  // namespace

const Command kScoreCommand = {
    "score", "log-probabilities, NLL and perplexity of a text or token ids",
    "usage: photon score -m M.photon (--tokens 1,2,3 | -f text.txt) [--mode MODE]\n"
    "                    [--prompt-tokens K] [--stride S] [--top-logprobs K] [--device DEV]\n"
    "                    [--precision P] [--threads N] [--json]\n"
    "\n"
    "Scores a sequence: the log-probability of every token given the ones before it (the first\n"
    "token is not predicted). NLL = -sum of the logprobs; perplexity = exp(NLL / (T - 1)) over T\n"
    "tokens. A sequence longer than the model's context is scored in sliding windows of the\n"
    "context's length that start --stride tokens apart; each window scores the tokens after the\n"
    "previous window's end, conditioned on the tokens before them in the window (at least\n"
    "context - stride of them), so every token after the first is scored once.\n"
    "\n"
    "options:\n"
    "  -m, --model M.photon the model (default: $PHOTON_MODEL)\n"
    "  --tokens IDS         comma-separated token ids, used exactly as given\n"
    "  -f, --file FILE      UTF-8 text ('-' for stdin), tokenized with BOS first\n"
    "  --mode MODE          hiergen or auto (default): teacher-forced; recgen: as a RecGen\n"
    "                       session that took the first K tokens as its prompt and then every\n"
    "                       later token as one it sampled (PHOTON with L >= 2)\n"
    "  --prompt-tokens K    the prompt's length for --mode recgen (default 1); the logprobs of\n"
    "                       tokens 2..K+1 are teacher forcing's in every mode\n"
    "  --stride S           tokens between the starts of sliding windows, below the context\n"
    "                       (default: half the model's context)\n"
    "  --top-logprobs K     also the K most likely tokens of each position, the most likely\n"
    "                       first, listed under its token (teacher-forced modes)\n"
    "  --device DEV         cpu (default), cuda, cuda:N or auto (a GPU when one is usable)\n"
    "  --precision P        exact, bf16 or int8: activations enter products in f32, rounded\n"
    "                       to bf16, or (q8 weights on the CPU) quantized to int8 per block\n"
    "                       (default: the device's, exact on the CPU, bf16 on a GPU)\n"
    "  --threads N          compute with at most N threads (default: every core)\n"
    "  --json               one JSON object: tokens, logprobs (null first), with\n"
    "                       --top-logprobs top_logprobs (null first, then [id, logprob] pairs),\n"
    "                       predicted, nll, perplexity, context, windows, stride (null for one\n"
    "                       window)\n",
    run_score};

}  // namespace photon::cli
