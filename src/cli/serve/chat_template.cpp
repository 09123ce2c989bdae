#include "serve/chat_template.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "serve/api_error.h"

namespace photon::serve {

const char* const kDefaultChatTemplate = R"({
  "bos": true,
  "begin": "",
  "roles": {
    "system": {"prefix": "", "suffix": "\n\n"},
    "user": {"prefix": "User: ", "suffix": "\n"},
    "assistant": {"prefix": "Assistant:", "suffix": "\n"}
  },
  "stop": ["\nUser:"]
})";

namespace {

using nlohmann::json;

const std::string& text_field(const json& object, const char* name, const std::string& where) {
  static const std::string empty;
  const auto it = object.find(name);
  if (it == object.end()) return empty;
  if (!it->is_string())
    throw std::invalid_argument("chat template: " + where + name + " must be a string");
  return it->get_ref<const std::string&>();
}

}  // namespace

ChatTemplate ChatTemplate::transcript() {
  return parse(kDefaultChatTemplate);
}

ChatTemplate ChatTemplate::parse(const std::string& json_text) {
  const json t = json::parse(json_text, nullptr, false);
  if (t.is_discarded() || !t.is_object())
    throw std::invalid_argument("chat template: not a JSON object");
  static const char* const known[] = {"bos", "begin", "roles", "stop"};
  for (const auto& [key, value] : t.items()) {
    bool found = false;
    for (const char* k : known) found |= key == k;
    if (!found) throw std::invalid_argument("chat template: unknown field '" + key + "'");
  }
  ChatTemplate result;
  if (const auto it = t.find("bos"); it != t.end()) {
    if (!it->is_boolean()) throw std::invalid_argument("chat template: bos must be a boolean");
    result.bos = it->get<bool>();
  }
  result.begin = text_field(t, "begin", "");
  const auto roles = t.find("roles");
  if (roles == t.end() || !roles->is_object())
    throw std::invalid_argument("chat template: roles must be an object");
  for (const auto& [name, role] : roles->items()) {
    if (name != "system" && name != "user" && name != "assistant")
      throw std::invalid_argument("chat template: unknown role '" + name +
                                  "' (system, user, assistant)");
    if (!role.is_object())
      throw std::invalid_argument("chat template: roles." + name + " must be an object");
    const std::string where = "roles." + name + ".";
    for (const auto& [key, value] : role.items())
      if (key != "prefix" && key != "suffix")
        throw std::invalid_argument("chat template: unknown field " + where + key);
    result.roles.push_back(
        {name, {text_field(role, "prefix", where), text_field(role, "suffix", where)}});
  }
  bool has_assistant = false;
  for (const auto& role : result.roles) has_assistant |= role.first == "assistant";
  if (!has_assistant) throw std::invalid_argument("chat template: roles.assistant is required");
  if (const auto it = t.find("stop"); it != t.end()) {
    if (!it->is_array()) throw std::invalid_argument("chat template: stop must be an array");
    for (const json& s : *it) {
      if (!s.is_string() || s.get_ref<const std::string&>().empty())
        throw std::invalid_argument("chat template: stop must hold non-empty strings");
      result.stop.push_back(s.get<std::string>());
    }
  }
  return result;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  const auto find_role = [&](const std::string& name, size_t index) -> const Role& {
    for (const auto& role : roles)
      if (role.first == name) return role.second;
    throw bad_field("messages[" + std::to_string(index) + "].role",
                    "the model's chat template has no '" + name + "' role");
  };
  std::string text = begin;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Role& role = find_role(messages[i].role, i);
    text += role.prefix;
    text += messages[i].content;
    text += role.suffix;
  }
  text += find_role("assistant", messages.size()).prefix;
  return text;
}

}  // namespace photon::serve
