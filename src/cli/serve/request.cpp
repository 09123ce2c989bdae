#include "serve/request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "photon.h"
#include "serve/api_error.h"

namespace photon::serve {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 32;  // JSON nesting any valid request stays far below
constexpr size_t kMaxStopStrings = 4;
// photon_session_options_add_stop_string matches stop strings of up to this many bytes.
constexpr size_t kMaxStopBytes = 4096;

std::string quote(const std::string& name) {
  return "'" + name + "'";
}

const char* kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a fractional number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unknown value";
  }
}

ApiError wrong_type(const std::string& name, const char* expected, const json& v) {
  return bad_field(name, quote(name) + " must be " + expected + ", got " + kind(v));
}

// The field, or nullptr when it is absent or null (OpenAI's clients send null for "not given").
const json* find(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& v, const std::string& name) {
  if (!v.is_number()) throw wrong_type(name, "a number", v);
  return v.get<double>();
}

int64_t integer(const json& v, const std::string& name) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw bad_field(name, quote(name) + " is too large");
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) throw wrong_type(name, "an integer", v);
  return v.get<int64_t>();
}

bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) throw wrong_type(name, "a boolean", v);
  return v.get<bool>();
}

const std::string& string(const json& v, const std::string& name) {
  if (!v.is_string()) throw wrong_type(name, "a string", v);
  return v.get_ref<const std::string&>();
}

float ranged(const json& body, const char* name, double low, double high, bool low_open,
             float fallback) {
  const json* v = find(body, name);
  if (!v) return fallback;
  const double x = number(*v, name);
  if (!(low_open ? x > low : x >= low) || !(x <= high))
    throw bad_field(name, quote(name) + " must be in " + (low_open ? "(" : "[") + json(low).dump() +
                              ", " + json(high).dump() + "], got " + v->dump());
  return static_cast<float>(x);
}

json parse_body(std::string_view body) {
  const json::parser_callback_t depth_limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth)
      throw ApiError(400,
                     "the body nests JSON deeper than " + std::to_string(kMaxDepth) + " levels");
    return true;
  };
  json parsed;
  try {
    parsed = json::parse(body.begin(), body.end(), depth_limit);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const size_t tag = what.find("] ");
    if (tag != std::string::npos) what = what.substr(tag + 2);
    throw ApiError(400, "the body is not valid JSON: " + what);
  }
  if (!parsed.is_object())
    throw ApiError(400, std::string("the body must be a JSON object, got ") + kind(parsed));
  return parsed;
}

// Fields whose meaning the server cannot honour: refused unless they hold their neutral value.
void refuse_unsupported(const json& body, Endpoint endpoint) {
  for (const char* name : {"tools", "functions"}) {
    if (const json* v = find(body, name)) {
      if (!v->is_array()) throw wrong_type(name, "an array", *v);
      if (!v->empty())
        throw bad_field(name, quote(name) + " is not supported: this server has no tool calling");
    }
  }
  for (const char* name : {"tool_choice", "function_call"}) {
    if (const json* v = find(body, name); v && !(v->is_string() && *v == "none"))
      throw bad_field(name, quote(name) + " is not supported: this server has no tool calling");
  }
  if (const json* v = find(body, "response_format")) {
    const json* type = v->is_object() ? find(*v, "type") : nullptr;
    if (!type || !type->is_string() || *type != "text")
      throw bad_field("response_format",
                      "'response_format' must be {\"type\": \"text\"}: structured output is not "
                      "supported");
  }
  for (const char* name : {"audio", "prediction"}) {
    if (find(body, name)) throw bad_field(name, quote(name) + " is not supported");
  }
  if (const json* v = find(body, "modalities")) {
    if (!v->is_array()) throw wrong_type("modalities", "an array", *v);
    for (const json& m : *v)
      if (m != "text") throw bad_field("modalities", "only the 'text' modality is supported");
  }
  if (endpoint == Endpoint::Completions) {
    if (const json* v = find(body, "suffix"); v && !string(*v, "suffix").empty())
      throw bad_field("suffix", "'suffix' is not supported (no fill-in-the-middle)");
  }
}

std::vector<int32_t> token_ids(const json& v, const std::string& name) {
  if (v.empty()) throw bad_field(name, quote(name) + " holds no tokens");
  std::vector<int32_t> tokens;
  tokens.reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer() && !t.is_number_unsigned())
      throw bad_field(name, quote(name) + " must hold only integer token ids, got " + kind(t));
    const int64_t id = integer(t, name);
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      throw bad_field(name, quote(name) + " holds the token id " + std::to_string(id) +
                                ", outside the vocabulary");
    tokens.push_back(static_cast<int32_t>(id));
  }
  return tokens;
}

// prompt: "text", [1, 2, 3], or an array of those ("text" or [1, 2, 3] each): one prompt or
// several.
void parse_prompt(const json& body, GenerationRequest& r) {
  const json* p = find(body, "prompt");
  if (!p) throw bad_field("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompts.push_back({p->get<std::string>(), {}});
    return;
  }
  if (!p->is_array())
    throw wrong_type("prompt", "a string, an array of token ids, or an array of those", *p);
  if (p->empty()) throw bad_field("prompt", "'prompt' is an empty array");
  const json& first = p->front();
  if (!first.is_string() && !first.is_array()) {
    r.prompts.push_back({std::nullopt, token_ids(*p, "prompt")});
    return;
  }
  if (p->size() > static_cast<size_t>(kMaxRequestChoices))
    throw bad_field("prompt", "'prompt' holds " + std::to_string(p->size()) + " prompts; at most " +
                                  std::to_string(kMaxRequestChoices));
  for (size_t i = 0; i < p->size(); ++i) {
    const json& one = (*p)[i];
    const std::string name = "prompt[" + std::to_string(i) + "]";
    if (one.is_string())
      r.prompts.push_back({one.get<std::string>(), {}});
    else if (one.is_array())
      r.prompts.push_back({std::nullopt, token_ids(one, name)});
    else
      throw wrong_type(name, "a string or an array of token ids", one);
  }
}

std::string message_content(const json& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw wrong_type(name, "a string or an array of text parts", content);
  std::string text;
  for (const json& part : content) {
    const json* type = part.is_object() ? find(part, "type") : nullptr;
    if (!type || *type != "text")
      throw bad_field(name, quote(name) + " may hold only parts of type 'text'");
    const json* t = find(part, "text");
    if (!t) throw bad_field(name, quote(name) + " has a text part without 'text'");
    text += string(*t, name + ".text");
  }
  return text;
}

void parse_messages(const json& body, GenerationRequest& r) {
  const json* m = find(body, "messages");
  if (!m) throw bad_field("messages", "'messages' is required");
  if (!m->is_array()) throw wrong_type("messages", "an array", *m);
  if (m->empty()) throw bad_field("messages", "'messages' is empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const json& message = (*m)[i];
    if (!message.is_object()) throw wrong_type(name, "an object", message);
    const json* role = find(message, "role");
    if (!role) throw bad_field(name + ".role", quote(name + ".role") + " is required");
    std::string r_name = string(*role, name + ".role");
    if (r_name == "developer") r_name = "system";
    if (r_name != "system" && r_name != "user" && r_name != "assistant")
      throw bad_field(name + ".role", quote(name + ".role") + " is '" + r_name +
                                          "': only system, developer, user and assistant "
                                          "messages are supported");
    if (find(message, "tool_calls") || find(message, "function_call"))
      throw bad_field(name, quote(name) + " holds tool calls: this server has no tool calling");
    const json* content = find(message, "content");
    if (!content) throw bad_field(name + ".content", quote(name + ".content") + " is required");
    r.messages.push_back({r_name, message_content(*content, name + ".content")});
  }
}

void parse_stop(const json& body, Sampling& s) {
  const json* v = find(body, "stop");
  if (!v) return;
  const auto add = [&](const std::string& text) {
    if (text.size() > kMaxStopBytes)
      throw bad_field("stop", "'stop' holds a string of " + std::to_string(text.size()) +
                                  " bytes; at most " + std::to_string(kMaxStopBytes));
    s.stop.push_back(text);
  };
  if (v->is_string()) {
    if (!v->get_ref<const std::string&>().empty()) add(v->get<std::string>());
    return;
  }
  if (!v->is_array()) throw wrong_type("stop", "a string or an array of strings", *v);
  if (v->size() > kMaxStopStrings)
    throw bad_field("stop", "'stop' holds " + std::to_string(v->size()) + " strings; at most " +
                                std::to_string(kMaxStopStrings));
  for (const json& stop : *v) {
    const std::string& text = string(stop, "stop");
    if (text.empty()) throw bad_field("stop", "'stop' holds an empty string");
    add(text);
  }
}

// logit_bias: {"token id": bias in [-100, 100], ...}, as OpenAI's (ids checked against the
// vocabulary once the model is known).
void parse_logit_bias(const json& body, Sampling& s) {
  const json* v = find(body, "logit_bias");
  if (!v) return;
  if (!v->is_object()) throw wrong_type("logit_bias", "an object", *v);
  // Keys are distinct strings; without leading zeros they are distinct ids too.
  for (const auto& [key, value] : v->items()) {
    const bool canonical =
        !key.empty() && key.size() <= 10 && (key == "0" || key[0] != '0') &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = canonical ? std::stoll(key) : -1;
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      throw bad_field("logit_bias",
                      "'logit_bias' has the key \"" + key.substr(0, 32) + "\", not a token id");
    const double bias = number(value, "logit_bias");
    if (!(bias >= -100.0 && bias <= 100.0))
      throw bad_field("logit_bias", "'logit_bias' gives token " + key + " the bias " +
                                        value.dump() + ", outside [-100, 100]");
    s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
}

void parse_sampling(const json& body, Sampling& s) {
  s.temperature = ranged(body, "temperature", 0.0, 2.0, false, s.temperature);
  s.top_p = ranged(body, "top_p", 0.0, 1.0, true, s.top_p);
  s.min_p = ranged(body, "min_p", 0.0, 1.0, false, s.min_p);
  if (s.min_p >= 1.0f) throw bad_field("min_p", "'min_p' must be below 1");
  if (const json* v = find(body, "top_k")) {
    const int64_t k = integer(*v, "top_k");
    if (k < -1 || k > std::numeric_limits<int32_t>::max())
      throw bad_field("top_k", "'top_k' must be 0 or -1 (off) or a positive count");
    s.top_k = k < 0 ? 0 : static_cast<int32_t>(k);
  }
  s.repetition_penalty =
      ranged(body, "repetition_penalty", 1.0, 100.0, false, s.repetition_penalty);
  s.presence_penalty = ranged(body, "presence_penalty", -2.0, 2.0, false, s.presence_penalty);
  s.frequency_penalty = ranged(body, "frequency_penalty", -2.0, 2.0, false, s.frequency_penalty);
  if (const json* v = find(body, "repeat_last_n")) {
    const int64_t n = integer(*v, "repeat_last_n");
    if (n < -1 || n > std::numeric_limits<int32_t>::max())
      throw bad_field("repeat_last_n",
                      "'repeat_last_n' must be -1 (the whole context) or a count >= 0, got " +
                          std::to_string(n));
    s.repeat_last_n = static_cast<int32_t>(n);
  }
  parse_logit_bias(body, s);
  if (const json* v = find(body, "seed")) s.seed = static_cast<uint64_t>(integer(*v, "seed"));
  if (const json* v = find(body, "ignore_eos")) s.ignore_eos = boolean(*v, "ignore_eos");
  parse_stop(body, s);
}

int32_t parse_choices(const json& body) {
  const json* v = find(body, "n");
  if (!v) return 1;
  const int64_t n = integer(*v, "n");
  if (n < 1 || n > kMaxChoices)
    throw bad_field(
        "n", "'n' must be 1 to " + std::to_string(kMaxChoices) + ", got " + std::to_string(n));
  return static_cast<int32_t>(n);
}

std::optional<int32_t> parse_max_tokens(const json& body, Endpoint endpoint) {
  std::optional<int32_t> result;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (endpoint == Endpoint::Completions && std::string(name) == "max_completion_tokens") break;
    const json* v = find(body, name);
    if (!v) continue;
    const int64_t n = integer(*v, name);
    if (n < 0 || n > std::numeric_limits<int32_t>::max())
      throw bad_field(name, quote(name) + " must be a count >= 0, got " + v->dump());
    if (result && *result != n)
      throw bad_field(name, "'max_tokens' and 'max_completion_tokens' disagree");
    result = static_cast<int32_t>(n);
  }
  return result;
}

// A count of alternatives, 0 to PHOTON_MAX_TOP_LOGPROBS.
int32_t alternatives(const json& v, const char* name) {
  const int64_t n = integer(v, name);
  if (n < 0 || n > PHOTON_MAX_TOP_LOGPROBS)
    throw bad_field(name, quote(name) + " must be 0 to " + std::to_string(PHOTON_MAX_TOP_LOGPROBS) +
                              ", got " + std::to_string(n));
  return static_cast<int32_t>(n);
}

void parse_logprobs(const json& body, GenerationRequest& r) {
  const json* v = find(body, "logprobs");
  if (r.endpoint == Endpoint::Completions) {
    // An integer: how many alternatives to list besides the chosen token.
    if (!v) return;
    if (v->is_boolean()) {
      r.logprobs = v->get<bool>();
      return;
    }
    r.top_logprobs = alternatives(*v, "logprobs");
    r.logprobs = true;
    return;
  }
  if (v) r.logprobs = boolean(*v, "logprobs");
  if (const json* top = find(body, "top_logprobs")) {
    r.top_logprobs = alternatives(*top, "top_logprobs");
    if (r.top_logprobs > 0 && !r.logprobs)
      throw bad_field("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
  }
}

}  // namespace

GenerationRequest parse_generation_request(Endpoint endpoint, std::string_view text) {
  const json body = parse_body(text);
  GenerationRequest r;
  r.endpoint = endpoint;
  const json* model = find(body, "model");
  if (!model) throw bad_field("model", "'model' is required (GET /v1/models lists it)");
  r.model = string(*model, "model");
  refuse_unsupported(body, endpoint);
  if (endpoint == Endpoint::Completions)
    parse_prompt(body, r);
  else
    parse_messages(body, r);
  r.max_tokens = parse_max_tokens(body, endpoint);
  r.n = parse_choices(body);
  if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(kMaxRequestChoices))
    throw bad_field("n", "'n' is " + std::to_string(r.n) + " for " +
                             std::to_string(r.prompts.size()) + " prompts: at most " +
                             std::to_string(kMaxRequestChoices) + " choices per request");
  if (const json* v = find(body, "echo"); v && endpoint == Endpoint::Completions)
    r.echo = boolean(*v, "echo");
  if (const json* v = find(body, "best_of");
      v && endpoint == Endpoint::Completions && integer(*v, "best_of") != r.n)
    throw bad_field("best_of", "'best_of' must equal 'n': every choice generated is returned");
  parse_sampling(body, r.sampling);
  if (const json* v = find(body, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = find(body, "stream_options")) {
    if (!v->is_object()) throw wrong_type("stream_options", "an object", *v);
    if (!r.stream)
      throw bad_field("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (const json* usage = find(*v, "include_usage"))
      r.include_usage = boolean(*usage, "stream_options.include_usage");
  }
  parse_logprobs(body, r);
  if (const json* v = find(body, "return_token_ids"))
    r.return_token_ids = boolean(*v, "return_token_ids");
  if (const json* v = find(body, "user")) string(*v, "user");
  return r;
}

}  // namespace photon::serve
