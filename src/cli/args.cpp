#include "args.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace photon::cli {

Args::Args(std::vector<OptionSpec> options, size_t max_positionals)
    : options_(std::move(options)), max_positionals_(max_positionals) {}

const OptionSpec* Args::find_long(const std::string& name) const {
  for (const OptionSpec& option : options_) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

const OptionSpec* Args::find_short(char name) const {
  for (const OptionSpec& option : options_) {
    if (option.short_name != 0 && option.short_name == name) return &option;
  }
  return nullptr;
}

void Args::parse(const std::vector<std::string>& argv) {
  bool options_ended = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    const bool looks_like_option = arg.size() > 1 && arg[0] == '-';
    if (options_ended || !looks_like_option) {
      if (positionals_.size() >= max_positionals_) {
        throw UsageError("unexpected argument '" + arg + "'");
      }
      positionals_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") throw HelpRequested{};

    const OptionSpec* spec = nullptr;
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      std::string name = arg.substr(2);
      const size_t equals = name.find('=');
      if (equals != std::string::npos) {
        inline_value = name.substr(equals + 1);
        name.resize(equals);
      }
      spec = find_long(name);
    } else if (arg.size() == 2) {
      spec = find_short(arg[1]);
    }
    if (spec == nullptr) throw UsageError("unknown option '" + arg + "'");

    if (!spec->takes_value) {
      if (inline_value) throw UsageError("option --" + spec->name + " takes no value");
      given_.emplace_back(spec->name, std::string());
      continue;
    }
    if (inline_value) {
      given_.emplace_back(spec->name, *inline_value);
    } else if (i + 1 < argv.size()) {
      given_.emplace_back(spec->name, argv[++i]);
    } else {
      throw UsageError("option " + arg + " needs a value");
    }
  }
}

bool Args::has(const std::string& name) const {
  for (const auto& [key, unused] : given_) {
    if (key == name) return true;
  }
  return false;
}

std::optional<std::string> Args::value(const std::string& name) const {
  std::optional<std::string> last;
  for (const auto& [key, text] : given_) {
    if (key == name) last = text;
  }
  return last;
}

std::vector<std::string> Args::values(const std::string& name) const {
  std::vector<std::string> all;
  for (const auto& [key, text] : given_) {
    if (key == name) all.push_back(text);
  }
  return all;
}

std::string Args::required(const std::string& name) const {
  std::optional<std::string> text = value(name);
  if (!text) throw UsageError("missing required option " + option_label(name));
  return *text;
}

std::string option_label(const std::string& name) {
  return "--" + name;
}

std::string option_help(const char* name, char short_name, const char* value,
                        const std::string& help, bool repeatable,
                        const std::vector<std::string>& fallback) {
  // The description starts in column 24, after two spaces and a label of up to 20 characters.
  constexpr size_t kLabelWidth = 20;
  constexpr size_t kLineWidth = 96;
  const std::string indent(kLabelWidth + 4, ' ');
  std::string label = short_name != 0 ? std::string("-") + short_name + ", " : std::string();
  label += option_label(name) + " " + value;
  std::string notes = repeatable ? "repeatable" : "";
  for (size_t i = 0; i < fallback.size(); ++i)
    notes += (i > 0 ? " and " : notes.empty() ? "default " : "; default ") + fallback[i];
  std::string text = help;
  if (!notes.empty()) {
    const size_t last_line = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    const bool fits = indent.size() + (text.size() - last_line) + notes.size() + 3 <= kLineWidth;
    text += (fits ? " (" : "\n(") + notes + ")";
  }
  std::string out = "  " + label;
  out += label.size() <= kLabelWidth ? std::string(kLabelWidth + 2 - label.size(), ' ')
                                     : "\n" + indent;
  for (char c : text) out += c == '\n' ? "\n" + indent : std::string(1, c);
  return out + "\n";
}

namespace {

template <typename T>
T parse_integer(const std::string& text, const std::string& what, const char* kind) {
  T result{};
  const char* begin = text.data();
  const char* end = begin + text.size();
  const auto [stop, error] = std::from_chars(begin, end, result);
  if (text.empty() || error == std::errc::invalid_argument || stop != end) {
    throw UsageError(what + ": '" + text + "' is not " + kind);
  }
  if (error == std::errc::result_out_of_range) {
    throw UsageError(what + ": '" + text + "' is out of range");
  }
  return result;
}

}  // namespace

int32_t parse_int32(const std::string& text, const std::string& what) {
  return parse_integer<int32_t>(text, what, "an integer");
}

int32_t parse_positive(const std::string& text, const std::string& what) {
  const int32_t value = parse_int32(text, what);
  if (value < 1) throw UsageError(what + ": '" + text + "' must be at least 1");
  return value;
}

uint64_t parse_uint64(const std::string& text, const std::string& what) {
  return parse_integer<uint64_t>(text, what, "a non-negative integer");
}

float parse_float(const std::string& text, const std::string& what) {
  float result = 0.0f;
  const char* begin = text.data();
  const char* end = begin + text.size();
  const auto [stop, error] = std::from_chars(begin, end, result);
  if (text.empty() || error == std::errc::invalid_argument || stop != end) {
    throw UsageError(what + ": '" + text + "' is not a number");
  }
  if (error == std::errc::result_out_of_range || !std::isfinite(result)) {
    throw UsageError(what + ": '" + text + "' is not a finite number");
  }
  return result;
}

std::vector<int32_t> parse_token_list(const std::string& text, const std::string& what) {
  std::vector<int32_t> tokens;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    const size_t first = item.find_first_not_of(" \t");
    const size_t last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? std::string() : item.substr(first, last - first + 1);
    if (item.empty()) throw UsageError(what + ": empty token id in '" + text + "'");
    tokens.push_back(parse_integer<int32_t>(item, what, "a token id (an integer)"));
    start = comma + 1;
  }
  return tokens;
}

}  // namespace photon::cli
