// photon serve: an OpenAI-compatible HTTP server over one model's engine.
//
// Threads: the network thread runs the io_context (every connection, every reply, the routes);
// the engine's worker runs the steps and hands tokens over without waiting for the network
// (generation.h); two threads do the blocking work (tokenizing prompts, the conversation store's
// calls); the model is loaded on a thread of its own while the server already answers /health
// with 503.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "photon.h"
#include "serve/http.h"

namespace photon::serve {

struct ServeOptions {
  std::string model_path;
  std::string model_name;  // "" : the model file's name without its directory and extension
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string api_key;  // "" : no key required
  std::string store;    // "" : no conversations
  uint64_t store_max_bytes = uint64_t{1} << 30;
  std::string chat_template;  // JSON text (--chat-template); "" : the model's, else a transcript
  HttpOptions http;
  int32_t max_running = 32;
  int32_t max_waiting = 256;
  uint64_t memory_budget = 0;
  int32_t step_tokens = 512;
  uint64_t prefix_cache = uint64_t{512} << 20;  // bytes of saved prompts; 0: none
  int32_t max_prompt_tokens = 0;                // 0: the context
  int32_t max_tokens = 0;                       // 0: the context
  int32_t context = 0;                          // 0: the model's
  photon_mode mode = PHOTON_MODE_AUTO;
  photon_dtype kv_type = PHOTON_DTYPE_F32;
  std::string device = "cpu";
  std::string precision;  // "": the device's default
  int32_t threads = 0;
  std::chrono::milliseconds shutdown_timeout{10000};
  bool log_requests = true;
};

// Serves until SIGTERM or SIGINT, then stops accepting, lets the running requests finish (up to
// the shutdown timeout; then they stop at their next token, their conversations saved), and
// returns 0. Throws std::runtime_error when the server cannot start (its address, its store, the
// model).
int run_server(const ServeOptions& options);

}  // namespace photon::serve
