#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace photon {
namespace {

std::string read_file(const std::string& relative_path) {
  const std::string path = std::string(PHOTON_SOURCE_DIR) + "/" + relative_path;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.is_open()) << "cannot open " << path;
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

const std::string& builtin_file() {
  static const std::string bytes = read_file("src/tokenizer/builtin.model");
  return bytes;
}

const std::string& tiny_file() {
  static const std::string bytes = read_file("tests/data/tiny.model");
  return bytes;
}

// sentencepiece itself, to compare with.
using Reference = std::unique_ptr<sentencepiece::SentencePieceProcessor>;

Reference reference_processor(const std::string& serialized) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  EXPECT_TRUE(processor->LoadFromSerializedProto(serialized).ok());
  return processor;
}

// Decodes one code point the textbook way (independent of the library's table-driven check):
// returns its length, or 0 if `text` at `at` does not start a well-formed UTF-8 character.
size_t utf8_length_at(const std::string& text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[at + i]); };
  size_t length = 0;
  uint32_t code_point = 0;
  if (byte(0) < 0x80) {
    return 1;
  } else if ((byte(0) & 0xE0) == 0xC0) {
    length = 2;
    code_point = byte(0) & 0x1F;
  } else if ((byte(0) & 0xF0) == 0xE0) {
    length = 3;
    code_point = byte(0) & 0x0F;
  } else if ((byte(0) & 0xF8) == 0xF0) {
    length = 4;
    code_point = byte(0) & 0x07;
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i) & 0x3F);
  }
  const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
  if (code_point < smallest[length] || surrogate || code_point > 0x10FFFF) return 0;
  return length;
}

bool is_valid_utf8(const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    const size_t length = utf8_length_at(text, at);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

// What sentencepiece's decoder does to bytes that do not form UTF-8: one U+FFFD per bad byte.
std::string replace_invalid_utf8(const std::string& text) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    const size_t length = utf8_length_at(text, at);
    out += length == 0 ? "\xEF\xBF\xBD" : text.substr(at, length);
    at += length == 0 ? 1 : length;
  }
  return out;
}

// The pieces a streaming consumer sees. `previous` is the last token that is not a control or
// unused piece (-1 before the first): with that, token_bytes drops exactly the space that
// sentencepiece drops, wherever BOS, EOS or unused ids appear in the sequence.
std::vector<std::string> stream_pieces(const Tokenizer& tokenizer, const Reference& reference,
                                       const std::vector<int32_t>& ids) {
  std::vector<std::string> pieces;
  Utf8Stream stream;
  int32_t previous = -1;
  for (int32_t id : ids) {
    pieces.push_back(stream.push(tokenizer.token_bytes(id, previous)));
    if (!reference->IsControl(id) && !reference->IsUnused(id)) previous = id;
  }
  pieces.push_back(stream.flush());
  return pieces;
}

std::string concatenated_token_bytes(const Tokenizer& tokenizer, const Reference& reference,
                                     const std::vector<int32_t>& ids) {
  std::string text;
  int32_t previous = -1;
  for (int32_t id : ids) {
    text += tokenizer.token_bytes(id, previous);
    if (!reference->IsControl(id) && !reference->IsUnused(id)) previous = id;
  }
  return text;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string text;
  for (const auto& piece : pieces) text += piece;
  return text;
}

std::string reference_decode(const Reference& reference, const std::vector<int32_t>& ids) {
  std::vector<int> kept;
  for (int32_t id : ids) {
    if (!reference->IsUnused(id)) kept.push_back(id);
  }
  return reference->DecodeIds(kept);
}

photon_status status_of(const std::function<void()>& call, std::string* message = nullptr) {
  try {
    call();
  } catch (const Error& error) {
    if (message != nullptr) *message = error.what();
    return error.status();
  }
  return PHOTON_OK;
}

const std::vector<std::string> kEnglish = {
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
    "Jesus wept.",
    "The quick brown fox jumps over the lazy dog; 12345 + 67 = 12412!",
    "  leading and trailing spaces, double  spaces  ",
    "tabs\tand\nnew lines\r\n, \"quotes\", <angle> [brackets] {braces} 100% #1 @home ~/path\\x",
    "",
};

const std::vector<std::string> kNonAscii = {
    "\xE1\xBC\x98\xCE\xBD \xE1\xBC\x80\xCF\x81\xCF\x87\xE1\xBF\x87 \xE1\xBC\xA6\xCE\xBD "
    "\xE1\xBD\x81 \xCE\xBB\xCF\x8C\xCE\xB3\xCE\xBF\xCF\x82",  // Greek: John 1:1
    "\xE5\xA4\xAA\xE5\x88\x9D\xE6\x9C\x89\xE9\x81\x93",       // CJK: 太初有道
    "\xF0\x9F\x98\x80 and \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",  // emoji with a skin tone
    "na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 5 \xE2\x82\xAC",   // Latin-1 letters, dash, euro
    std::string("nul\0inside", 10),
};

TEST(Tokenizer, BuiltinModelIsTheCommittedFile) {
  EXPECT_EQ(builtin_tokenizer_model(), builtin_file());
  const Tokenizer tokenizer(builtin_tokenizer_model(), "builtin");
  EXPECT_EQ(tokenizer.vocab_size(), 4096);
  EXPECT_EQ(tokenizer.unk(), 0);
  EXPECT_EQ(tokenizer.bos(), 1);
  EXPECT_EQ(tokenizer.eos(), 2);
}

TEST(Tokenizer, TinyModelHasTheSpecialIds) {
  const Tokenizer tokenizer(tiny_file(), "tiny.model");
  EXPECT_EQ(tokenizer.vocab_size(), 320);
  EXPECT_EQ(tokenizer.unk(), 0);
  EXPECT_EQ(tokenizer.bos(), 1);
  EXPECT_EQ(tokenizer.eos(), 2);
}

TEST(Tokenizer, RoundTripsEnglishExactly) {
  for (const auto* model : {&builtin_file(), &tiny_file()}) {
    const Tokenizer tokenizer(*model, "model");
    for (const auto& text : kEnglish) {
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, false)), text);
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, true)), text);
    }
  }
}

TEST(Tokenizer, BuiltinModelCompressesEnglish) {
  const Tokenizer tokenizer(builtin_file(), "builtin");
  const std::string verse = kEnglish[0];  // 54 bytes, all common words
  EXPECT_LE(tokenizer.encode(verse, false).size(), 14u);
}

TEST(Tokenizer, RoundTripsNonAsciiThroughByteFallback) {
  for (const auto* model : {&builtin_file(), &tiny_file()}) {
    const Tokenizer tokenizer(*model, "model");
    for (const auto& text : kNonAscii) {
      const auto ids = tokenizer.encode(text, true);
      EXPECT_EQ(tokenizer.decode(ids), text);
      for (int32_t id : ids) EXPECT_NE(id, tokenizer.unk()) << "in " << text;
    }
  }
}

TEST(Tokenizer, SpellsAnEmojiAsItsFourBytes) {
  const Tokenizer tokenizer(builtin_file(), "builtin");
  const auto ids = tokenizer.encode("\xF0\x9F\x98\x80", false);
  ASSERT_EQ(ids.size(), 5u);  // the dummy-prefix space, then one piece per byte
  EXPECT_EQ(tokenizer.token_bytes(ids[0], -1), "");
  std::string bytes;
  for (size_t i = 1; i < ids.size(); ++i) {
    const std::string piece = tokenizer.token_bytes(ids[i], ids[i - 1]);
    EXPECT_EQ(piece.size(), 1u);
    bytes += piece;
  }
  EXPECT_EQ(bytes, "\xF0\x9F\x98\x80");
}

TEST(Tokenizer, AddsBosOnlyWhenAsked) {
  const Tokenizer tokenizer(builtin_file(), "builtin");
  const auto plain = tokenizer.encode("Let there be light", false);
  const auto with_bos = tokenizer.encode("Let there be light", true);
  ASSERT_FALSE(plain.empty());
  EXPECT_NE(plain.front(), tokenizer.bos());
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos.front(), tokenizer.bos());
  EXPECT_EQ(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()), plain);
  EXPECT_EQ(tokenizer.encode("", true), std::vector<int32_t>{tokenizer.bos()});
  EXPECT_TRUE(tokenizer.encode("", false).empty());
}

TEST(Tokenizer, SpecialTokensDecodeToNothing) {
  const Tokenizer tokenizer(builtin_file(), "builtin");
  auto ids = tokenizer.encode("Amen.", true);
  ids.push_back(tokenizer.eos());
  EXPECT_EQ(tokenizer.decode(ids), "Amen.");
  EXPECT_EQ(tokenizer.decode({tokenizer.bos(), tokenizer.eos()}), "");
  EXPECT_EQ(tokenizer.decode({}), "");
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const Tokenizer tokenizer(builtin_file(), "builtin");
  std::string message;
  EXPECT_EQ(status_of([&] { tokenizer.decode({1, 50, 4096}); }, &message), PHOTON_ERR_BAD_TOKEN);
  EXPECT_NE(message.find("4096"), std::string::npos) << message;
  EXPECT_NE(message.find("position 2"), std::string::npos) << message;
  EXPECT_EQ(status_of([&] { tokenizer.decode({-1}); }, &message), PHOTON_ERR_BAD_TOKEN);
  EXPECT_NE(message.find("-1"), std::string::npos) << message;
  EXPECT_EQ(status_of([&] { tokenizer.decode({4095}); }), PHOTON_OK);
}

TEST(TokenBytes, SpellsEachKindOfPiece) {
  const Tokenizer tokenizer(builtin_file(), "builtin");
  const auto reference = reference_processor(builtin_file());
  const int32_t the = reference->PieceToId("\xE2\x96\x81the");
  const int32_t comma = reference->PieceToId(",");
  ASSERT_NE(the, tokenizer.unk());
  ASSERT_NE(comma, tokenizer.unk());
  EXPECT_EQ(tokenizer.token_bytes(the, -1), "the");
  EXPECT_EQ(tokenizer.token_bytes(the, comma), " the");
  EXPECT_FALSE(tokenizer.is_text_token(tokenizer.bos()));
  EXPECT_FALSE(tokenizer.is_text_token(tokenizer.eos()));
  EXPECT_TRUE(tokenizer.is_text_token(the));
  EXPECT_EQ(tokenizer.token_bytes(reference->PieceToId("<0x41>"), -1), "A");
  EXPECT_EQ(tokenizer.token_bytes(reference->PieceToId("<0x00>"), comma), std::string(1, '\0'));
  EXPECT_EQ(tokenizer.token_bytes(tokenizer.bos(), comma), "");
  EXPECT_EQ(tokenizer.token_bytes(tokenizer.eos(), comma), "");
  EXPECT_EQ(tokenizer.token_bytes(tokenizer.unk(), -1), " \xE2\x81\x87 ");
  EXPECT_EQ(status_of([&] { tokenizer.token_bytes(4096, -1); }), PHOTON_ERR_BAD_TOKEN);
  EXPECT_EQ(status_of([&] { tokenizer.token_bytes(the, 4096); }), PHOTON_ERR_BAD_TOKEN);
}

TEST(TokenBytes, AddUpToDecodeIdsOnRealText) {
  for (const auto* model : {&builtin_file(), &tiny_file()}) {
    const Tokenizer tokenizer(*model, "model");
    const auto reference = reference_processor(*model);
    std::vector<std::string> texts = kEnglish;
    texts.insert(texts.end(), kNonAscii.begin(), kNonAscii.end());
    for (const auto& text : texts) {
      const auto ids = tokenizer.encode(text, true);
      const std::string concatenated = concatenated_token_bytes(tokenizer, reference, ids);
      EXPECT_EQ(concatenated, reference->DecodeIds(ids));
      EXPECT_EQ(concatenated, text);
      const auto pieces = stream_pieces(tokenizer, reference, ids);
      for (const auto& piece : pieces) EXPECT_TRUE(is_valid_utf8(piece)) << "in " << text;
      EXPECT_EQ(joined(pieces), text);
    }
  }
}

// A random token: any non-control piece, where a byte piece becomes the byte pieces of a whole
// random character so the sequence stays valid UTF-8.
void append_random_token(const Reference& reference, std::mt19937& rng, std::vector<int32_t>& ids) {
  std::uniform_int_distribution<int32_t> any_id(0, reference->GetPieceSize() - 1);
  int32_t id = any_id(rng);
  while (reference->IsControl(id)) id = any_id(rng);
  if (!reference->IsByte(id)) {
    ids.push_back(id);
    return;
  }
  const uint32_t ranges[][2] = {
      {0x00, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
  const auto& range = ranges[std::uniform_int_distribution<int>(0, 4)(rng)];
  const uint32_t cp = std::uniform_int_distribution<uint32_t>(range[0], range[1])(rng);
  std::vector<unsigned> bytes;
  if (cp < 0x80) {
    bytes = {cp};
  } else if (cp < 0x800) {
    bytes = {0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)};
  } else if (cp < 0x10000) {
    bytes = {0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)};
  } else {
    bytes = {0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F), 0x80 | ((cp >> 6) & 0x3F),
             0x80 | (cp & 0x3F)};
  }
  for (unsigned byte : bytes) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    ids.push_back(reference->PieceToId(name));
  }
}

TEST(TokenBytes, AddUpToDecodeIdsOnRandomSequencesAfterBos) {
  std::mt19937 rng(7);
  for (const auto* model : {&builtin_file(), &tiny_file()}) {
    const Tokenizer tokenizer(*model, "model");
    const auto reference = reference_processor(*model);
    for (int sequence = 0; sequence < 500; ++sequence) {
      std::vector<int32_t> ids = {tokenizer.bos()};
      const int length = std::uniform_int_distribution<int>(1, 40)(rng);
      while (static_cast<int>(ids.size()) <= length) append_random_token(reference, rng, ids);
      const std::string concatenated = concatenated_token_bytes(tokenizer, reference, ids);
      ASSERT_EQ(concatenated, reference->DecodeIds(ids)) << "sequence " << sequence;
      ASSERT_EQ(tokenizer.decode(ids), concatenated);
      const auto pieces = stream_pieces(tokenizer, reference, ids);
      for (const auto& piece : pieces) ASSERT_TRUE(is_valid_utf8(piece));
      ASSERT_EQ(joined(pieces), concatenated);
    }
  }
}

TEST(TokenBytes, AddUpToDecodeWithSpecialAndUnusedTokensAnywhere) {
  std::mt19937 rng(11);
  const std::string padded = pad_tokenizer_model(tiny_file(), 512, "tiny.model");
  const Tokenizer tokenizer(padded, "padded");
  const auto reference = reference_processor(padded);
  std::uniform_int_distribution<int32_t> special(0, 4);
  for (int sequence = 0; sequence < 500; ++sequence) {
    std::vector<int32_t> ids;
    const int length = std::uniform_int_distribution<int>(1, 40)(rng);
    while (static_cast<int>(ids.size()) < length) {
      switch (special(rng)) {
        case 0: ids.push_back(tokenizer.bos()); break;
        case 1: ids.push_back(tokenizer.eos()); break;
        case 2: ids.push_back(std::uniform_int_distribution<int32_t>(320, 511)(rng)); break;
        default: append_random_token(reference, rng, ids);
      }
    }
    const std::string expected = reference_decode(reference, ids);
    ASSERT_EQ(tokenizer.decode(ids), expected) << "sequence " << sequence;
    ASSERT_EQ(concatenated_token_bytes(tokenizer, reference, ids), expected);
    ASSERT_EQ(joined(stream_pieces(tokenizer, reference, ids)), expected);
  }
}

TEST(TokenBytes, InvalidBytesStreamAndDecodeAsReplacementCharacters) {
  std::mt19937 rng(3);
  const Tokenizer tokenizer(builtin_file(), "builtin");
  const auto reference = reference_processor(builtin_file());
  std::uniform_int_distribution<int32_t> any_id(3, reference->GetPieceSize() - 1);
  std::uniform_int_distribution<int> byte_value(0, 255);
  for (int sequence = 0; sequence < 500; ++sequence) {
    std::vector<int32_t> ids = {tokenizer.bos()};
    for (int i = 0; i < 30; ++i) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", byte_value(rng));
      ids.push_back(i % 4 == 3 ? any_id(rng) : reference->PieceToId(name));
    }
    const std::string raw = concatenated_token_bytes(tokenizer, reference, ids);
    ASSERT_EQ(tokenizer.decode(ids), replace_invalid_utf8(raw)) << "sequence " << sequence;
    ASSERT_EQ(reference->DecodeIds(ids), replace_invalid_utf8(raw));
    ASSERT_EQ(joined(stream_pieces(tokenizer, reference, ids)), replace_invalid_utf8(raw));
  }
}

TEST(Utf8Stream, HoldsBackASplitCharacterUntilItIsWhole) {
  const std::string emoji = "\xF0\x9F\x98\x80";
  for (size_t split = 1; split < emoji.size(); ++split) {
    Utf8Stream stream;
    EXPECT_EQ(stream.push("a" + emoji.substr(0, split)), "a") << "split " << split;
    EXPECT_EQ(stream.push(emoji.substr(split) + "b"), emoji + "b") << "split " << split;
    EXPECT_EQ(stream.flush(), "");
  }
  Utf8Stream stream;
  for (size_t i = 0; i + 1 < emoji.size(); ++i) EXPECT_EQ(stream.push(emoji.substr(i, 1)), "");
  EXPECT_EQ(stream.push(emoji.substr(3)), emoji);
  EXPECT_EQ(stream.push("\xCE"), "");  // Greek alpha, 2 bytes
  EXPECT_EQ(stream.push("\xB1"), "\xCE\xB1");
  EXPECT_EQ(stream.push(""), "");
}

TEST(Utf8Stream, ReplacesInvalidBytesOnceTheyCannotBecomeValid) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD, one per byte that starts no character
  Utf8Stream stream;
  EXPECT_EQ(stream.push("\x80"), r);          // a stray continuation byte
  EXPECT_EQ(stream.push("\xFFx"), r + "x");   // never valid in UTF-8
  EXPECT_EQ(stream.push("\xC0\xAF"), r + r);  // overlong '/'
  // Wrong from their second byte on, so none of these is held back.
  EXPECT_EQ(stream.push("\xED\xA0"), r + r);     // a UTF-16 surrogate
  EXPECT_EQ(stream.push("\xE0\x9F"), r + r);     // an overlong 3-byte form
  EXPECT_EQ(stream.push("\xF0\x8F"), r + r);     // an overlong 4-byte form
  EXPECT_EQ(stream.push("\xF4\x90"), r + r);     // above U+10FFFF
  EXPECT_EQ(stream.push("\xF0\x9F\x98"), "");    // could still become an emoji...
  EXPECT_EQ(stream.push("z"), r + r + r + "z");  // ...but did not
  EXPECT_EQ(stream.push("\xE2\x82"), "");
  EXPECT_EQ(stream.push("\xE2\x82\xAC"), r + r + "\xE2\x82\xAC");  // cut short, then a whole euro
  EXPECT_EQ(stream.push("\xE4"), "");
  EXPECT_EQ(stream.flush(), r);  // the end of the stream releases what is held back
  EXPECT_EQ(stream.flush(), "");
}

// Hand-encoded ModelProto.pieces record, to build a model whose piece names collide with padding.
std::string piece_record(const std::string& name, uint8_t type) {
  std::string piece = "\x0A" + std::string(1, static_cast<char>(name.size())) + name;
  piece += std::string("\x15\0\0\0\0\x18", 6) + std::string(1, static_cast<char>(type));
  return "\x0A" + std::string(1, static_cast<char>(piece.size())) + piece;
}

TEST(PadTokenizerModel, GivesExactlyVocabSizePiecesAndKeepsTheOriginalIds) {
  const std::string padded = pad_tokenizer_model(tiny_file(), 512, "tiny.model");
  const auto original = reference_processor(tiny_file());
  const auto reference = reference_processor(padded);
  ASSERT_EQ(reference->GetPieceSize(), 512);
  EXPECT_EQ(Tokenizer(padded, "padded").vocab_size(), 512);
  for (int id = 0; id < 320; ++id) {
    EXPECT_EQ(reference->IdToPiece(id), original->IdToPiece(id));
    EXPECT_EQ(reference->GetScore(id), original->GetScore(id));
    EXPECT_EQ(reference->IsByte(id), original->IsByte(id));
    EXPECT_EQ(reference->IsControl(id), original->IsControl(id));
  }
  for (int id = 320; id < 512; ++id) {
    EXPECT_TRUE(reference->IsUnused(id)) << id;
    EXPECT_EQ(reference->IdToPiece(id), "<unused_" + std::to_string(id) + ">");
  }
  EXPECT_EQ(reference->unk_id(), original->unk_id());
  EXPECT_EQ(reference->bos_id(), original->bos_id());
  EXPECT_EQ(reference->eos_id(), original->eos_id());
}

TEST(PadTokenizerModel, TextNeverProducesAPaddedId) {
  const Tokenizer original(tiny_file(), "tiny.model");
  const Tokenizer padded(pad_tokenizer_model(tiny_file(), 512, "tiny.model"), "padded");
  std::vector<std::string> texts = kEnglish;
  texts.insert(texts.end(), kNonAscii.begin(), kNonAscii.end());
  texts.push_back("<unused_320> <unused_400><unused_511>");  // the padded pieces' own names
  for (const auto& text : texts) {
    const auto ids = padded.encode(text, true);
    EXPECT_EQ(ids, original.encode(text, true)) << text;
    for (int32_t id : ids) EXPECT_LT(id, 320) << text;
    EXPECT_EQ(padded.decode(ids), text);
  }
  EXPECT_EQ(padded.decode({1, 320, 400, 511, 2}), "");
}

TEST(PadTokenizerModel, LeavesAFullModelUnchangedAndRefusesASmallerTarget) {
  EXPECT_EQ(pad_tokenizer_model(tiny_file(), 320, "tiny.model"), tiny_file());
  std::string message;
  EXPECT_EQ(status_of([&] { pad_tokenizer_model(tiny_file(), 319, "tiny.model"); }, &message),
            PHOTON_ERR_TOKENIZER);
  EXPECT_NE(message.find("tiny.model"), std::string::npos) << message;
  EXPECT_NE(message.find("320"), std::string::npos) << message;
  EXPECT_EQ(Tokenizer(pad_tokenizer_model(builtin_file(), 32000, "builtin"), "b").vocab_size(),
            32000);
}

TEST(PadTokenizerModel, AvoidsNamesTheModelAlreadyHas) {
  constexpr uint8_t kUserDefined = 4;
  const std::string crowded = tiny_file() + piece_record("<unused_400>", kUserDefined);
  ASSERT_EQ(reference_processor(crowded)->GetPieceSize(), 321);
  const std::string padded = pad_tokenizer_model(crowded, 512, "crowded");
  const auto reference = reference_processor(padded);
  ASSERT_EQ(reference->GetPieceSize(), 512);
  EXPECT_EQ(reference->PieceToId("<unused_400>"), 320);
  EXPECT_TRUE(reference->IsUnused(400));
  EXPECT_NE(reference->IdToPiece(400), "<unused_400>");
}

TEST(Tokenizer, RejectsADamagedModel) {
  std::string flipped = builtin_file();
  flipped[0] = '\xFF';  // no longer a protobuf field tag
  const std::vector<std::string> damaged = {builtin_file().substr(0, builtin_file().size() / 2),
                                            flipped, "", "not a model at all"};
  for (const auto& bytes : damaged) {
    std::string message;
    EXPECT_EQ(status_of([&] { Tokenizer(bytes, "damaged.model"); }, &message),
              PHOTON_ERR_TOKENIZER);
    EXPECT_NE(message.find("damaged.model"), std::string::npos) << message;
    EXPECT_EQ(status_of([&] { pad_tokenizer_model(bytes, 512, "damaged.model"); }),
              PHOTON_ERR_TOKENIZER);
  }
}

}  // namespace
}  // namespace photon
