// Chat templates: how /v1/chat/completions turns messages into the prompt text.
//
// A template is a JSON object, kept in the model file's metadata under kChatTemplateKey (or given
// with `photon serve --chat-template FILE`):
//
//   {"bos": true,                                     BOS before the text (default true)
//    "begin": "",                                     text before the first message (default "")
//    "roles": {"system":    {"prefix": "", "suffix": "\n\n"},
//              "user":      {"prefix": "User: ", "suffix": "\n"},
//              "assistant": {"prefix": "Assistant:", "suffix": "\n"}},
//    "stop": ["\nUser:"]}                             stop strings added to every chat request
//
// The prompt is begin, then prefix + content + suffix for each message in order, then the
// assistant's prefix, after which the model writes the reply. A role the template lacks is refused
// (400). Because a reply is rendered as the assistant's prefix + the reply + suffix, the next
// turn's prompt starts with this turn's prompt and reply, which lets a conversation resume its
// saved state (docs/serving.md).
#pragma once

#include <string>
#include <vector>

#include "serve/request.h"

namespace photon::serve {

inline constexpr const char* kChatTemplateKey = "photon.chat_template";

struct ChatTemplate {
  struct Role {
    std::string prefix;
    std::string suffix;
  };
  bool bos = true;
  std::string begin;
  std::vector<std::pair<std::string, Role>> roles;  // by role name
  std::vector<std::string> stop;

  // The plain transcript template, for models whose file has none (kDefaultChatTemplate).
  static ChatTemplate transcript();
  // Parses a template; std::invalid_argument with a message naming the field on a mistake.
  static ChatTemplate parse(const std::string& json_text);

  // The prompt text for `messages` (ApiError 400 for a role the template lacks).
  std::string render(const std::vector<ChatMessage>& messages) const;
};

// The transcript template as JSON text (what ChatTemplate::transcript() parses).
extern const char* const kDefaultChatTemplate;

}  // namespace photon::serve
