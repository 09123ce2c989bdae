// photon: the command line tool of the PHOTON SDK, built on the public C API (photon.h) only.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "photon.h"

namespace photon::cli {
namespace {

const Command* const kCommands[] = {&kConvertCommand, &kInitCommand,     &kInspectCommand,
                                    &kScoreCommand,   &kGenerateCommand, &kBenchCommand,
                                    &kServeCommand};

const Command* find_command(const std::string& name) {
  for (const Command* command : kCommands) {
    if (name == command->name) return command;
  }
  return nullptr;
}

void print_overview(std::FILE* out) {
  std::fputs(
      "usage: photon <command> [options]\n"
      "\n"
      "PHOTON hierarchical language models: write, inspect, score, generate and serve.\n"
      "\n"
      "commands:\n",
      out);
  for (const Command* command : kCommands) {
    std::fprintf(out, "  %-10s %s\n", command->name, command->summary);
  }
  std::fputs(
      "  help       show help for a command\n"
      "\n"
      "options:\n"
      "  --version  print the tool's and the library's versions\n"
      "\n"
      "Run 'photon help <command>' or 'photon <command> --help' for a command's options.\n"
      "-m MODEL defaults to $PHOTON_MODEL. Exit codes: 0 ok, 1 failure, 2 usage error.\n",
      out);
}

int run_help(const std::vector<std::string>& args) {
  if (args.empty()) {
    print_overview(stdout);
    return 0;
  }
  if (args.size() > 1) {
    std::fprintf(stderr, "photon help: expected one command name\n");
    return 2;
  }
  const Command* command = find_command(args[0]);
  if (command == nullptr) {
    std::fprintf(stderr, "photon help: unknown command '%s' (see 'photon help')\n",
                 args[0].c_str());
    return 2;
  }
  std::fputs(command->help, stdout);
  return 0;
}

int run_command(const Command& command, const std::vector<std::string>& args) {
  try {
    return command.run(args);
  } catch (const HelpRequested&) {
    std::fputs(command.help, stdout);
    return 0;
  } catch (const UsageError& error) {
    std::fprintf(stderr, "photon %s: %s (see 'photon %s --help')\n", command.name, error.what(),
                 command.name);
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "photon %s: %s\n", command.name, error.what());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "photon %s: unexpected failure\n", command.name);
    return 1;
  }
}

int main_impl(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    print_overview(stderr);
    return 2;
  }
  const std::string name = args.front();
  args.erase(args.begin());
  if (name == "--version" || name == "-V") {
    std::printf("photon %s (library %s)\n", PHOTON_VERSION_STRING, photon_version());
    return 0;
  }
  if (name == "help" || name == "--help" || name == "-h") return run_help(args);
  const Command* command = find_command(name);
  if (command == nullptr) {
    std::fprintf(stderr, "photon: unknown %s '%s' (see 'photon help')\n",
                 name[0] == '-' ? "option" : "command", name.c_str());
    return 2;
  }
  return run_command(*command, args);
}

}  // namespace
}  // namespace photon::cli

int main(int argc, char** argv) {
  return photon::cli::main_impl(argc, argv);
}
