// photon serve: the command-line face of the HTTP server (src/cli/serve/server.h).
#include <cstdlib>

#include "commands.h"
#include "common.h"
#include "serve/redis_store.h"
#include "serve/server.h"

namespace photon::cli {
namespace {

std::chrono::milliseconds parse_seconds(const Args& args, const std::string& name,
                                        std::chrono::milliseconds fallback) {
  const auto text = args.value(name);
  if (!text) return fallback;
  const float seconds = parse_float(*text, "--" + name);
  if (seconds <= 0.0f || seconds > 86400.0f)
    throw UsageError("--" + name + ": must be a number of seconds in (0, 86400], got " + *text);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0f + 0.5f));
}

// A size given in units of 2^shift bytes.
uint64_t parse_size(const Args& args, const std::string& name, int shift, uint64_t fallback) {
  const auto text = args.value(name);
  if (!text) return fallback;
  const uint64_t n = parse_uint64(*text, "--" + name);
  if (n == 0 || n > (uint64_t{1} << (62 - shift)))
    throw UsageError("--" + name + ": must be at least 1 and at most 2^" +
                     std::to_string(62 - shift) + ", got " + *text);
  return n << shift;
}

int32_t parse_count(const Args& args, const std::string& name, int32_t fallback, int32_t low) {
  const auto text = args.value(name);
  if (!text) return fallback;
  const int32_t n = parse_int32(*text, "--" + name);
  if (n < low)
    throw UsageError("--" + name + ": must be at least " + std::to_string(low) + ", got " + *text);
  return n;
}

int run_serve(const std::vector<std::string>& argv) {
  Args args({{"model", 'm'},
             {"host"},
             {"port"},
             {"api-key"},
             {"store"},
             {"store-max-mib"},
             {"model-name"},
             {"chat-template"},
             {"max-running"},
             {"max-waiting"},
             {"memory-budget-mib"},
             {"step-tokens"},
             {"prefix-cache-mib"},
             {"max-body-kib"},
             {"max-prompt-tokens"},
             {"max-tokens"},
             {"max-connections"},
             {"header-timeout"},
             {"body-timeout"},
             {"write-timeout"},
             {"ping-interval"},
             {"shutdown-timeout"},
             {"mode"},
             {"kv-type"},
             {"ctx"},
             {"device"},
             {"precision"},
             {"threads"},
             {"quiet", 0, false}},
            0);
  args.parse(argv);
  serve::ServeOptions o;
  o.model_path = model_path(args);
  if (auto host = args.value("host")) o.host = *host;
  if (auto port = args.value("port")) {
    const int32_t p = parse_int32(*port, "--port");
    if (p < 0 || p > 65535) throw UsageError("--port: must be in [0, 65535], got " + *port);
    o.port = static_cast<uint16_t>(p);
  }
  if (auto key = args.value("api-key")) {
    o.api_key = *key;
  } else if (const char* env = std::getenv("PHOTON_API_KEY")) {
    o.api_key = env;
  }
  if ((args.has("api-key") || std::getenv("PHOTON_API_KEY")) && o.api_key.empty())
    throw UsageError("--api-key / PHOTON_API_KEY: the key is empty");
  if (auto store = args.value("store")) {
    if (store->empty()) throw UsageError("--store: give a directory or a redis:// URL");
    if (store->rfind("redis://", 0) == 0) {
      try {
        serve::parse_redis_url(*store);
      } catch (const std::runtime_error& e) {
        throw UsageError(e.what());
      }
    }
    o.store = *store;
  }
  o.store_max_bytes = parse_size(args, "store-max-mib", 20, o.store_max_bytes);
  if (auto name = args.value("model-name")) {
    if (name->empty()) throw UsageError("--model-name: the name is empty");
    o.model_name = *name;
  }
  if (auto path = args.value("chat-template")) o.chat_template = read_file(*path, "chat template");
  o.max_running = parse_count(args, "max-running", o.max_running, 1);
  o.max_waiting = parse_count(args, "max-waiting", o.max_waiting, 0);
  if (args.has("memory-budget-mib")) o.memory_budget = parse_size(args, "memory-budget-mib", 20, 0);
  o.step_tokens = parse_count(args, "step-tokens", o.step_tokens, 1);
  if (const auto mib = args.value("prefix-cache-mib")) {
    const uint64_t n = parse_uint64(*mib, "--prefix-cache-mib");
    if (n > (uint64_t{1} << 42)) throw UsageError("--prefix-cache-mib: at most 2^42, got " + *mib);
    o.prefix_cache = n << 20;
  }
  o.http.max_body_bytes = parse_size(args, "max-body-kib", 10, o.http.max_body_bytes);
  o.max_prompt_tokens = parse_count(args, "max-prompt-tokens", 0, 1);
  o.max_tokens = parse_count(args, "max-tokens", 0, 1);
  o.http.max_connections = static_cast<size_t>(
      parse_count(args, "max-connections", static_cast<int32_t>(o.http.max_connections), 1));
  o.http.header_timeout = parse_seconds(args, "header-timeout", o.http.header_timeout);
  o.http.body_timeout = parse_seconds(args, "body-timeout", o.http.body_timeout);
  o.http.write_timeout = parse_seconds(args, "write-timeout", o.http.write_timeout);
  o.http.ping_interval = parse_seconds(args, "ping-interval", o.http.ping_interval);
  o.shutdown_timeout = parse_seconds(args, "shutdown-timeout", o.shutdown_timeout);
  if (auto mode = args.value("mode")) o.mode = parse_mode(*mode);
  if (auto kv = args.value("kv-type")) o.kv_type = parse_kv_type(*kv, "--kv-type");
  o.context = parse_count(args, "ctx", 0, 1);
  const DeviceOptions device = device_options(args);
  o.device = device.device;
  o.precision = device.precision;
  o.threads = parse_threads(args);
  o.log_requests = !args.has("quiet");
  try {
    return serve::run_server(o);
  } catch (const std::runtime_error& e) {
    throw RuntimeFailure(e.what());
  }
}

}  // namespace

const Command kServeCommand = {
    "serve", "serve the model over HTTP with OpenAI's API",
    "usage: photon serve -m M.photon [--host 127.0.0.1] [--port 8080] [--api-key KEY]\n"
    "                    [--store DIR|redis://HOST:PORT] [options]\n"
    "\n"
    "An OpenAI-compatible HTTP server on the continuous-batching engine: POST /v1/completions,\n"
    "POST /v1/chat/completions (streamed with \"stream\": true), GET /v1/models, /health and\n"
    "/metrics (Prometheus). A request with an X-Conversation-Id header has its session saved to\n"
    "the store; a later turn whose prompt starts with the conversation so far continues it\n"
    "instead of reading it again. SIGTERM or Ctrl-C stops accepting, lets the requests under way\n"
    "finish (their conversations saved) and exits 0. docs/serving.md has the details.\n"
    "\n"
    "options:\n"
    "  -m, --model M.photon   the model (default: $PHOTON_MODEL)\n"
    "  --host ADDR            address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N               port (default 8080; 0 picks a free one, printed at start)\n"
    "  --api-key KEY          require 'Authorization: Bearer KEY' on /v1 routes (default:\n"
    "                         $PHOTON_API_KEY; none when neither is set)\n"
    "  --model-name NAME      the model's id in the API (default: the file name without .photon)\n"
    "  --chat-template FILE   chat template (JSON, docs/serving.md) instead of the model's\n"
    "  --store DIR            keep conversations in DIR (created if missing)\n"
    "  --store redis://HOST[:PORT][/DB][?ttl=S&timeout=S]\n"
    "                         keep them in Redis, shared by several servers (ttl: seconds\n"
    "                         after the last save, default 604800; timeout default 1)\n"
    "  --store-max-mib N      the store's size cap; the oldest conversations go first (1024);\n"
    "                         with Redis, the cap of one conversation\n"
    "limits:\n"
    "  --max-running N        requests generating at once (default 32)\n"
    "  --max-waiting N        requests queued beyond those; more get 429 (default 256)\n"
    "  --memory-budget-mib N  bytes the running requests' caches may hold (default: no limit)\n"
    "  --step-tokens N        prompt tokens read per engine step (default 512)\n"
    "  --prefix-cache-mib N   host memory for the saved sessions of prompts read, which later\n"
    "                         prompts that begin with one start from (default 512; 0: none)\n"
    "  --max-body-kib N       largest request body (default 4096; larger: 413)\n"
    "  --max-prompt-tokens N  longest prompt (default: the context)\n"
    "  --max-tokens N         largest max_tokens (default: the context)\n"
    "  --max-connections N    open connections (default 1024; more get 503)\n"
    "  --header-timeout S     seconds to receive a request's headers, and to keep an idle\n"
    "                         connection (default 10)\n"
    "  --body-timeout S       seconds to receive a request's body (default 30)\n"
    "  --write-timeout S      seconds a client may stall a reply before it is dropped (30)\n"
    "  --ping-interval S      an SSE comment after S quiet seconds on a stream (default 1)\n"
    "  --shutdown-timeout S   on SIGTERM, seconds the requests under way may still run before\n"
    "                         they stop at their next token (default 10)\n"
    "sessions:\n"
    "  --mode MODE            auto (default), hiergen, recgen\n"
    "  --kv-type T            f32 (default), bf16 or f16 KV caches\n"
    "  --ctx N                each request's context length (default: the model's)\n"
    "  --device DEV           cpu (default), cuda, cuda:N or auto\n"
    "  --precision P          exact, bf16 or int8 (q8 models on the CPU) products (default:\n"
    "                         the device's, exact on the CPU, bf16 on a GPU)\n"
    "  --threads N            compute with at most N threads (default: every core)\n"
    "  --quiet                no line on stderr per request\n",
    run_serve};

}  // namespace photon::cli
