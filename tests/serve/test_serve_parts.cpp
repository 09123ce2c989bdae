// The parts of photon serve that need no model or network, against values worked out by hand:
// stop-string holdback, chat templates, request checks, JSON text, and the directory store.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/api_error.h"
#include "serve/chat_template.h"
#include "serve/conversation_store.h"
#include "serve/json_text.h"
#include "serve/request.h"
#include "serve/text_stream.h"

namespace photon::serve {
namespace {

// ---- TextStream ----

std::string feed(TextStream& s, const std::vector<std::string>& pieces) {
  std::string sent;
  for (const std::string& p : pieces) sent += s.append(p);
  return sent;
}

TEST(ServeTextStream, WithoutStopsEverythingGoesOutAtOnce) {
  TextStream s({});
  EXPECT_EQ(s.append("Hello"), "Hello");
  EXPECT_EQ(s.append(", world"), ", world");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.sent(), 12u);
}

TEST(ServeTextStream, HoldsBackWhatMayStartAStopString) {
  TextStream s({"\nUser:"});
  EXPECT_EQ(s.append("Amen"), "Amen");
  EXPECT_EQ(s.append(".\n"), ".");        // "\n" may begin "\nUser:"
  EXPECT_EQ(s.append("Us"), "");          // "\nUs" still may
  EXPECT_EQ(s.append("ing"), "\nUsing");  // "\nUsi" cannot: all of it goes
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.generated(), "Amen.\nUsing");
}

TEST(ServeTextStream, CutsAtTheFirstStopStringAndSendsNothingAfter) {
  TextStream s({"\nUser:", "END"});
  const std::string sent = feed(s, {"And God said", "\nUs", "er: more", " text"});
  EXPECT_EQ(sent, "And God said");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.generated(), "And God said\nUser: more text");
  EXPECT_EQ(s.sent(), 12u);
}

TEST(ServeTextStream, StopStringInsideOnePiece) {
  TextStream s({"END"});
  EXPECT_EQ(s.append("abcENDdef"), "abc");
  EXPECT_EQ(s.finish(), "");
}

TEST(ServeTextStream, FinishReleasesAHeldPrefixThatNeverCompleted) {
  TextStream s({"\nUser:"});
  EXPECT_EQ(s.append("last line\nUse"), "last line");
  EXPECT_EQ(s.finish(), "\nUse");
}

TEST(ServeTextStream, TheEarliestOfTwoOverlappingStopsWins) {
  TextStream s({"bc", "abcd"});
  EXPECT_EQ(s.append("xab"), "x");  // "ab" may begin "abcd", "b" may begin "bc"
  EXPECT_EQ(s.append("c"), "a");    // "bc" is whole at offset 2, before "abcd" could be
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.sent(), 2u);
}

// ---- ChatTemplate ----

TEST(ServeChatTemplate, TranscriptRendersRolesAndTheReplyPrefix) {
  const ChatTemplate t = ChatTemplate::transcript();
  EXPECT_TRUE(t.bos);
  const std::string text = t.render(
      {{"system", "Be brief."}, {"user", "Who?"}, {"assistant", " Moses."}, {"user", "Where?"}});
  EXPECT_EQ(text, "Be brief.\n\nUser: Who?\nAssistant: Moses.\nUser: Where?\nAssistant:");
  ASSERT_EQ(t.stop.size(), 1u);
  EXPECT_EQ(t.stop[0], "\nUser:");
}

TEST(ServeChatTemplate, TheNextTurnStartsWithThisTurnAndItsReply) {
  const ChatTemplate t = ChatTemplate::transcript();
  const std::string first = t.render({{"user", "Who?"}});
  const std::string second =
      t.render({{"user", "Who?"}, {"assistant", " Moses."}, {"user", "Where?"}});
  EXPECT_EQ(second.compare(0, first.size() + 7, first + " Moses."), 0);
}

TEST(ServeChatTemplate, ParsesItsFormatAndRefusesMistakes) {
  const ChatTemplate t = ChatTemplate::parse(
      R"({"bos": false, "begin": "<s>", "roles": {"user": {"prefix": "[U]", "suffix": "[/U]"},
          "assistant": {"prefix": "[A]"}}, "stop": ["[U]"]})");
  EXPECT_FALSE(t.bos);
  EXPECT_EQ(t.render({{"user", "hi"}}), "<s>[U]hi[/U][A]");
  try {
    t.render({{"system", "x"}});
    FAIL() << "a role the template lacks must be refused";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "messages[0].role");
  }
  for (const char* bad : {"[]", "{\"roles\": {}}", "{\"roles\": {\"user\": {}}}",
                          "{\"roles\": {\"assistant\": {}}, \"extra\": 1}",
                          "{\"roles\": {\"assistant\": {\"prefix\": 3}}}",
                          "{\"roles\": {\"robot\": {}, \"assistant\": {}}}",
                          "{\"roles\": {\"assistant\": {}}, \"stop\": [\"\"]}"}) {
    EXPECT_THROW(ChatTemplate::parse(bad), std::invalid_argument) << bad;
  }
}

// ---- request parsing ----

ApiError refusal(Endpoint e, const std::string& body) {
  try {
    parse_generation_request(e, body);
  } catch (const ApiError& error) {
    return error;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

TEST(ServeRequest, ReadsEveryFieldOfACompletion) {
  const GenerationRequest r = parse_generation_request(
      Endpoint::Completions,
      R"({"model": "m", "prompt": "In the beginning", "max_tokens": 7, "temperature": 0.5,
          "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42, "stop": ["a", "b"],
          "stream": true, "stream_options": {"include_usage": true}, "logprobs": 4,
          "repetition_penalty": 1.1, "ignore_eos": true, "return_token_ids": true,
          "user": "someone", "n": 1, "presence_penalty": -0.5, "frequency_penalty": 1.5,
          "repeat_last_n": -1, "logit_bias": {"0": -100, "42": 2.5}})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "In the beginning");
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs && r.return_token_ids);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 1.5f);
  EXPECT_EQ(r.sampling.repeat_last_n, -1);
  const std::vector<std::pair<int32_t, float>> bias = {{0, -100.0f}, {42, 2.5f}};
  EXPECT_EQ(r.sampling.logit_bias, bias);
}

TEST(ServeRequest, ChoicesUpToSixteen) {
  EXPECT_EQ(parse_generation_request(Endpoint::Completions, R"({"model":"m","prompt":"x"})").n, 1);
  EXPECT_EQ(
      parse_generation_request(Endpoint::Completions, R"({"model":"m","prompt":"x","n":16})").n,
      16);
  EXPECT_EQ(parse_generation_request(Endpoint::Completions,
                                     R"({"model":"m","prompt":"x","n":3,"best_of":3})")
                .n,
            3);
  EXPECT_EQ(parse_generation_request(Endpoint::ChatCompletions,
                                     R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
                                     R"("n":2})")
                .n,
            2);
}

// One prompt (text or token ids) or an array of them, each its own.
std::vector<PromptInput> prompts(const std::string& prompt) {
  return parse_generation_request(Endpoint::Completions, R"({"model":"m","prompt":)" + prompt + "}")
      .prompts;
}
bool same(const std::vector<PromptInput>& got, const std::vector<PromptInput>& expected) {
  if (got.size() != expected.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].text != expected[i].text || got[i].tokens != expected[i].tokens) return false;
  return true;
}

TEST(ServeRequest, PromptsAsTextTokensOrAnArrayOfThem) {
  EXPECT_TRUE(same(prompts("\"x\""), {{"x", {}}}));
  EXPECT_TRUE(same(prompts("[1,5,9]"), {{std::nullopt, {1, 5, 9}}}));
  EXPECT_TRUE(same(prompts("[[1,5]]"), {{std::nullopt, {1, 5}}}));
  EXPECT_TRUE(same(prompts(R"(["x"])"), {{"x", {}}}));
  EXPECT_TRUE(same(prompts(R"(["x","y",[1,2]])"), {{"x", {}}, {"y", {}}, {std::nullopt, {1, 2}}}));
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m","prompt":[]})").param(), "prompt");
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m","prompt":[1,-2]})").param(), "prompt");
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m","prompt":[1,2.5]})").param(), "prompt");
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m","prompt":["x",[]]})").param(),
            "prompt[1]");
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m","prompt":["x",7]})").param(),
            "prompt[1]");
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m"})").param(), "prompt");
}

TEST(ServeRequest, AtMostSixtyFourChoicesOverAllPrompts) {
  std::string many = "[";
  for (int i = 0; i < kMaxRequestChoices; ++i) many += i ? ",\"x\"" : "\"x\"";
  EXPECT_EQ(prompts(many + "]").size(), static_cast<size_t>(kMaxRequestChoices));
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m","prompt":)" + many + ",\"x\"]}").param(),
            "prompt");
  const ApiError e =
      refusal(Endpoint::Completions, R"({"model":"m","prompt":["a","b","c","d","e"],"n":16})");
  EXPECT_EQ(e.param(), "n");
  EXPECT_NE(std::string(e.what()).find("at most 64 choices per request"), std::string::npos)
      << e.what();
}

TEST(ServeRequest, EchoIsForCompletions) {
  EXPECT_TRUE(
      parse_generation_request(Endpoint::Completions, R"({"model":"m","prompt":"x","echo":true})")
          .echo);
  EXPECT_EQ(refusal(Endpoint::Completions, R"({"model":"m","prompt":"x","echo":1})").param(),
            "echo");
  EXPECT_FALSE(parse_generation_request(Endpoint::ChatCompletions,
                                        R"({"model":"m","messages":[{"role":"user","content":)"
                                        R"("x"}],"echo":true})")
                   .echo);
}

TEST(ServeRequest, ChatMessages) {
  const GenerationRequest r = parse_generation_request(
      Endpoint::ChatCompletions,
      R"({"model":"m","messages":[{"role":"developer","content":"Be brief."},
          {"role":"user","content":[{"type":"text","text":"Who"},{"type":"text","text":"?"}]}],
          "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 20})");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Who?");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  for (const char* alternatives : {R"("logprobs":true,"top_logprobs":21)", R"("top_logprobs":2)",
                                   R"("logprobs":false,"top_logprobs":1)"})
    EXPECT_EQ(refusal(Endpoint::ChatCompletions,
                      std::string(R"({"model":"m","messages":[{"role":"user","content":"x"}],)") +
                          alternatives + "}")
                  .param(),
              "top_logprobs")
        << alternatives;
  EXPECT_EQ(refusal(Endpoint::ChatCompletions, R"({"model":"m","messages":[]})").param(),
            "messages");
  EXPECT_EQ(refusal(Endpoint::ChatCompletions,
                    R"({"model":"m","messages":[{"role":"tool","content":"x"}]})")
                .param(),
            "messages[0].role");
  EXPECT_EQ(
      refusal(Endpoint::ChatCompletions,
              R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})")
          .param(),
      "messages[0].content");
  EXPECT_EQ(refusal(Endpoint::ChatCompletions,
                    R"({"model":"m","messages":[{"role":"user","content":"x"}],
                        "max_tokens":3,"max_completion_tokens":4})")
                .param(),
            "max_completion_tokens");
}

TEST(ServeRequest, WrongTypesAndRangesNameTheField) {
  const std::string base = R"({"model":"m","prompt":"x",)";
  const struct {
    std::string field;
    const char* param;
  } cases[] = {
      {R"("max_tokens":"16")", "max_tokens"},
      {R"("max_tokens":-1)", "max_tokens"},
      {R"("max_tokens":1.5)", "max_tokens"},
      {R"("temperature":"hot")", "temperature"},
      {R"("temperature":2.5)", "temperature"},
      {R"("top_p":0)", "top_p"},
      {R"("min_p":1)", "min_p"},
      {R"("top_k":-2)", "top_k"},
      {R"("seed":"1")", "seed"},
      {R"("stop":5)", "stop"},
      {R"("stop":["a","b","c","d","e"])", "stop"},
      {R"("stop":[""])", "stop"},
      {"\"stop\":\"" + std::string(4097, 'x') + "\"", "stop"},
      {R"("stream":"yes")", "stream"},
      {R"("stream_options":{"include_usage":true})", "stream_options"},
      {R"("logprobs":21)", "logprobs"},
      {R"("logprobs":-1)", "logprobs"},
      {R"("n":0)", "n"},
      {R"("n":17)", "n"},
      {R"("n":1.5)", "n"},
      {R"("best_of":3)", "best_of"},
      {R"("n":2,"best_of":3)", "best_of"},
      {R"("echo":"yes")", "echo"},
      {R"("suffix":"end")", "suffix"},
      {R"("tools":[{"type":"function"}])", "tools"},
      {R"("tool_choice":"auto")", "tool_choice"},
      {R"("logit_bias":[5])", "logit_bias"},
      {R"("logit_bias":{"x":5})", "logit_bias"},
      {R"("logit_bias":{"-1":5})", "logit_bias"},
      {R"("logit_bias":{"01":5})", "logit_bias"},
      {R"("logit_bias":{"4294967296":5})", "logit_bias"},
      {R"("logit_bias":{"1":101})", "logit_bias"},
      {R"("logit_bias":{"1":"5"})", "logit_bias"},
      {R"("presence_penalty":2.5)", "presence_penalty"},
      {R"("frequency_penalty":-3)", "frequency_penalty"},
      {R"("frequency_penalty":"high")", "frequency_penalty"},
      {R"("repeat_last_n":-2)", "repeat_last_n"},
      {R"("repeat_last_n":1.5)", "repeat_last_n"},
      {R"("response_format":{"type":"json_object"})", "response_format"},
      {R"("repetition_penalty":0.5)", "repetition_penalty"},
      {R"("model":5)", "model"},
  };
  for (const auto& c : cases) {
    const ApiError e = refusal(Endpoint::Completions, base + c.field + "}");
    EXPECT_EQ(e.status(), 400) << c.field;
    EXPECT_EQ(e.param(), c.param) << c.field;
    EXPECT_NE(std::string(e.what()).find(c.param), std::string::npos) << e.what();
  }
}

TEST(ServeRequest, BodiesThatAreNotJsonObjects) {
  for (const char* body : {"", "{", "[1,2]", "\"text\"", "{\"model\":\"m\",}", "nul"}) {
    const ApiError e = refusal(Endpoint::Completions, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), "") << body;
  }
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(std::string(refusal(Endpoint::Completions, deep).what()).find("deeper"),
            std::string::npos);
}

TEST(ServeRequest, ErrorBodyHasOpenAIsShape) {
  const auto body = nlohmann::json::parse(bad_field("top_p", "too high", "c").body());
  EXPECT_EQ(body["error"]["message"], "too high");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "top_p");
  EXPECT_EQ(body["error"]["code"], "c");
  const auto bare = nlohmann::json::parse(ApiError(500, "x", "server_error").body());
  EXPECT_TRUE(bare["error"]["param"].is_null());
  EXPECT_TRUE(bare["error"]["code"].is_null());
}

// ---- JSON text ----

TEST(ServeJsonText, EscapesAndReplacesInvalidBytes) {
  std::string out;
  append_json_string(out, "a\"b\\c\n\x01\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\n\\u0001\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"");
  out.clear();
  // A lone continuation byte, a truncated sequence, an overlong form and a surrogate.
  append_json_string(out, std::string("\x80"
                                      "x"
                                      "\xE2\x82"
                                      "\xC0\xAF"
                                      "\xED\xA0\x80",
                                      9));
  EXPECT_EQ(nlohmann::json::parse(out),
            "\xEF\xBF\xBDx\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  out.clear();
  append_json_number(out, std::nan(""));
  EXPECT_EQ(out, "null");
}

// ---- the directory store ----

class ServeDirectoryStore : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/photon-store-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static Conversation conversation(size_t state_bytes, uint8_t fill) {
    Conversation c;
    c.has_text = true;
    c.text = "In the beginning";
    c.tokens = {1, 2, 3};
    c.state.assign(state_bytes, fill);
    return c;
  }

  std::string dir_;
};

TEST_F(ServeDirectoryStore, SavesLoadsAndComparesVersions) {
  auto store = open_store(dir_, 1 << 20);
  EXPECT_FALSE(store->load("a").has_value());
  using R = ConversationStore::SaveResult;
  EXPECT_EQ(store->save("a", 0, conversation(100, 7)), R::Saved);
  EXPECT_EQ(store->save("a", 0, conversation(100, 8)), R::Conflict);
  EXPECT_EQ(store->save("a", 1, conversation(50, 9)), R::Saved);
  auto loaded = store->load("a");
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->version, 2u);
  EXPECT_TRUE(loaded->has_text);
  EXPECT_EQ(loaded->text, "In the beginning");
  EXPECT_EQ(loaded->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(loaded->state, std::vector<uint8_t>(50, 9));
  // A new store over the same directory finds it, with its version.
  auto again = open_store(dir_, 1 << 20);
  EXPECT_EQ(again->stored_count(), 1u);
  EXPECT_EQ(again->save("a", 1, conversation(10, 1)), R::Conflict);
  EXPECT_EQ(again->load("a")->version, 2u);
}

TEST_F(ServeDirectoryStore, EvictsTheOldestOverTheCap) {
  // Each file: 8 magic + 8 version + 4 flags + 8 + 16 text + 8 + 12 tokens + 8 + state + 8.
  const uint64_t overhead = 8 + 8 + 4 + 8 + 16 + 8 + 12 + 8 + 8;
  auto store = open_store(dir_, 3 * (overhead + 1000));
  using R = ConversationStore::SaveResult;
  for (const char* id : {"one", "two", "three"})
    EXPECT_EQ(store->save(id, 0, conversation(1000, 1)), R::Saved);
  EXPECT_EQ(store->stored_bytes(), 3 * (overhead + 1000));
  EXPECT_EQ(store->save("one", 1, conversation(1000, 2)), R::Saved);  // "one" is now the newest
  EXPECT_EQ(store->save("four", 0, conversation(1000, 3)), R::Saved);
  EXPECT_FALSE(store->load("two").has_value());
  EXPECT_TRUE(store->load("one").has_value());
  EXPECT_EQ(store->evicted_count(), 1u);
  EXPECT_EQ(store->save("huge", 0, conversation(4000, 4)), R::TooLarge);
  struct stat st = {};
  EXPECT_NE(::stat((dir_ + "/two.conv").c_str(), &st), 0);
}

// A damaged file is refused: only its version is known, so that the turn that reads its prompt
// whole can save over it.
TEST_F(ServeDirectoryStore, ADamagedFileIsRefused) {
  auto store = open_store(dir_, 1 << 20);
  ASSERT_EQ(store->save("a", 0, conversation(100, 7)), ConversationStore::SaveResult::Saved);
  {
    std::fstream f(dir_ + "/a.conv", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(60);
    f.put('\x55');
  }
  for (int damage = 0; damage < 2; ++damage) {
    if (damage == 1) ::truncate((dir_ + "/a.conv").c_str(), 30);
    const std::optional<Conversation> c = store->load("a");
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(c->refused);
    EXPECT_EQ(c->version, 1u);
    EXPECT_TRUE(c->tokens.empty() && c->state.empty() && !c->has_text);
  }
  EXPECT_EQ(store->save("a", 1, conversation(100, 8)), ConversationStore::SaveResult::Saved);
  EXPECT_FALSE(store->load("a")->refused);
}

TEST_F(ServeDirectoryStore, LeftoverTemporaryFilesAreRemoved) {
  std::ofstream(dir_ + "/.tmp-1-1-a") << "partial";
  auto store = open_store(dir_, 1 << 20);
  struct stat st = {};
  EXPECT_NE(::stat((dir_ + "/.tmp-1-1-a").c_str(), &st), 0);
  EXPECT_EQ(store->stored_count(), 0u);
}

TEST(ServeConversationId, OnlySafeNames) {
  for (const char* ok : {"a", "chat-42", "User_7.session", "x.y.z"})
    EXPECT_TRUE(valid_conversation_id(ok)) << ok;
  for (const char* bad :
       {"", ".hidden", "..", "a/b", "../etc", "a b", "a\\b", "caf\xC3\xA9", "a\nb"})
    EXPECT_FALSE(valid_conversation_id(bad)) << bad;
  EXPECT_TRUE(valid_conversation_id(std::string(128, 'a')));
  EXPECT_FALSE(valid_conversation_id(std::string(129, 'a')));
  EXPECT_THROW(open_store("memcached://localhost", 1), std::runtime_error);  // not a store
  EXPECT_THROW(open_store("redis://localhost:0", 1), std::runtime_error);    // a bad URL
}

}  // namespace
}  // namespace photon::serve
