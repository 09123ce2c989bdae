// The body of POST /v1/completions and /v1/chat/completions, parsed and checked: every field the
// server uses has its type and range checked, fields whose meaning it cannot honour (tools,
// n > 1, top log-probabilities, ...) are refused, and fields that do not change the result
// (user, metadata, ...) are ignored. Failures throw ApiError 400 naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace photon::serve {

enum class Endpoint { Completions, ChatCompletions };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" ("developer" is read as "system")
  std::string content;
};

struct Sampling {
  float temperature = 1.0f;  // OpenAI's default
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;  // none: a fresh seed per request
  bool ignore_eos = false;
  std::vector<std::string> stop;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  std::optional<std::string> prompt_text;  // completions: a text prompt
  std::vector<int32_t> prompt_tokens;      // completions: a prompt of token ids
  std::vector<ChatMessage> messages;       // chat completions
  std::optional<int32_t> max_tokens;
  Sampling sampling;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool logprobs = false;          // each chosen token's log-probability
  bool return_token_ids = false;  // extension: the generated token ids
};

GenerationRequest parse_generation_request(Endpoint endpoint, std::string_view body);

}  // namespace photon::serve
