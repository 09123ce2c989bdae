// What a generation request needs from the server: the model and its engine, the settings that
// apply to every request, the tracker, the conversation store, the threads for blocking work and
// the metrics. Network thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "photon.h"
#include "serve/chat_template.h"
#include "serve/conversation_store.h"
#include "serve/generation.h"
#include "serve/metrics.h"

namespace boost::asio {
class io_context;
}

namespace photon::serve {

// The loaded model and what the server derived from it and from its flags.
struct ServedModel {
  photon_model* model = nullptr;
  photon_engine* engine = nullptr;
  std::string name;  // the id clients give as "model"
  ChatTemplate chat;
  int32_t vocab_size = 0;
  int32_t context = 0;            // of each session: --ctx, else the model's
  int32_t max_prompt_tokens = 0;  // --max-prompt-tokens, else the context
  int32_t max_tokens = 0;         // --max-tokens, else the context
  photon_mode mode = PHOTON_MODE_AUTO;
  photon_dtype kv_type = PHOTON_DTYPE_F32;
};

// Runs blocking work off the network thread (the store's file or network I/O, tokenizing long
// prompts) on a few threads of its own, and each call's continuation back on the network thread.
// A blocking function must not hold the last reference to anything the network thread owns: its
// continuation, which runs later, should hold it too.
class BlockingRunner {
 public:
  BlockingRunner(boost::asio::io_context& io, int threads);
  ~BlockingRunner();  // waits for the calls under way and queued
  BlockingRunner(const BlockingRunner&) = delete;
  BlockingRunner& operator=(const BlockingRunner&) = delete;

  void run(std::function<void()> blocking, std::function<void()> then);
  // Calls whose continuation has not run yet (network thread).
  size_t in_flight() const { return in_flight_; }

 private:
  struct Pool;
  boost::asio::io_context& io_;
  std::unique_ptr<Pool> pool_;
  size_t in_flight_ = 0;
};

struct ServerContext {
  boost::asio::io_context& io;
  ServedModel model;
  GenerationTracker* tracker = nullptr;
  Metrics metrics;
  ConversationStore* store = nullptr;  // null without --store
  BlockingRunner* offload = nullptr;
  bool log_requests = true;
  bool stopping = false;
  std::mt19937_64 random{std::random_device{}()};

  // A fresh 64-bit value as 16 hex digits (ids of requests and completions).
  std::string fresh_id();
};

}  // namespace photon::serve
