// photon score: teacher-forced log-probabilities of a token sequence, its NLL and perplexity.
#include <cmath>
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
  Args args({{"model", 'm'}, {"tokens"}, {"file", 'f'}, {"threads"}, {"json", 0, false}}, 0);
  args.parse(argv);
  if (args.has("tokens") == args.has("file")) {
    throw UsageError("give exactly one of --tokens IDS and -f FILE");
  }
  std::vector<int32_t> tokens;
  if (args.has("tokens")) tokens = parse_token_list(*args.value("tokens"), "--tokens");
  const std::string path = model_path(args);
  const int32_t threads = parse_threads(args);
  // Read the text before loading the model so that a missing file fails fast.
  const std::string text = args.has("file") ? read_file(*args.value("file"), "text") : "";

  ModelPtr model = load_model(path, threads);
  if (args.has("file")) tokens = tokenize(model.get(), text, true);
  if (tokens.empty()) throw RuntimeFailure("nothing to score: the text gives no tokens");
  const int32_t context = photon_model_context_length(model.get());
  if (tokens.size() > static_cast<size_t>(context)) {
    throw RuntimeFailure("the input has " + std::to_string(tokens.size()) +
                         " tokens but the model's context holds " + std::to_string(context));
  }
  std::vector<float> logprobs(tokens.size());
  check(photon_model_score(model.get(), tokens.data(), tokens.size(), logprobs.data()),
        "cannot score");

  double nll = 0.0;
  for (size_t i = 1; i < logprobs.size(); ++i) nll -= logprobs[i];
  const size_t predicted = tokens.size() - 1;
  const double perplexity = predicted > 0 ? std::exp(nll / static_cast<double>(predicted)) : NAN;

  if (args.has("json")) {
    using json = nlohmann::ordered_json;
    json out;
    out["tokens"] = tokens;
    json values = json::array();
    for (size_t i = 0; i < logprobs.size(); ++i) {
      values.push_back(i == 0 ? json(nullptr) : json(logprobs[i]));
    }
    out["logprobs"] = values;
    out["nll"] = nll;
    out["perplexity"] = predicted > 0 ? json(perplexity) : json(nullptr);
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
    }
  }
  std::printf("\ntokens %zu (%zu predicted)  nll %.4f  ", tokens.size(), predicted, nll);
  if (predicted > 0) {
    std::printf("perplexity %.4f\n", perplexity);
  } else {
    std::printf("perplexity n/a\n");
  }
  return 0;
}

}  // namespace

const Command kScoreCommand = {
    "score", "log-probabilities, NLL and perplexity of a text or token ids",
    "usage: photon score -m M.photon (--tokens 1,2,3 | -f text.txt) [--json]\n"
    "\n"
    "Scores a sequence teacher-forced: the log-probability of every token given the ones before\n"
    "it (the first token is not predicted). NLL = -sum of the logprobs; perplexity =\n"
    "exp(NLL / (T - 1)) over T tokens.\n"
    "\n"
    "options:\n"
    "  -m, --model M.photon the model (default: $PHOTON_MODEL)\n"
    "  --tokens IDS         comma-separated token ids, used exactly as given\n"
    "  -f, --file FILE      UTF-8 text ('-' for stdin), tokenized with BOS first\n"
    "  --threads N          compute with at most N threads (default: every core)\n"
    "  --json               one JSON object: tokens, logprobs (null first), nll, perplexity\n",
    run_score};

}  // namespace photon::cli
