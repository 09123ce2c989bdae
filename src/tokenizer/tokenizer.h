// The sentencepiece tokenizer embedded in every model file, and UTF-8-safe streaming of pieces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace photon {

class Tokenizer {
 public:
  // Parses a serialized sentencepiece model. Throws Error(PHOTON_ERR_TOKENIZER) naming `origin`.
  Tokenizer(const std::string& serialized_model, const std::string& origin);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  int32_t vocab_size() const;
  int32_t bos() const;  // -1 when absent
  int32_t eos() const;
  int32_t unk() const;
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // Ids outside [0, vocab_size) throw Error(PHOTON_ERR_BAD_TOKEN).
  std::string decode(const std::vector<int32_t>& ids) const;
  // The raw bytes one token contributes when it follows `previous`, the last text token before it
  // (-1 if none; see is_text_token): U+2581 becomes a space, byte pieces become their byte, control
  // and unused pieces give nothing, and the leading space is dropped when previous is -1, as
  // sentencepiece drops its dummy prefix.
  std::string token_bytes(int32_t id, int32_t previous) const;
  // False for control (BOS, EOS) and unused pieces, which contribute no text.
  bool is_text_token(int32_t id) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Turns a stream of token byte pieces into UTF-8-complete text pieces: bytes of a character that
// is split across tokens are held back until it is whole; a byte that can no longer become part of
// a valid character comes out as U+FFFD, so every piece is valid UTF-8.
class Utf8Stream {
 public:
  // Appends bytes and returns the longest prefix of pending bytes that ends on a character
  // boundary.
  std::string push(std::string_view bytes);
  // Returns whatever is still held back (at the end of a stream).
  std::string flush();
  // Bytes held back (saved with a session so that a restored stream continues alike).
  const std::string& pending() const { return pending_; }
  void set_pending(std::string bytes) { pending_ = std::move(bytes); }

 private:
  static std::string replace_invalid(std::string_view bytes);
  std::string pending_;
};

// A sentencepiece model padded to `vocab_size` pieces with unused pieces ("<unused_N>", type
// UNUSED), by appending protobuf records to the serialized ModelProto. Throws
// Error(PHOTON_ERR_TOKENIZER) if the model already has more than vocab_size pieces.
std::string pad_tokenizer_model(const std::string& serialized_model, int32_t vocab_size,
                                const std::string& origin);

// The SDK's built-in tokenizer (src/tokenizer/builtin.model, compiled into the library).
const std::string& builtin_tokenizer_model();

}  // namespace photon
