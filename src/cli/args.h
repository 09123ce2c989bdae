// Command-line parsing for the photon tool: options declared per command, strict value parsing.
// Every mistake throws UsageError (exit code 2) with a message naming the option and the value.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace photon::cli {

// A mistake in how the tool was called: exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when --help / -h is given; the dispatcher prints the command's help.
struct HelpRequested {};

struct OptionSpec {
  std::string name;         // long form without dashes, e.g. "tokens"; also the lookup key
  char short_name = 0;      // e.g. 'o' for -o; 0 for none
  bool takes_value = true;  // false for flags such as --json
};

class Args {
 public:
  // max_positionals: how many non-option arguments the command accepts.
  Args(std::vector<OptionSpec> options, size_t max_positionals);

  // Parses argv (without the program and command names). "--name value", "--name=value",
  // "-x value" and "--" (end of options) are accepted; a value is always the next argument, even
  // when it starts with '-' (so "--temperature -1" reaches the value check).
  void parse(const std::vector<std::string>& argv);

  bool has(const std::string& name) const;
  // The last value given for the option, if any.
  std::optional<std::string> value(const std::string& name) const;
  // Every value given for a repeatable option, in order.
  std::vector<std::string> values(const std::string& name) const;
  // The value, or UsageError "missing required option --name".
  std::string required(const std::string& name) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  const OptionSpec* find_long(const std::string& name) const;
  const OptionSpec* find_short(char name) const;

  std::vector<OptionSpec> options_;
  size_t max_positionals_;
  std::vector<std::pair<std::string, std::string>> given_;  // (name, value) in order
  std::vector<std::string> positionals_;
};

// "--name" or "-x" as the user would write it, for messages.
std::string option_label(const std::string& name);

// An option described once, for a command that keeps its options in a table: Args parses by the
// table (option_specs), --help lists it (option_help), and `apply` checks each value and puts it
// into the command's settings, a Target.
template <class Target>
struct OptionDef {
  const char* name;
  char short_name;                    // -x, or 0
  const char* value;                  // what --help calls the value
  int section;                        // which section of the command's --help lists it
  std::string help;                   // '\n' starts a continuation line
  bool repeatable;                    // every value given counts, in order; otherwise the last one
  std::vector<std::string> fallback;  // the values when it is not given (--help shows them)
  // Puts one value into the target; `label` ("--batch") names the option in messages. Null: the
  // option is read some other way (a helper that several commands share).
  void (*apply)(Target& target, const std::string& value, const std::string& label);
};

template <class Target>
std::vector<OptionSpec> option_specs(const std::vector<OptionDef<Target>>& table) {
  std::vector<OptionSpec> specs;
  for (const OptionDef<Target>& option : table) specs.push_back({option.name, option.short_name});
  return specs;
}

// Applies every option of the table that has an `apply`, in table order: each value given (the
// last one only, unless the option is repeatable), or its fallback when none was.
template <class Target>
void apply_options(const std::vector<OptionDef<Target>>& table, const Args& args, Target& target) {
  for (const OptionDef<Target>& option : table) {
    if (option.apply == nullptr) continue;
    std::vector<std::string> values = args.values(option.name);
    if (values.empty()) values = option.fallback;
    if (!option.repeatable && values.size() > 1) values.erase(values.begin(), values.end() - 1);
    for (const std::string& value : values) option.apply(target, value, option_label(option.name));
  }
}

// The --help lines of one option: "  -m, --model M.photon" in a column, its description beside it,
// then "(repeatable; default ...)" as the table says.
std::string option_help(const char* name, char short_name, const char* value,
                        const std::string& help, bool repeatable,
                        const std::vector<std::string>& fallback);

template <class Target>
std::string option_help(const OptionDef<Target>& option) {
  return option_help(option.name, option.short_name, option.value, option.help, option.repeatable,
                     option.fallback);
}

// Strict number parsing: the whole text must be a number in range. `what` names the value in the
// UsageError message (e.g. "--top-k").
int32_t parse_int32(const std::string& text, const std::string& what);
// An int32 of at least 1.
int32_t parse_positive(const std::string& text, const std::string& what);
uint64_t parse_uint64(const std::string& text, const std::string& what);
float parse_float(const std::string& text, const std::string& what);  // finite values only

// "1,2,3" (spaces around ids allowed) -> ids. Every id must be a 32-bit integer; the list must not
// be empty. Whether an id lies inside the vocabulary is the library's check.
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& what);

}  // namespace photon::cli
