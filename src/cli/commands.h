// The photon tool's commands. Each command parses its own arguments (throwing UsageError or
// HelpRequested) and returns the process exit code; failures throw RuntimeFailure.
#pragma once

#include <string>
#include <vector>

namespace photon::cli {

struct Command {
  const char* name;
  const char* summary;  // one line for `photon help`
  const char* help;     // the full text for `photon help NAME` and `photon NAME --help`
  int (*run)(const std::vector<std::string>& args);
};

extern const Command kConvertCommand;
extern const Command kInitCommand;
extern const Command kInspectCommand;
extern const Command kScoreCommand;
extern const Command kGenerateCommand;
extern const Command kBenchCommand;
extern const Command kServeCommand;

}  // namespace photon::cli
