#include "tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstring>
#include <new>
#include <string_view>

#include "core/error.h"

// The bytes of src/tokenizer/builtin.model, embedded at build time by cmake/PhotonEmbed.cmake.
extern const unsigned char photon_builtin_tokenizer_model[];
extern const size_t photon_builtin_tokenizer_model_size;

namespace photon {
namespace {

// sentencepiece writes a space as U+2581 LOWER ONE EIGHTH BLOCK inside pieces.
constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";

std::unique_ptr<sentencepiece::SentencePieceProcessor> load_processor(
    const std::string& serialized_model, const std::string& origin) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status status;
  try {
    status = processor->LoadFromSerializedProto(serialized_model);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // Its double-array trie builder throws exceptions of its own, out-of-memory ones among them.
    const bool memory = std::string_view(e.what()).find("bad_alloc") != std::string_view::npos;
    fail(memory ? PHOTON_ERR_OUT_OF_MEMORY : PHOTON_ERR_TOKENIZER,
         origin + ": not a valid sentencepiece model (" + e.what() + ")");
  }
  check(status.ok(), PHOTON_ERR_TOKENIZER,
        origin + ": not a valid sentencepiece model (" + status.ToString() + ")");
  return processor;
}

// A byte piece is spelled "<0xAB>".
char byte_of_piece(const std::string& piece) {
  return static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
}

std::string replace_space_symbols(std::string_view piece) {
  std::string text;
  text.reserve(piece.size());
  for (size_t at = 0; at < piece.size();) {
    if (piece.substr(at, kSpaceSymbol.size()) == kSpaceSymbol) {
      text += ' ';
      at += kSpaceSymbol.size();
    } else {
      text += piece[at++];
    }
  }
  return text;
}

// Protobuf wire format, enough to append records to a serialized ModelProto.
void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void append_length_delimited(std::string& out, uint32_t field, std::string_view payload) {
  append_varint(out, (field << 3) | 2);
  append_varint(out, payload.size());
  out += payload;
}

// ModelProto.pieces (field 1) holding SentencePiece{piece: 1, score: 2, type: 3 = UNUSED}.
std::string unused_piece_record(const std::string& name) {
  constexpr uint32_t kPieceField = 1, kScoreField = 2, kTypeField = 3, kTypeUnused = 5;
  std::string piece;
  append_length_delimited(piece, kPieceField, name);
  append_varint(piece, (kScoreField << 3) | 5);  // wire type 5: fixed32 float, little-endian
  const float score = 0.0f;
  char score_bytes[sizeof(score)];
  std::memcpy(score_bytes, &score, sizeof(score));
  piece.append(score_bytes, sizeof(score_bytes));
  append_varint(piece, kTypeField << 3);  // wire type 0: varint
  append_varint(piece, kTypeUnused);
  std::string record;
  constexpr uint32_t kModelPiecesField = 1;
  append_length_delimited(record, kModelPiecesField, piece);
  return record;
}

bool is_piece(const sentencepiece::SentencePieceProcessor& processor, const std::string& name) {
  return processor.PieceToId(name) != processor.unk_id() ||
         processor.IdToPiece(processor.unk_id()) == name;
}

// "<unused_", or with more underscores if the model already has a piece of that family.
std::string unused_prefix(const sentencepiece::SentencePieceProcessor& processor, int32_t first_id,
                          int32_t end_id) {
  for (std::string prefix = "<unused_";; prefix += '_') {
    bool collides = false;
    for (int32_t id = first_id; id < end_id && !collides; ++id) {
      collides = is_piece(processor, prefix + std::to_string(id) + ">");
    }
    if (!collides) return prefix;
  }
}

// Length of the UTF-8 character starting at `bytes` (Unicode table 3-7 well-formed sequences), 0
// when the bytes cannot start a valid character, or -1 when they are a valid but unfinished prefix.
int utf8_character_length(std::string_view bytes) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  int length = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // no overlong forms
    if (lead == 0xED) second_max = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;  // no overlong forms
    if (lead == 0xF4) second_max = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (size_t i = 1; i < static_cast<size_t>(length); ++i) {
    if (i >= bytes.size()) return -1;
    const unsigned char low = i == 1 ? second_min : 0x80, high = i == 1 ? second_max : 0xBF;
    if (byte(i) < low || byte(i) > high) return 0;
  }
  return length;
}

}  // namespace

Tokenizer::Tokenizer(const std::string& serialized_model, const std::string& origin)
    : sp_(load_processor(serialized_model, origin)) {}

Tokenizer::~Tokenizer() = default;

int32_t Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int32_t Tokenizer::bos() const {
  return sp_->bos_id();
}
int32_t Tokenizer::eos() const {
  return sp_->eos_id();
}
bool Tokenizer::is_text_token(int32_t id) const {
  return !sp_->IsControl(id) && !sp_->IsUnused(id);
}

int32_t Tokenizer::unk() const {
  return sp_->unk_id();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  check(status.ok(), PHOTON_ERR_TOKENIZER, "tokenizer failed to encode text: " + status.ToString());
  // A tokenizer without BOS cannot add one; the text's own tokens are still right.
  if (add_bos && bos() >= 0) ids.insert(ids.begin(), bos());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (size_t position = 0; position < ids.size(); ++position) {
    const int32_t id = ids[position];
    check(id >= 0 && id < vocab_size(), PHOTON_ERR_BAD_TOKEN,
          "token id " + std::to_string(id) + " at position " + std::to_string(position) +
              " is outside the vocabulary [0, " + std::to_string(vocab_size()) + ")");
    // sentencepiece would spell an unused piece out ("<unused_7>"); it stands for no text.
    if (!sp_->IsUnused(id)) kept.push_back(id);
  }
  std::string text;
  const auto status = sp_->Decode(kept, &text);
  check(status.ok(), PHOTON_ERR_TOKENIZER, "tokenizer failed to decode: " + status.ToString());
  return text;
}

std::string Tokenizer::token_bytes(int32_t id, int32_t previous) const {
  const auto in_vocab = [&](int32_t token) { return token >= 0 && token < vocab_size(); };
  check(in_vocab(id), PHOTON_ERR_BAD_TOKEN,
        "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
            std::to_string(vocab_size()) + ")");
  check(previous == -1 || in_vocab(previous), PHOTON_ERR_BAD_TOKEN,
        "previous token id " + std::to_string(previous) + " is outside the vocabulary [0, " +
            std::to_string(vocab_size()) + ")");
  if (sp_->IsControl(id) || sp_->IsUnused(id)) return {};
  // sentencepiece spells <unk> as the model's unk_surface, which only a decode reveals.
  if (sp_->IsUnknown(id)) return sp_->DecodeIds({id});
  const std::string& piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) return std::string(1, byte_of_piece(piece));
  std::string text = replace_space_symbols(piece);
  const bool starts_text = previous == -1;
  if (starts_text && !text.empty() && text.front() == ' ') text.erase(0, 1);
  return text;
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  size_t complete = 0;
  while (complete < pending_.size()) {
    const int length = utf8_character_length(std::string_view(pending_).substr(complete));
    if (length < 0) break;                 // wait for the rest of the character
    complete += length == 0 ? 1 : length;  // an invalid byte can go out at once
  }
  std::string ready = replace_invalid(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return ready;
}

std::string Utf8Stream::flush() {
  std::string rest = replace_invalid(pending_);
  pending_.clear();
  return rest;
}

// Each byte that starts no valid character becomes U+FFFD, as sentencepiece's decoder does, so the
// streamed text is valid UTF-8 and equals photon_model_detokenize.
std::string Utf8Stream::replace_invalid(std::string_view bytes) {
  std::string out;
  for (size_t at = 0; at < bytes.size();) {
    const int length = utf8_character_length(bytes.substr(at));
    if (length > 0) {
      out.append(bytes.substr(at, length));
      at += length;
    } else {
      out.append("\xEF\xBF\xBD");
      at += 1;
    }
  }
  return out;
}

std::string pad_tokenizer_model(const std::string& serialized_model, int32_t vocab_size,
                                const std::string& origin) {
  const auto processor = load_processor(serialized_model, origin);
  const int32_t pieces = processor->GetPieceSize();
  check(pieces <= vocab_size, PHOTON_ERR_TOKENIZER,
        origin + ": the tokenizer has " + std::to_string(pieces) +
            " pieces, more than the model's vocab_size " + std::to_string(vocab_size));
  // Repeated fields may be continued anywhere in a message: parsers append the new elements.
  std::string padded = serialized_model;
  const std::string prefix = unused_prefix(*processor, pieces, vocab_size);
  for (int32_t id = pieces; id < vocab_size; ++id) {
    padded += unused_piece_record(prefix + std::to_string(id) + ">");
  }
  const int32_t padded_pieces = load_processor(padded, origin + " (padded)")->GetPieceSize();
  check(padded_pieces == vocab_size, PHOTON_ERR_INTERNAL,
        origin + ": padding gave " + std::to_string(padded_pieces) + " pieces instead of " +
            std::to_string(vocab_size));
  return padded;
}

const std::string& builtin_tokenizer_model() {
  static const std::string model(reinterpret_cast<const char*>(photon_builtin_tokenizer_model),
                                 photon_builtin_tokenizer_model_size);
  return model;
}

}  // namespace photon
