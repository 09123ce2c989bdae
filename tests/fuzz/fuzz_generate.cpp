// Fuzz target: tokenizing arbitrary prompt bytes and generating from them. Input: two bytes of
// settings, then the prompt text.
//   byte 0 bits 0-1: the model, tiny_config(levels) with levels 0 (vanilla) .. 3
//          bit 2: RecGen (where the model has two levels or more), else the default mode
//          bit 3: add BOS          bit 4: sample at temperature 0.9, else greedy
//          bit 5: top-k, top-p and min-p       bit 6: repetition penalty
//          bit 7: a stop string made of the prompt's last byte
//   byte 1: the sampler seed, and how many prompt tokens to prefill before the rest (split)
// Checks, besides crashes: every streamed piece is valid UTF-8; and, with the built-in tokenizer,
// the streamed pieces of the prompt's tokens add up to their detokenized text.
#include <algorithm>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

namespace {

using photon::fuzz::no_bug;
using photon::fuzz::require;

int check_piece(void* user, int32_t, const char* piece, size_t len, float) {
  require(photon::fuzz::valid_utf8(std::string_view(piece, len)),
          "a streamed piece is not valid UTF-8");
  ++*static_cast<int*>(user);
  return 0;
}

// The streaming path (token_bytes + Utf8Stream, as generation delivers pieces) must add up to
// decode() on the tokens of any text.
void check_builtin_tokenizer(std::string_view text) {
  static const photon::Tokenizer tokenizer(photon::builtin_tokenizer_model(), "built-in");
  const std::vector<int32_t> ids = tokenizer.encode(text, true);
  photon::Utf8Stream stream;
  std::string streamed;
  int32_t previous = -1;
  for (int32_t id : ids) {
    const std::string piece = stream.push(tokenizer.token_bytes(id, previous));
    require(photon::fuzz::valid_utf8(piece), "a streamed prompt piece is not valid UTF-8");
    streamed += piece;
    if (tokenizer.is_text_token(id)) previous = id;
  }
  streamed += stream.flush();
  require(streamed == tokenizer.decode(ids), "streamed pieces differ from the decoded text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0], extra = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  check_builtin_tokenizer(text);

  const int levels = flags & 3;
  photon_model* model = photon::fuzz::tiny_model(levels);
  size_t n_tokens = 0;
  photon_status status =
      photon_model_tokenize(model, text.data(), text.size(), flags & 8, nullptr, 0, &n_tokens);
  require(status == PHOTON_ERR_BUFFER_TOO_SMALL || (status == PHOTON_OK && n_tokens == 0),
          std::string("sizing a tokenization: ") + photon_status_name(status));
  std::vector<int32_t> tokens(n_tokens);
  size_t n_again = 0;
  require(photon_model_tokenize(model, text.data(), text.size(), flags & 8, tokens.data(),
                                tokens.size(), &n_again) == PHOTON_OK &&
              n_again == n_tokens,
          "tokenizing into a buffer of the size asked for failed");

  photon_session_options* options = nullptr;
  photon_session_options_create(&options);
  if ((flags & 4) && levels >= 2) photon_session_options_set_mode(options, PHOTON_MODE_RECGEN);
  photon_session_options_set_context_length(options, 32);
  photon_session_options_set_seed(options, extra);
  photon_session_options_set_ignore_eos(options, extra & 1);
  if (flags & 16) photon_session_options_set_temperature(options, 0.9f);
  if (flags & 32) {
    photon_session_options_set_top_k(options, 1 + extra % 40);
    photon_session_options_set_top_p(options, 0.5f);
    photon_session_options_set_min_p(options, 0.05f);
  }
  if (flags & 64) {
    photon_session_options_set_repetition_penalty(options, 1.3f, extra % 8);
    photon_session_options_set_presence_penalty(options, 0.25f * static_cast<float>(extra % 5));
    photon_session_options_set_frequency_penalty(options, -0.5f);
    // The prompt's first tokens banned (the options refuse a list that repeats one).
    const std::vector<float> biases(std::min<size_t>(tokens.size(), 4), -100.0f);
    photon_session_options_set_logit_bias(options, tokens.data(), biases.data(), biases.size());
  }
  if ((flags & 128) && !text.empty() && text.back() != '\0')
    photon_session_options_add_stop_string(options, std::string(1, text.back()).c_str());
  photon_session* session = nullptr;
  require(photon_session_create(model, options, &session) == PHOTON_OK, photon_last_error());
  photon_session_options_free(options);

  const size_t n_prompt = std::min<size_t>(tokens.size(), 24);
  const size_t split = std::min<size_t>(n_prompt, extra >> 3);
  status = no_bug(photon_session_prefill(session, tokens.data(), split), "photon_session_prefill");
  if (status == PHOTON_OK)
    status = no_bug(photon_session_prefill(session, tokens.data() + split, n_prompt - split),
                    "photon_session_prefill");
  int delivered = 0;
  if (status == PHOTON_OK) {
    status = no_bug(photon_session_generate(session, 6, check_piece, &delivered, nullptr),
                    "photon_session_generate");
    require(status == (n_prompt == 0 ? PHOTON_ERR_INVALID_ARGUMENT : PHOTON_OK),
            std::string("generate: ") + photon_status_name(status) + ": " + photon_last_error());
  }
  if (status == PHOTON_OK) {
    std::vector<int32_t> history(static_cast<size_t>(photon_session_position(session)));
    size_t n_history = 0;
    require(photon_session_tokens(session, history.data(), history.size(), &n_history) == PHOTON_OK,
            "photon_session_tokens failed");
    size_t text_len = 0;
    no_bug(photon_model_detokenize(model, history.data(), n_history, nullptr, 0, &text_len),
           "photon_model_detokenize");
  }
  photon_session_free(session);
  return 0;
}
