#include "serve/completion.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "serve/api_error.h"
#include "serve/json_text.h"
#include "serve/text_stream.h"

namespace photon::serve {
namespace {

using nlohmann::ordered_json;

// 499: the client closed the connection before the reply (nginx's convention), for the metrics.
constexpr int kClientClosed = 499;
constexpr int32_t kCompletionsDefaultMaxTokens = 16;  // OpenAI's default for /v1/completions

const char* finish_reason(photon_stop_reason reason) {
  // EOS and stop strings end a reply where the model or the client meant it to; everything else
  // (max_tokens, a full context, a shutdown that stopped it) cut it short.
  return reason == PHOTON_STOP_EOS || reason == PHOTON_STOP_STRING ? "stop" : "length";
}

const char* route(Endpoint e) {
  return e == Endpoint::Completions ? "/v1/completions" : "/v1/chat/completions";
}

ApiError engine_error(photon_status status, const std::string& message, const char* prompt) {
  switch (status) {
    case PHOTON_ERR_BUSY:
      return ApiError(429, "the server is busy (" + message + ")", "rate_limit_error", "",
                      "queue_full");
    case PHOTON_ERR_BAD_TOKEN:
      return ApiError(400, message, "invalid_request_error", prompt, "invalid_token");
    case PHOTON_ERR_CONTEXT_FULL:
      return ApiError(400, message, "invalid_request_error", prompt, "context_length_exceeded");
    case PHOTON_ERR_OUT_OF_MEMORY:
      return ApiError(503, "the server has no memory for this request now (" + message + ")",
                      "server_error", "", "out_of_memory");
    default: return ApiError(500, message, "server_error");
  }
}

struct SessionOptions {
  photon_session_options* o = nullptr;
  ~SessionOptions() { photon_session_options_free(o); }
};
struct RequestOptions {
  photon_request_options* o = nullptr;
  ~RequestOptions() { photon_request_options_free(o); }
};

void require_ok(photon_status status, const char* what) {
  if (status != PHOTON_OK)
    throw ApiError(500, std::string(what) + ": " + photon_last_error(), "server_error");
}

class Completion;

// One of a token's most likely alternatives: the bytes it would have added, and its logprob.
struct Alternative {
  std::string piece;
  float logprob;
};

// Tells the completion which of its choices a generation's tokens and end belong to.
class ChoiceObserver final : public GenerationObserver {
 public:
  ChoiceObserver(std::shared_ptr<Completion> completion, size_t index)
      : completion_(std::move(completion)), index_(index) {}
  void on_tokens(std::vector<GeneratedToken>& tokens) override;
  void on_finished() override;

 private:
  std::shared_ptr<Completion> completion_;
  size_t index_;
};

// One request of the API: each of its prompts has `n` choices, each run as an engine request of
// its own, with the seeds seed, seed + 1, ... in the order of their index in the reply.
class Completion final : public std::enable_shared_from_this<Completion> {
  struct Prompt;
  struct Choice;

 public:
  Completion(ServerContext& context, Endpoint endpoint, HttpRequest request,
             std::shared_ptr<Exchange> exchange)
      : ctx_(context),
        endpoint_(endpoint),
        http_(std::move(request)),
        exchange_(std::move(exchange)),
        request_id_(ctx_.fresh_id()),
        created_(static_cast<int64_t>(std::time(nullptr))) {
    // The client's id when it is as plain as a conversation id (it is echoed in a header).
    if (const std::string* given = http_.header("x-request-id");
        given && valid_conversation_id(*given))
      request_id_ = *given;
  }

  void start() {
    try {
      parse();
      std::weak_ptr<Completion> weak = shared_from_this();
      exchange_->on_gone([weak] {
        if (auto self = weak.lock()) self->client_gone();
      });
      if (conversation_id_)
        load_conversation();
      else
        plan_and_submit(false);
    } catch (const ApiError& e) {
      fail(e);
    }
  }

  void on_tokens(size_t index, std::vector<GeneratedToken>& tokens) {
    Choice& c = choices_[index];
    const Prompt& prompt = prompts_[c.prompt];
    std::string out;
    for (GeneratedToken& t : tokens) {
      const size_t offset = prompt.echoed.size() + c.text.generated().size();
      const std::string_view text = c.text.append(t.piece);
      const int32_t previous = c.ids.empty() ? prompt.tokens.back() : c.ids.back();
      c.ids.push_back(t.id);
      if (req_.logprobs) {
        c.logprobs.push_back(t.logprob);
        c.offsets.push_back(offset);
        c.pieces.push_back(t.piece);
        std::vector<Alternative>& top = c.tops.emplace_back();
        for (const auto& [id, logprob] : t.top) top.push_back({token_piece(id, previous), logprob});
      }
      if (streaming_) append_token_chunk(out, c, t, offset, text);
    }
    if (!out.empty() && exchange_) exchange_->send(out);
  }

  void on_finished(size_t index) {
    Choice& c = choices_[index];
    c.ended = true;
    if (finished_) return;
    if (gone_) return done(kClientClosed);
    photon_request* r = c.generation->request();
    const photon_stop_reason reason = photon_request_stop_reason(r);
    if (reason == PHOTON_STOP_ERROR) {
      const photon_status status = photon_request_status(r);
      const std::string message = photon_request_error(r);
      // The stored state could not be continued (another model, damaged): read it all.
      if (resumed_ && c.ids.empty()) {
        state_refused(shared_from_this(), message.c_str());
        return plan_and_submit(false);
      }
      return fail(engine_error(status, message, prompt_param(c.prompt).c_str()));
    }
    if (reason == PHOTON_STOP_CANCELLED)
      return fail(
          ApiError(503, "the server is shutting down", "server_error", "", "shutting_down"));
    c.finish_reason = finish_reason(reason);
    c.rest = c.text.finish();
    // A conversation's last chunk waits until its turn is saved.
    if (streaming_ && !conversation_id_) send_finish_chunk(c);
    for (const Choice& other : choices_)
      if (!other.ended) return;
    if (conversation_id_)
      save_then_reply();
    else
      reply();
  }

 private:
  // The request's field that a prompt came from, for messages.
  std::string prompt_param(size_t prompt = 0) const {
    if (endpoint_ == Endpoint::ChatCompletions) return "messages";
    return prompts_.size() > 1 ? "prompt[" + std::to_string(prompt) + "]" : "prompt";
  }

  void parse() {
    if (http_.method != "POST")
      throw ApiError(405, std::string(route(endpoint_)) + " takes POST, not " + http_.method);
    req_ = parse_generation_request(endpoint_, http_.body);
    if (req_.model != ctx_.model.name)
      throw ApiError(404,
                     "the model '" + req_.model + "' is not served here; this server serves '" +
                         ctx_.model.name + "' (GET /v1/models)",
                     "invalid_request_error", "model", "model_not_found");
    if (const std::string* id = http_.header("x-conversation-id")) {
      if (!valid_conversation_id(*id))
        throw ApiError(400,
                       "X-Conversation-Id must be 1 to 128 characters of A-Z a-z 0-9 . _ - and "
                       "not start with '.'",
                       "invalid_request_error", "X-Conversation-Id", "invalid_conversation_id");
      if (!ctx_.store)
        throw ApiError(400,
                       "this server keeps no conversations (start it with --store DIR to use "
                       "X-Conversation-Id)",
                       "invalid_request_error", "X-Conversation-Id", "no_conversation_store");
      conversation_id_ = *id;
    }
    stops_ = req_.sampling.stop;
    if (endpoint_ == Endpoint::ChatCompletions) {
      prompts_.emplace_back().text = ctx_.model.chat.render(req_.messages);
      bos_ = ctx_.model.chat.bos;
      stops_.insert(stops_.end(), ctx_.model.chat.stop.begin(), ctx_.model.chat.stop.end());
    } else {
      for (PromptInput& given : req_.prompts) {
        Prompt& p = prompts_.emplace_back();
        p.text = std::move(given.text);
        p.tokens = std::move(given.tokens);
      }
    }
    if (conversation_id_) {
      if (req_.n > 1)
        throw bad_field("n",
                        "'n' must be 1 with X-Conversation-Id: a conversation continues one "
                        "choice");
      if (prompts_.size() > 1)
        throw bad_field("prompt", "'prompt' must be one prompt with X-Conversation-Id");
      if (req_.max_tokens == 0)
        throw bad_field("max_tokens",
                        "'max_tokens' must be at least 1 with X-Conversation-Id: a turn is "
                        "saved after the reply it generates");
    }
    seed_ = req_.sampling.seed ? *req_.sampling.seed : ctx_.random();
    const char* prefix = endpoint_ == Endpoint::Completions ? "cmpl-" : "chatcmpl-";
    const char* object =
        endpoint_ == Endpoint::Completions ? "text_completion" : "chat.completion.chunk";
    id_ = prefix + ctx_.fresh_id();
    head_base_ = "data: {\"id\":\"" + id_ + "\",\"object\":\"" + object +
                 "\",\"created\":" + std::to_string(created_) + ",\"model\":";
    append_json_string(head_base_, ctx_.model.name);
    for (size_t p = 0; p < prompts_.size(); ++p)
      for (int32_t i = 0; i < req_.n; ++i) {
        const std::string index = std::to_string(choices_.size());
        choices_.emplace_back(head_base_ + ",\"choices\":[{\"index\":" + index + ",", stops_, p);
      }
  }

  // A store that cannot be reached, or a record that cannot be read, is as good as no
  // conversation: the turn reads its whole prompt, never an error.
  void load_conversation() {
    auto loaded = std::make_shared<std::optional<Conversation>>();
    auto error = std::make_shared<std::string>();
    ConversationStore* store = ctx_.store;
    ctx_.offload->run(
        [store, id = *conversation_id_, loaded, error] {
          try {
            *loaded = store->load(id);
          } catch (const std::exception& e) {
            *error = e.what();
          }
        },
        [self = shared_from_this(), loaded, error] {
          if (self->gone_) return self->done(kClientClosed);
          const char* id = self->conversation_id_->c_str();
          if (!error->empty()) {
            ++self->ctx_.metrics.conversation_store_errors;
            std::fprintf(stderr,
                         "photon serve: warning: conversation %s not loaded, read whole: %s\n", id,
                         error->c_str());
          }
          self->conversation_ = std::move(*loaded);
          if (self->conversation_ && self->conversation_->refused) state_refused(self, "damaged");
          self->plan_and_submit(true);
        });
  }

  static void state_refused(const std::shared_ptr<Completion>& self, const char* why) {
    ++self->ctx_.metrics.conversation_states_refused;
    std::fprintf(stderr,
                 "photon serve: warning: conversation %s: the stored state is %s, read whole\n",
                 self->conversation_id_->c_str(), why);
  }

  // Tokenizes off the network thread (a long prompt takes a while), then submits on it.
  void plan_and_submit(bool use_conversation) {
    auto error = std::make_shared<std::optional<ApiError>>();
    auto self = shared_from_this();
    ctx_.offload->run(
        [self, error, use_conversation] {
          try {
            self->plan(use_conversation);
          } catch (const ApiError& e) {
            *error = e;
          }
        },
        [self, error] {
          if (self->gone_) return self->done(kClientClosed);
          if (*error) return self->fail(**error);
          try {
            self->submit();
          } catch (const ApiError& e) {
            self->fail(e);
          }
        });
  }

  std::vector<int32_t> tokenize(std::string_view text, bool bos) const {
    std::vector<int32_t> tokens(text.size() + 1);
    size_t n = 0;
    photon_status status = photon_model_tokenize(ctx_.model.model, text.data(), text.size(),
                                                 bos ? 1 : 0, tokens.data(), tokens.size(), &n);
    if (status == PHOTON_ERR_BUFFER_TOO_SMALL) {
      tokens.resize(n);
      status = photon_model_tokenize(ctx_.model.model, text.data(), text.size(), bos ? 1 : 0,
                                     tokens.data(), tokens.size(), &n);
    }
    require_ok(status, "cannot tokenize the prompt");
    tokens.resize(n);
    return tokens;
  }

  // Whether the stored conversation is where this prompt starts: its text for a text prompt, its
  // tokens for a prompt of token ids.
  bool continues(const Conversation& c) const {
    const Prompt& p = prompts_[0];
    if (p.text) return c.has_text && p.text->compare(0, c.text.size(), c.text) == 0;
    return !c.tokens.empty() && p.tokens.size() >= c.tokens.size() &&
           std::equal(c.tokens.begin(), c.tokens.end(), p.tokens.begin());
  }

  // What to submit: the stored state and the rest of the prompt, tokenized as `photon generate
  // --resume FILE -p REST` does (no BOS), or each whole prompt; with echo, what they echo.
  void plan(bool use_conversation) {
    resumed_ =
        use_conversation && conversation_ && !conversation_->refused && continues(*conversation_);
    if (resumed_) {
      const Conversation& c = *conversation_;
      Prompt& p = prompts_[0];
      if (p.text) {
        p.submit = tokenize(std::string_view(*p.text).substr(c.text.size()), false);
        p.tokens = c.tokens;
        p.tokens.insert(p.tokens.end(), p.submit.begin(), p.submit.end());
      } else {
        p.submit.assign(p.tokens.begin() + static_cast<ptrdiff_t>(c.tokens.size()), p.tokens.end());
      }
    } else {
      for (Prompt& p : prompts_) {
        if (p.text) p.tokens = tokenize(*p.text, bos_);
        p.submit = p.tokens;
      }
    }
    for (size_t i = 0; i < prompts_.size(); ++i) check_limits(i);
    const int32_t vocab = ctx_.model.vocab_size;
    for (const auto& [token, bias] : req_.sampling.logit_bias)
      if (token >= vocab)
        throw bad_field("logit_bias",
                        "'logit_bias' names token " + std::to_string(token) +
                            ", outside the vocabulary [0, " + std::to_string(vocab) + ")",
                        "invalid_token");
    if (req_.echo)
      for (Prompt& p : prompts_) echo(p);
  }

  // The prompt's text and, with logprobs, its tokens as a scoring pass sees them (the first
  // token has none: nothing predicts it).
  void echo(Prompt& p) const {
    p.echoed = p.text ? *p.text : detokenize(p.tokens);
    if (!req_.logprobs) return;
    const size_t n = p.tokens.size();
    const auto k = static_cast<size_t>(req_.top_logprobs);
    p.logprobs.resize(n);
    std::vector<int32_t> top_ids(n * k);
    std::vector<float> top_logprobs(n * k);
    const photon_model* model = ctx_.model.model;
    require_ok(k > 0
                   ? photon_model_score_top(model, p.tokens.data(), n, nullptr, req_.top_logprobs,
                                            p.logprobs.data(), top_ids.data(), top_logprobs.data())
                   : photon_model_score(model, p.tokens.data(), n, p.logprobs.data()),
               "cannot score the prompt");
    p.pieces.clear();
    p.tops.assign(n, {});
    for (size_t i = 0; i < n; ++i) {
      const int32_t previous = i > 0 ? p.tokens[i - 1] : -1;
      p.pieces.push_back(token_piece(p.tokens[i], previous));
      if (i == 0) continue;
      for (size_t j = 0; j < k; ++j)
        p.tops[i].push_back({token_piece(top_ids[i * k + j], previous), top_logprobs[i * k + j]});
    }
  }

  std::string detokenize(const std::vector<int32_t>& tokens) const {
    std::string text(tokens.size() * 8 + 16, '\0');
    size_t length = 0;
    photon_status status = photon_model_detokenize(ctx_.model.model, tokens.data(), tokens.size(),
                                                   text.data(), text.size(), &length);
    if (status == PHOTON_ERR_BUFFER_TOO_SMALL) {
      text.resize(length + 1);
      status = photon_model_detokenize(ctx_.model.model, tokens.data(), tokens.size(), text.data(),
                                       text.size(), &length);
    }
    require_ok(status, "cannot detokenize the prompt");
    text.resize(length);
    return text;
  }

  void check_limits(size_t index) {
    const ServedModel& m = ctx_.model;
    Prompt& prompt = prompts_[index];
    const std::string param = prompt_param(index);
    const auto n = static_cast<int64_t>(prompt.tokens.size());
    if (n == 0) throw bad_field(param, "the prompt gives no tokens");
    if (n > m.max_prompt_tokens)
      throw bad_field(param,
                      "the prompt has " + std::to_string(n) +
                          " tokens; this server takes at most " +
                          std::to_string(m.max_prompt_tokens),
                      "prompt_too_long");
    for (size_t i = 0; i < prompt.submit.size(); ++i) {
      if (prompt.submit[i] >= m.vocab_size)
        throw bad_field(param,
                        "prompt token " + std::to_string(prompt.submit[i]) + " at position " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(m.vocab_size) + ")",
                        "invalid_token");
    }
    if (n >= m.context)
      throw bad_field(param,
                      "the prompt has " + std::to_string(n) + " tokens and the context holds " +
                          std::to_string(m.context) + ": no room to generate",
                      "context_length_exceeded");
    const int64_t room = m.context - n;
    if (req_.max_tokens) {
      const int64_t asked = *req_.max_tokens;
      if (asked > m.max_tokens)
        throw bad_field("max_tokens", "'max_tokens' is " + std::to_string(asked) +
                                          "; this server generates at most " +
                                          std::to_string(m.max_tokens) + " tokens per request");
      if (asked > room)
        throw bad_field("max_tokens",
                        "the context holds " + std::to_string(m.context) +
                            " tokens: the prompt has " + std::to_string(n) +
                            " and 'max_tokens' asks for " + std::to_string(asked),
                        "context_length_exceeded");
      prompt.max_tokens = static_cast<int32_t>(asked);
    } else {
      const int64_t wanted =
          endpoint_ == Endpoint::Completions ? kCompletionsDefaultMaxTokens : room;
      prompt.max_tokens = static_cast<int32_t>(std::min({wanted, room, int64_t{m.max_tokens}}));
    }
  }

  // Submits every choice's engine request; with max_tokens 0 (echo's scoring alone) none, and
  // the reply follows at once.
  void submit() {
    if (req_.max_tokens != 0)
      for (size_t i = 0; i < choices_.size(); ++i)
        if (!submit_choice(i)) return;
    if (!streaming_ && req_.stream) {
      streaming_ = true;
      exchange_->start_stream(reply_headers());
      std::string out;
      for (const Choice& c : choices_) {
        if (endpoint_ == Endpoint::ChatCompletions)
          out += c.head +
                 "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                 "\"finish_reason\":null}]" +
                 (req_.include_usage ? ",\"usage\":null" : "") + "}\n\n";
        else if (req_.echo)
          append_echo_chunk(out, c);
      }
      if (!out.empty()) exchange_->send(out);
    }
    if (req_.max_tokens == 0) {
      for (Choice& c : choices_) {
        c.ended = true;
        c.rest = c.text.finish();
      }
      reply();
    }
  }

  // false: the request went back to planning (a stored state the engine refused).
  bool submit_choice(size_t index) {
    Choice& c = choices_[index];
    const Prompt& prompt = prompts_[c.prompt];
    RequestOptions ro;
    require_ok(photon_request_options_create(&ro.o), "cannot create request options");
    if (!prompt.submit.empty())
      require_ok(
          photon_request_options_set_prompt(ro.o, prompt.submit.data(), prompt.submit.size()),
          "prompt");
    if (resumed_)
      require_ok(photon_request_options_set_state(ro.o, conversation_->state.data(),
                                                  conversation_->state.size()),
                 "state");
    require_ok(photon_request_options_set_max_tokens(ro.o, prompt.max_tokens), "max_tokens");
    SessionOptions so;
    require_ok(photon_session_options_create(&so.o), "cannot create session options");
    set_session_options(so.o, seed_ + index);
    require_ok(photon_request_options_set_session_options(ro.o, so.o), "session options");
    c.generation = std::make_shared<Generation>(ctx_.io);
    c.ended = false;
    const photon_status status = c.generation->submit(
        ctx_.model.engine, ro.o, std::make_shared<ChoiceObserver>(shared_from_this(), index));
    if (status != PHOTON_OK) {
      const std::string message = photon_last_error();
      c.generation.reset();
      for (size_t j = 0; j < index; ++j) choices_[j].generation->cancel();
      if (resumed_ && status != PHOTON_ERR_BUSY) {
        state_refused(shared_from_this(), message.c_str());
        plan_and_submit(false);
        return false;
      }
      throw engine_error(status, message, prompt_param(c.prompt).c_str());
    }
    ctx_.tracker->add(c.generation);
    return true;
  }

  void set_session_options(photon_session_options* o, uint64_t seed) const {
    const ServedModel& m = ctx_.model;
    const Sampling& s = req_.sampling;
    require_ok(photon_session_options_set_mode(o, m.mode), "mode");
    require_ok(photon_session_options_set_kv_type(o, m.kv_type), "kv type");
    require_ok(photon_session_options_set_context_length(o, m.context), "context");
    require_ok(photon_session_options_set_temperature(o, s.temperature), "temperature");
    require_ok(photon_session_options_set_top_k(o, s.top_k), "top_k");
    require_ok(photon_session_options_set_top_p(o, s.top_p), "top_p");
    require_ok(photon_session_options_set_min_p(o, s.min_p), "min_p");
    const int32_t window = s.repeat_last_n < 0 ? m.context : s.repeat_last_n;
    require_ok(photon_session_options_set_repetition_penalty(o, s.repetition_penalty, window),
               "repetition_penalty");
    require_ok(photon_session_options_set_presence_penalty(o, s.presence_penalty),
               "presence_penalty");
    require_ok(photon_session_options_set_frequency_penalty(o, s.frequency_penalty),
               "frequency_penalty");
    std::vector<int32_t> bias_tokens;
    std::vector<float> biases;
    for (const auto& [token, bias] : s.logit_bias) {
      bias_tokens.push_back(token);
      biases.push_back(bias);
    }
    require_ok(photon_session_options_set_logit_bias(o, bias_tokens.data(), biases.data(),
                                                     bias_tokens.size()),
               "logit_bias");
    require_ok(photon_session_options_set_top_logprobs(o, req_.top_logprobs), "top_logprobs");
    require_ok(photon_session_options_set_seed(o, seed), "seed");
    require_ok(photon_session_options_set_ignore_eos(o, s.ignore_eos ? 1 : 0), "ignore_eos");
    for (const std::string& stop : stops_)
      require_ok(photon_session_options_add_stop_string(o, stop.c_str()), "stop");
  }

  Headers reply_headers() const {
    Headers h{{"x-request-id", request_id_}};
    if (conversation_id_) h.emplace_back("X-Conversation-Id", *conversation_id_);
    if (saved_version_) h.emplace_back("X-Conversation-Version", std::to_string(saved_version_));
    return h;
  }

  void client_gone() {
    if (gone_ || finished_) return;
    gone_ = true;
    ++ctx_.metrics.disconnects;
    cancel_all();
  }

  void cancel_all() {
    for (Choice& c : choices_)
      if (c.generation) c.generation->cancel();
  }

  // ---- the reply ----
  void append_token_chunk(std::string& out, const Choice& c, const GeneratedToken& t, size_t offset,
                          std::string_view text) const {
    if (text.empty() && !req_.logprobs && !req_.return_token_ids) return;
    out += c.head;
    if (endpoint_ == Endpoint::Completions) {
      out += "\"text\":";
      append_json_string(out, text);
    } else {
      out += "\"delta\":{\"content\":";
      append_json_string(out, text);
      out += '}';
    }
    out += ",\"logprobs\":";
    if (!req_.logprobs) {
      out += "null";
    } else if (endpoint_ == Endpoint::Completions) {
      out += "{\"tokens\":[";
      append_json_string(out, t.piece);
      out += "],\"token_logprobs\":[";
      append_json_number(out, t.logprob);
      out += "],\"top_logprobs\":";
      if (req_.top_logprobs > 0) {
        out += '[';
        append_alternatives_object(out, c.tops.back());
        out += ']';
      } else {
        out += "null";
      }
      out += ",\"text_offset\":[" + std::to_string(offset) + "]}";
    } else {
      out += "{\"content\":[";
      append_chat_logprob(out, t.piece, t.logprob, c.tops.back());
      out += "]}";
    }
    if (req_.return_token_ids) out += ",\"token_ids\":[" + std::to_string(t.id) + "]";
    out += ",\"finish_reason\":null}]";
    if (req_.include_usage) out += ",\"usage\":null";
    out += "}\n\n";
  }

  // Completions' logprobs of an echoed prompt: the first token has no logprob and no
  // alternatives (null), and offsets count from the prompt's start.
  ordered_json echoed_logprobs(const Prompt& p) const {
    ordered_json lp;
    lp["tokens"] = p.pieces;
    ordered_json values = ordered_json::array(), offsets = ordered_json::array();
    size_t offset = 0;
    for (size_t i = 0; i < p.pieces.size(); ++i) {
      values.push_back(i == 0 ? ordered_json(nullptr)
                              : ordered_json(json_number_value(p.logprobs[i])));
      offsets.push_back(offset);
      offset += p.pieces[i].size();
    }
    lp["token_logprobs"] = std::move(values);
    if (req_.top_logprobs > 0) {
      std::string top = "[null";
      for (size_t i = 1; i < p.tops.size(); ++i) {
        top += ',';
        append_alternatives_object(top, p.tops[i]);
      }
      lp["top_logprobs"] = ordered_json::parse(top + ']');
    } else {
      lp["top_logprobs"] = nullptr;
    }
    lp["text_offset"] = std::move(offsets);
    return lp;
  }

  // A streamed choice's first chunk with echo: its prompt, and the prompt's logprobs.
  void append_echo_chunk(std::string& out, const Choice& c) const {
    const Prompt& p = prompts_[c.prompt];
    out += c.head + "\"text\":";
    append_json_string(out, p.echoed);
    out += ",\"logprobs\":" + (req_.logprobs ? dump(echoed_logprobs(p)) : std::string("null")) +
           ",\"finish_reason\":null}]" + (req_.include_usage ? ",\"usage\":null" : "") + "}\n\n";
  }

  // Chat's form of a token: {"token", "logprob", "bytes"}, and its alternatives in that form.
  static void append_chat_token(std::string& out, const std::string& piece, float logprob) {
    out += "{\"token\":";
    append_json_string(out, piece);
    out += ",\"logprob\":";
    append_json_number(out, logprob);
    out += ",\"bytes\":[";
    for (size_t i = 0; i < piece.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(static_cast<unsigned char>(piece[i]));
    }
    out += ']';
  }
  static void append_chat_logprob(std::string& out, const std::string& piece, float logprob,
                                  const std::vector<Alternative>& top) {
    append_chat_token(out, piece, logprob);
    out += ",\"top_logprobs\":[";
    for (size_t i = 0; i < top.size(); ++i) {
      if (i) out += ',';
      append_chat_token(out, top[i].piece, top[i].logprob);
      out += '}';
    }
    out += "]}";
  }
  // Completions' form of alternatives: {"piece": logprob, ...}; of pieces that read alike, the
  // most likely.
  static void append_alternatives_object(std::string& out, const std::vector<Alternative>& top) {
    out += '{';
    std::vector<std::string_view> listed;
    for (const Alternative& a : top) {
      if (std::find(listed.begin(), listed.end(), a.piece) != listed.end()) continue;
      if (!listed.empty()) out += ',';
      listed.push_back(a.piece);
      append_json_string(out, a.piece);
      out += ':';
      append_json_number(out, a.logprob);
    }
    out += '}';
  }

  // The bytes `token` adds after `previous` (photon_model_token_piece). The ids come from the
  // library, so only a lack of memory fails here, on the network thread, which must not throw:
  // the alternative then goes unnamed.
  std::string token_piece(int32_t token, int32_t previous) const {
    std::string piece(32, '\0');
    size_t length = 0;
    photon_status status = photon_model_token_piece(ctx_.model.model, token, previous, piece.data(),
                                                    piece.size(), &length);
    if (status == PHOTON_ERR_BUFFER_TOO_SMALL) {
      piece.resize(length + 1);
      status = photon_model_token_piece(ctx_.model.model, token, previous, piece.data(),
                                        piece.size(), &length);
    }
    if (status != PHOTON_OK) return {};
    piece.resize(length);
    return piece;
  }

  ordered_json usage() const {
    ordered_json u;
    u["prompt_tokens"] = prompt_tokens();
    u["completion_tokens"] = completion_tokens();
    u["total_tokens"] = prompt_tokens() + completion_tokens();
    u["prompt_tokens_details"] = {{"cached_tokens", reused_tokens()}};
    return u;
  }

  // Each prompt counts once, however many choices it has.
  size_t prompt_tokens() const {
    size_t n = 0;
    for (const Prompt& p : prompts_) n += p.tokens.size();
    return n;
  }

  // The prompt tokens whose KV the engine reused, by each prompt's first choice.
  int64_t reused_tokens() const {
    double reused = 0;
    for (size_t i = 0; i < choices_.size(); i += static_cast<size_t>(req_.n)) {
      double r = 0;
      if (choices_[i].generation)
        photon_request_get_stat(choices_[i].generation->request(), PHOTON_REQUEST_REUSED_TOKENS,
                                &r);
      reused += r;
    }
    return static_cast<int64_t>(reused);
  }

  size_t completion_tokens() const {
    size_t n = 0;
    for (const Choice& c : choices_) n += c.ids.size();
    return n;
  }

  static std::string dump(const ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  ordered_json logprobs_json(const Choice& c) const {
    if (!req_.logprobs) return nullptr;
    ordered_json lp;
    if (endpoint_ == Endpoint::Completions) {
      // With echo, the prompt's entries come first.
      ordered_json echoed = req_.echo ? echoed_logprobs(prompts_[c.prompt]) : ordered_json();
      const auto field = [&](const char* name) {
        return req_.echo ? echoed[name] : ordered_json::array();
      };
      lp["tokens"] = field("tokens");
      for (const std::string& piece : c.pieces) lp["tokens"].push_back(piece);
      lp["token_logprobs"] = field("token_logprobs");
      for (const float logprob : c.logprobs)
        lp["token_logprobs"].push_back(json_number_value(logprob));
      if (req_.top_logprobs > 0) {
        std::string top = "[";
        for (size_t i = 0; i < c.tops.size(); ++i) {
          if (i) top += ',';
          append_alternatives_object(top, c.tops[i]);
        }
        lp["top_logprobs"] = field("top_logprobs");
        for (ordered_json& row : ordered_json::parse(top + ']'))
          lp["top_logprobs"].push_back(std::move(row));
      } else {
        lp["top_logprobs"] = nullptr;
      }
      lp["text_offset"] = field("text_offset");
      for (const size_t offset : c.offsets) lp["text_offset"].push_back(offset);
      return lp;
    }
    std::string content = "[";
    for (size_t i = 0; i < c.pieces.size(); ++i) {
      if (i) content += ',';
      append_chat_logprob(content, c.pieces[i], c.logprobs[i], c.tops[i]);
    }
    content += ']';
    lp["content"] = ordered_json::parse(content);
    return lp;
  }

  // A conversation's turn (one choice) is saved before its reply ends.
  void save_then_reply() {
    const Choice& choice = choices_[0];
    const Prompt& prompt = prompts_[0];
    Conversation c;
    c.has_text = prompt.text.has_value();
    if (c.has_text) c.text = *prompt.text + choice.text.generated();
    c.tokens = prompt.tokens;
    c.tokens.insert(c.tokens.end(), choice.ids.begin(), choice.ids.end());
    const uint64_t expected = conversation_ ? conversation_->version : 0;
    struct Outcome {
      ConversationStore::SaveResult result = ConversationStore::SaveResult::Conflict;
      std::string error;
    };
    auto outcome = std::make_shared<Outcome>();
    ctx_.offload->run(
        [store = ctx_.store, id = *conversation_id_, generation = choice.generation,
         c = std::move(c), expected, outcome]() mutable {
          try {
            size_t size = 0;
            photon_status status = photon_request_save(generation->request(), nullptr, 0, &size);
            if (status == PHOTON_ERR_BUFFER_TOO_SMALL) {
              c.state.resize(size);
              status = photon_request_save(generation->request(), c.state.data(), size, &size);
            }
            if (status != PHOTON_OK)
              throw std::runtime_error(std::string("cannot save the session: ") +
                                       photon_last_error());
            outcome->result = store->save(id, expected, c);
          } catch (const std::exception& e) {
            outcome->error = e.what();
          }
        },
        [self = shared_from_this(), outcome, expected] {
          Metrics& metrics = self->ctx_.metrics;
          if (!outcome->error.empty()) {
            ++metrics.conversation_store_errors;
            std::fprintf(stderr, "photon serve: conversation %s not saved: %s\n",
                         self->conversation_id_->c_str(), outcome->error.c_str());
          } else if (outcome->result == ConversationStore::SaveResult::Saved) {
            ++metrics.conversations_saved;
            self->saved_version_ = expected + 1;
          } else if (outcome->result == ConversationStore::SaveResult::Conflict) {
            ++metrics.conversation_conflicts;
            std::fprintf(stderr,
                         "photon serve: conversation %s not saved: another turn saved version "
                         "%llu first\n",
                         self->conversation_id_->c_str(),
                         static_cast<unsigned long long>(expected + 1));
          } else {
            ++metrics.conversation_store_errors;
            std::fprintf(stderr,
                         "photon serve: conversation %s not saved: larger than the store's cap\n",
                         self->conversation_id_->c_str());
          }
          self->reply();
        });
  }

  // A choice's last stream chunk: the text held back, and why it ended.
  void send_finish_chunk(Choice& c) {
    if (c.finish_sent) return;
    c.finish_sent = true;
    std::string out;
    const std::string usage_null = req_.include_usage ? ",\"usage\":null" : "";
    if (endpoint_ == Endpoint::Completions) {
      out += c.head + "\"text\":";
      append_json_string(out, c.rest);
      out += ",\"logprobs\":null,\"finish_reason\":\"" + std::string(c.finish_reason) + "\"}]" +
             usage_null + "}\n\n";
    } else {
      if (!c.rest.empty()) {
        out += c.head + "\"delta\":{\"content\":";
        append_json_string(out, c.rest);
        out += "},\"logprobs\":null,\"finish_reason\":null}]" + usage_null + "}\n\n";
      }
      out += c.head + "\"delta\":{},\"logprobs\":null,\"finish_reason\":\"" +
             std::string(c.finish_reason) + "\"}]" + usage_null + "}\n\n";
    }
    exchange_->send(out);
  }

  void reply() {
    if (conversation_id_)
      ++(resumed_ ? ctx_.metrics.conversations_resumed : ctx_.metrics.conversations_full_prefill);
    if (streaming_) {
      for (Choice& c : choices_) send_finish_chunk(c);
      std::string out;
      if (req_.include_usage)
        out += head_base_ + ",\"choices\":[],\"usage\":" + dump(usage()) + "}\n\n";
      out += "data: [DONE]\n\n";
      exchange_->send(out);
      exchange_->end_stream();
      return done(200);
    }
    ordered_json choices = ordered_json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& c = choices_[i];
      const std::string text =
          prompts_[c.prompt].echoed + c.text.generated().substr(0, c.text.sent());
      ordered_json choice;
      choice["index"] = i;
      if (endpoint_ == Endpoint::Completions)
        choice["text"] = text;
      else
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      choice["logprobs"] = logprobs_json(c);
      choice["finish_reason"] = c.finish_reason;
      if (req_.return_token_ids) choice["token_ids"] = c.ids;
      choices.push_back(std::move(choice));
    }
    ordered_json body;
    body["id"] = id_;
    body["object"] = endpoint_ == Endpoint::Completions ? "text_completion" : "chat.completion";
    body["created"] = created_;
    body["model"] = ctx_.model.name;
    body["choices"] = std::move(choices);
    body["usage"] = usage();
    exchange_->respond({200, "application/json", dump(body), reply_headers()});
    done(200);
  }

  void fail(const ApiError& e) {
    if (finished_) return;
    cancel_all();
    if (streaming_) {
      exchange_->send("data: " + e.body() + "\n\ndata: [DONE]\n\n");
      exchange_->end_stream();
    } else {
      HttpResponse r{e.status(), "application/json", e.body(), reply_headers()};
      if (e.status() == 429 || e.status() == 503) r.headers.emplace_back("Retry-After", "1");
      exchange_->respond(std::move(r));
    }
    done(e.status());
  }

  // The request's end: metrics, a log line, and the connection let go.
  void done(int status) {
    if (finished_) return;
    finished_ = true;
    Metrics& metrics = ctx_.metrics;
    ++metrics.requests[{route(endpoint_), status}];
    const double seconds =
        std::chrono::duration<double>(SteadyClock::now() - http_.received).count();
    metrics.request_seconds.observe(seconds);
    for (const Choice& c : choices_) {
      if (!c.generation) continue;
      photon_request* r = c.generation->request();
      double queue = NAN, first = NAN, decode = NAN, generated = 0;
      photon_request_get_stat(r, PHOTON_REQUEST_QUEUE_SECONDS, &queue);
      photon_request_get_stat(r, PHOTON_REQUEST_FIRST_TOKEN_SECONDS, &first);
      photon_request_get_stat(r, PHOTON_REQUEST_DECODE_SECONDS, &decode);
      photon_request_get_stat(r, PHOTON_REQUEST_GENERATED_TOKENS, &generated);
      metrics.queue_seconds.observe(queue);
      metrics.first_token_seconds.observe(first);
      if (generated > 1) metrics.token_gap_seconds.observe(decode / (generated - 1));
    }
    if (ctx_.log_requests)
      std::fprintf(stderr,
                   "photon serve: %s %s %s -> %d: prompt %zu tokens (%lld reused), %zu generated, "
                   "%.3f s\n",
                   request_id_.c_str(), http_.method.c_str(), route(endpoint_), status,
                   prompt_tokens(), static_cast<long long>(reused_tokens()), completion_tokens(),
                   seconds);
    exchange_.reset();
  }

  ServerContext& ctx_;
  const Endpoint endpoint_;
  const HttpRequest http_;
  std::shared_ptr<Exchange> exchange_;
  std::string request_id_;
  const int64_t created_;
  GenerationRequest req_;
  std::string id_;
  std::string head_base_;  // "data: {" and the fields every chunk repeats

  std::optional<std::string> conversation_id_;
  std::optional<Conversation> conversation_;
  uint64_t saved_version_ = 0;
  bool bos_ = true;
  std::vector<std::string> stops_;
  uint64_t seed_ = 0;
  bool resumed_ = false;

  // One prompt of the request: what it reads and, with echo, what it shows of itself.
  struct Prompt {
    std::optional<std::string> text;  // a text prompt (chat: the messages rendered)
    std::vector<int32_t> tokens;      // the whole prompt, as the session holds it
    std::vector<int32_t> submit;      // what the engine reads (after a continued state)
    int32_t max_tokens = 0;
    std::string echoed;                          // echo: the prompt's text
    std::vector<std::string> pieces;             // echo with logprobs: each token's piece,
    std::vector<float> logprobs;                 // its logprob (NaN first)
    std::vector<std::vector<Alternative>> tops;  // and its alternatives (none first)
  };
  std::vector<Prompt> prompts_;

  // One of the choices: its engine request and what it produced.
  struct Choice {
    Choice(std::string chunk_head, std::vector<std::string> stops, size_t of_prompt)
        : head(std::move(chunk_head)), text(std::move(stops)), prompt(of_prompt) {}
    std::string head;  // head_base_ and the choice's index
    TextStream text;
    size_t prompt;  // its index in prompts_
    std::shared_ptr<Generation> generation;
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    std::vector<size_t> offsets;
    std::vector<std::string> pieces;
    std::vector<std::vector<Alternative>> tops;  // each token's alternatives (with logprobs)
    std::string rest;  // the text held back until the end, sent with the finish reason
    const char* finish_reason = "length";
    bool ended = false;
    bool finish_sent = false;
  };
  std::vector<Choice> choices_;
  bool streaming_ = false;
  bool gone_ = false;
  bool finished_ = false;
};

void ChoiceObserver::on_tokens(std::vector<GeneratedToken>& tokens) {
  completion_->on_tokens(index_, tokens);
}

void ChoiceObserver::on_finished() {
  completion_->on_finished(index_);
}

}  // namespace

void start_completion(ServerContext& context, Endpoint endpoint, HttpRequest request,
                      std::shared_ptr<Exchange> exchange) {
  std::make_shared<Completion>(context, endpoint, std::move(request), std::move(exchange))->start();
}

}  // namespace photon::serve
