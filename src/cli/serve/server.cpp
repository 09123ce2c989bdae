#include "serve/server.h"

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>

#include "serve/api_error.h"
#include "serve/completion.h"
#include "serve/server_context.h"

namespace photon::serve {

namespace net = boost::asio;

// ---- BlockingRunner, ServerContext ----

struct BlockingRunner::Pool {
  explicit Pool(int n) : threads(static_cast<size_t>(n)) {}
  net::thread_pool threads;
};

BlockingRunner::BlockingRunner(net::io_context& io, int threads)
    : io_(io), pool_(std::make_unique<Pool>(threads)) {}

BlockingRunner::~BlockingRunner() {
  pool_->threads.join();
}

void BlockingRunner::run(std::function<void()> blocking, std::function<void()> then) {
  ++in_flight_;
  net::post(pool_->threads,
            [this, blocking = std::move(blocking), then = std::move(then)]() mutable {
              blocking();
              blocking = nullptr;
              net::post(io_, [this, then = std::move(then)] {
                --in_flight_;
                then();
              });
            });
}

std::string ServerContext::fresh_id() {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(random()));
  return text;
}

namespace {

// Threads for blocking work: a long prompt being tokenized leaves one for the store.
constexpr int kBlockingThreads = 2;
constexpr auto kShutdownTick = std::chrono::milliseconds(50);
constexpr auto kStopToCancel = std::chrono::seconds(5);  // after the timeout: stop, then cancel
constexpr auto kCancelToExit = std::chrono::seconds(5);  // after cancelling: give up waiting

std::string stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

bool same_secret(const std::string& a, const std::string& b) {
  // Time independent of where the texts differ.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

uint64_t open_descriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return 0;
  uint64_t n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // less the directory's own descriptor
}

HttpResponse json_response(int status, const nlohmann::ordered_json& body) {
  return {status, "application/json", body.dump(), {}};
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r{e.status(), "application/json", e.body(), {}};
  if (e.status() == 429 || e.status() == 503) r.headers.emplace_back("Retry-After", "1");
  if (e.status() == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

// What the loader thread hands to the network thread.
struct Loaded {
  photon_model* model = nullptr;
  photon_engine* engine = nullptr;
  ChatTemplate chat;
  std::string error;
};

class Server final : public RequestHandler {
 public:
  explicit Server(const ServeOptions& options)
      : options_(options),
        ctx_{io_, {}, nullptr, {}, nullptr, nullptr, options.log_requests},
        http_(io_, *this, options.http),
        signals_(io_, SIGINT, SIGTERM),
        shutdown_timer_(io_),
        work_(io_.get_executor()) {
    if (!options_.store.empty()) {
      store_ = open_store(options_.store, options_.store_max_bytes);
      ctx_.store = store_.get();
    }
    offload_ = std::make_unique<BlockingRunner>(io_, kBlockingThreads);
    ctx_.offload = offload_.get();
  }

  ~Server() override {
    if (loader_.joinable()) loader_.join();
    // No token callback may run once the network side is gone.
    if (model_.engine) photon_engine_stop(model_.engine, PHOTON_ENGINE_CANCEL);
  }

  int run() {
    const uint16_t port = http_.listen(options_.host, options_.port);
    std::fprintf(stderr, "photon serve: listening on http://%s:%u (loading %s)\n",
                 options_.host.c_str(), port, options_.model_path.c_str());
    if (store_)
      std::fprintf(stderr, "photon serve: conversations in %s\n", store_->describe().c_str());
    http_.start();
    signals_.async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) on_signal();
    });
    loading_ = true;
    loader_ = std::thread([this] { load(); });
    io_.run();
    loader_.join();
    if (!load_error_.empty()) throw std::runtime_error(load_error_);
    std::fprintf(stderr, "photon serve: stopped\n");
    return 0;
  }

  // ---- RequestHandler ----
  void handle(HttpRequest request, std::shared_ptr<Exchange> exchange) override {
    const std::string path(request.path());
    try {
      if (path == "/health") return reply(exchange, "/health", health(request));
      if (path == "/metrics") return reply(exchange, "/metrics", metrics(request));
      if (path.rfind("/v1/", 0) != 0)
        throw ApiError(404,
                       "no route " + path +
                           " (POST /v1/completions, /v1/chat/completions; "
                           "GET /v1/models, /health, /metrics)",
                       "invalid_request_error", "", "not_found");
      if (!options_.api_key.empty()) check_key(request);
      if (stopping_)
        throw ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
      if (!ready_)
        throw ApiError(503, "the model is still loading", "server_error", "", "model_loading");
      if (path == "/v1/completions")
        return start_completion(ctx_, Endpoint::Completions, std::move(request), exchange);
      if (path == "/v1/chat/completions")
        return start_completion(ctx_, Endpoint::ChatCompletions, std::move(request), exchange);
      if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0)
        return reply(exchange, "/v1/models", models(request, path));
      throw ApiError(404, "no route " + path, "invalid_request_error", "", "not_found");
    } catch (const ApiError& e) {
      const bool known = path == "/health" || path == "/metrics" || path == "/v1/models" ||
                         path == "/v1/completions" || path == "/v1/chat/completions";
      reply(exchange, known ? path : "other", error_response(e));
    }
  }

  void rejected(int status) override { ++ctx_.metrics.requests[{"other", status}]; }

  void connection(bool accepted) override {
    ++(accepted ? ctx_.metrics.connections_accepted : ctx_.metrics.connections_refused);
  }

 private:
  void reply(const std::shared_ptr<Exchange>& exchange, const std::string& route, HttpResponse r) {
    ++ctx_.metrics.requests[{route, r.status}];
    exchange->respond(std::move(r));
  }

  void check_key(const HttpRequest& request) const {
    const std::string* given = request.header("authorization");
    static const std::string kBearer = "Bearer ";
    if (!given || given->compare(0, kBearer.size(), kBearer) != 0 ||
        !same_secret(given->substr(kBearer.size()), options_.api_key))
      throw ApiError(401,
                     given ? "invalid API key (send 'Authorization: Bearer KEY')"
                           : "missing API key (send 'Authorization: Bearer KEY')",
                     "invalid_request_error", "", "invalid_api_key");
  }

  static void require_get(const HttpRequest& request, const std::string& path) {
    if (request.method != "GET") throw ApiError(405, path + " takes GET, not " + request.method);
  }

  HttpResponse health(const HttpRequest& request) const {
    require_get(request, "/health");
    const char* status = stopping_ ? "stopping" : ready_ ? "ok" : "loading";
    return json_response(ready_ && !stopping_ ? 200 : 503, {{"status", status}});
  }

  HttpResponse models(const HttpRequest& request, const std::string& path) const {
    require_get(request, "/v1/models");
    const ServedModel& m = ctx_.model;
    nlohmann::ordered_json model;
    model["id"] = m.name;
    model["object"] = "model";
    model["created"] = started_;
    model["owned_by"] = "photon";
    model["context_length"] = m.context;
    if (path != "/v1/models") {
      if (path.substr(std::string("/v1/models/").size()) != m.name)
        throw ApiError(
            404, "no model '" + path.substr(11) + "' here; this server serves '" + m.name + "'",
            "invalid_request_error", "model", "model_not_found");
      return json_response(200, model);
    }
    return json_response(200, {{"object", "list"}, {"data", {model}}});
  }

  HttpResponse metrics(const HttpRequest& request) const {
    require_get(request, "/metrics");
    std::string out;
    ctx_.metrics.render_own(out);
    render_metric(out, "photon_ready", "gauge",
                  "1 when the model is loaded and requests are served",
                  ready_ && !stopping_ ? 1 : 0);
    render_metric(out, "photon_http_connections_open", "gauge", "Open HTTP connections",
                  static_cast<double>(http_.open_connections()));
    render_metric(out, "photon_generations_active", "gauge",
                  "Generation requests in the engine that the server waits on",
                  tracker_ ? static_cast<double>(tracker_->active()) : 0);
    if (model_.engine) {
      static const struct {
        photon_engine_stat stat;
        const char* name;
        const char* type;
        const char* help;
      } kStats[] = {
          {PHOTON_ENGINE_WAITING, "photon_engine_requests_waiting", "gauge",
           "Requests waiting for admission"},
          {PHOTON_ENGINE_RUNNING, "photon_engine_requests_running", "gauge", "Requests running"},
          {PHOTON_ENGINE_PAUSED, "photon_engine_requests_paused", "gauge",
           "Requests paused for the memory budget"},
          {PHOTON_ENGINE_SUBMITTED, "photon_engine_requests_submitted_total", "counter",
           "Requests accepted by the engine"},
          {PHOTON_ENGINE_REFUSED, "photon_engine_requests_refused_total", "counter",
           "Requests refused because the waiting queue was full"},
          {PHOTON_ENGINE_FINISHED, "photon_engine_requests_finished_total", "counter",
           "Requests ended, for any reason"},
          {PHOTON_ENGINE_FAILED, "photon_engine_requests_failed_total", "counter",
           "Requests ended by an error"},
          {PHOTON_ENGINE_CANCELLED, "photon_engine_requests_cancelled_total", "counter",
           "Requests cancelled"},
          {PHOTON_ENGINE_PROMPT_TOKENS, "photon_engine_prompt_tokens_total", "counter",
           "Prompt tokens read"},
          {PHOTON_ENGINE_REUSED_TOKENS, "photon_engine_reused_tokens_total", "counter",
           "Tokens continued from saved conversation states or the prefix cache instead of "
           "being read again"},
          {PHOTON_ENGINE_GENERATED_TOKENS, "photon_engine_generated_tokens_total", "counter",
           "Tokens generated"},
          {PHOTON_ENGINE_PAUSES, "photon_engine_pauses_total", "counter", "Requests paused"},
          {PHOTON_ENGINE_STEPS, "photon_engine_steps_total", "counter",
           "Engine steps that did work"},
          {PHOTON_ENGINE_MEMORY_IN_USE, "photon_engine_memory_bytes", "gauge",
           "Bytes the running requests' sessions hold"},
          {PHOTON_ENGINE_MEMORY_PEAK, "photon_engine_memory_peak_bytes", "gauge",
           "The most bytes the running requests' sessions held at once"},
          {PHOTON_ENGINE_TOKENS_PER_SECOND, "photon_engine_tokens_per_second", "gauge",
           "Tokens generated per second over the last 10 seconds"},
          {PHOTON_ENGINE_PREFIX_HITS, "photon_engine_prefix_hits_total", "counter",
           "Requests restored from the prefix cache"},
          {PHOTON_ENGINE_PREFIX_BYTES, "photon_engine_prefix_cache_bytes", "gauge",
           "Bytes of saved prompts the prefix cache holds"},
      };
      for (const auto& s : kStats) {
        double value = 0;
        photon_engine_get_stat(model_.engine, s.stat, &value);
        render_metric(out, s.name, s.type, s.help, value);
      }
      uint64_t in_use = 0;
      photon_model_memory(model_.model, &in_use, nullptr, 0);
      render_metric(out, "photon_model_memory_bytes", "gauge",
                    "Bytes the model's backend holds (caches, states, scratch)",
                    static_cast<double>(in_use));
    }
    if (store_) {
      render_metric(out, "photon_conversation_store_bytes", "gauge",
                    "Bytes of the stored conversations",
                    static_cast<double>(store_->stored_bytes()));
      render_metric(out, "photon_conversation_store_conversations", "gauge", "Conversations stored",
                    static_cast<double>(store_->stored_count()));
      render_metric(out, "photon_conversation_store_evictions_total", "counter",
                    "Conversations removed to keep the store under its size cap",
                    static_cast<double>(store_->evicted_count()));
    }
    render_metric(out, "process_resident_memory_bytes", "gauge", "Resident memory of the server",
                  static_cast<double>(resident_bytes()));
    render_metric(out, "process_open_fds", "gauge", "Open file descriptors of the server",
                  static_cast<double>(open_descriptors()));
    return {200, "text/plain; version=0.0.4; charset=utf-8", std::move(out), {}};
  }

  // ---- loading (loader thread) ----
  static int load_progress(void* user, float) {
    return static_cast<Server*>(user)->cancel_load_.load() ? 1 : 0;
  }

  void load() {
    auto result = std::make_shared<Loaded>();
    try {
      load_into(*result);
    } catch (const std::exception& e) {
      result->error = e.what();
    }
    net::post(io_, [this, result] { loaded(*result); });
  }

  static void check(photon_status status, const std::string& what) {
    if (status != PHOTON_OK)
      throw std::runtime_error(what + ": " + photon_last_error() + " (" +
                               photon_status_name(status) + ")");
  }

  void load_into(Loaded& out) {
    photon_load_options* lo = nullptr;
    check(photon_load_options_create(&lo), "cannot create load options");
    std::unique_ptr<photon_load_options, void (*)(photon_load_options*)> load_options(
        lo, photon_load_options_free);
    check(photon_load_options_set_device(lo, options_.device.c_str()), "--device");
    if (!options_.precision.empty())
      check(photon_load_options_set_precision(lo, options_.precision.c_str()), "--precision");
    check(photon_load_options_set_threads(lo, options_.threads), "--threads");
    check(photon_load_options_set_progress(lo, &Server::load_progress, this), "progress");
    check(photon_model_load(options_.model_path.c_str(), lo, &out.model),
          "cannot load " + options_.model_path);
    try {
      if (!options_.chat_template.empty())
        out.chat = ChatTemplate::parse(options_.chat_template);
      else if (const char* t = photon_model_metadata(out.model, kChatTemplateKey))
        out.chat = ChatTemplate::parse(t);
      else
        out.chat = ChatTemplate::transcript();
      const int32_t model_context = photon_model_context_length(out.model);
      if (options_.context > model_context)
        throw std::runtime_error("--ctx " + std::to_string(options_.context) +
                                 " exceeds the model's context length " +
                                 std::to_string(model_context));
      // A session with the server's settings, made once, shows a mode the model cannot run
      // before any request does.
      photon_session_options* so = nullptr;
      check(photon_session_options_create(&so), "cannot create session options");
      photon_session_options_set_mode(so, options_.mode);
      photon_session_options_set_kv_type(so, options_.kv_type);
      photon_session_options_set_context_length(so, options_.context);
      photon_session* probe = nullptr;
      const photon_status status = photon_session_create(out.model, so, &probe);
      photon_session_options_free(so);
      photon_session_free(probe);
      check(status, "the model cannot run sessions with these settings");
      photon_engine_options* eo = nullptr;
      check(photon_engine_options_create(&eo), "cannot create engine options");
      std::unique_ptr<photon_engine_options, void (*)(photon_engine_options*)> engine_options(
          eo, photon_engine_options_free);
      check(photon_engine_options_set_max_running(eo, options_.max_running), "--max-running");
      check(photon_engine_options_set_max_waiting(eo, options_.max_waiting), "--max-waiting");
      check(photon_engine_options_set_memory_budget(eo, options_.memory_budget),
            "--memory-budget-mib");
      check(photon_engine_options_set_step_tokens(eo, options_.step_tokens), "--step-tokens");
      check(photon_engine_options_set_prefix_cache(eo, options_.prefix_cache),
            "--prefix-cache-mib");
      check(photon_engine_create(out.model, eo, &out.engine), "cannot create the engine");
      check(photon_engine_start(out.engine), "cannot start the engine");
    } catch (...) {
      photon_engine_free(out.engine);
      photon_model_free(out.model);
      out.engine = nullptr;
      out.model = nullptr;
      throw;
    }
  }

  // ---- network thread ----
  void loaded(Loaded& result) {
    loading_ = false;
    model_.model = result.model;
    model_.engine = result.engine;
    if (!result.error.empty()) {
      if (!stopping_) load_error_ = result.error;
      return begin_shutdown();
    }
    ServedModel& m = ctx_.model;
    m.model = result.model;
    m.engine = result.engine;
    m.name = options_.model_name.empty() ? stem(options_.model_path) : options_.model_name;
    m.chat = std::move(result.chat);
    m.vocab_size = photon_model_vocab_size(result.model);
    m.context = options_.context > 0 ? options_.context : photon_model_context_length(result.model);
    m.max_prompt_tokens = options_.max_prompt_tokens > 0
                              ? std::min(options_.max_prompt_tokens, m.context)
                              : m.context;
    m.max_tokens = options_.max_tokens > 0 ? options_.max_tokens : m.context;
    m.mode = options_.mode;
    m.kv_type = options_.kv_type;
    tracker_ = std::make_unique<GenerationTracker>();
    ctx_.tracker = tracker_.get();
    started_ = static_cast<int64_t>(std::time(nullptr));
    if (stopping_) return;
    ready_ = true;
    std::fprintf(stderr, "photon serve: ready: model '%s' on %s, context %d, %s\n", m.name.c_str(),
                 photon_model_device(result.model), m.context,
                 options_.api_key.empty() ? "no API key" : "API key required");
  }

  void on_signal() {
    // Waits for the next signal first: the shutdown may end at once and cancel that wait.
    signals_.async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) on_signal();
    });
    if (!stopping_) {
      begin_shutdown();
    } else if (tracker_ && !stop_sent_) {
      tracker_->stop_soon();  // a second signal: stop now, still saving conversations
      stop_sent_ = true;
    }
  }

  void begin_shutdown() {
    if (stopping_) return;
    stopping_ = true;
    ctx_.stopping = true;
    cancel_load_.store(true);
    stop_started_ = SteadyClock::now();
    std::fprintf(stderr, "photon serve: stopping (%zu requests under way)\n",
                 tracker_ ? tracker_->active() : size_t{0});
    http_.shut_down();
    shutdown_tick();
  }

  void shutdown_tick() {
    const auto elapsed = SteadyClock::now() - stop_started_;
    const bool idle = !loading_ && (!tracker_ || tracker_->active() == 0) &&
                      offload_->in_flight() == 0 && http_.open_connections() == 0;
    if (idle || elapsed >= options_.shutdown_timeout + kStopToCancel + kCancelToExit) {
      if (!idle) std::fprintf(stderr, "photon serve: requests still under way; exiting anyway\n");
      signals_.cancel();
      work_.reset();
      if (!idle) io_.stop();
      return;
    }
    if (tracker_ && !stop_sent_ && elapsed >= options_.shutdown_timeout) {
      tracker_->stop_soon();
      stop_sent_ = true;
    }
    if (tracker_ && !cancel_sent_ && elapsed >= options_.shutdown_timeout + kStopToCancel) {
      tracker_->cancel_all();
      cancel_sent_ = true;
    }
    shutdown_timer_.expires_after(kShutdownTick);
    shutdown_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) shutdown_tick();
    });
  }

  struct ModelHandles {
    photon_model* model = nullptr;
    photon_engine* engine = nullptr;
    ~ModelHandles() {
      photon_engine_free(engine);
      photon_model_free(model);
    }
  };

  const ServeOptions options_;
  // Destroyed last: every request (held by the members below) is freed before the engine and the
  // model, and ~Server stops the engine before anything below goes.
  ModelHandles model_;
  net::io_context io_;
  ServerContext ctx_;
  std::unique_ptr<ConversationStore> store_;
  std::unique_ptr<BlockingRunner> offload_;
  HttpServer http_;
  std::unique_ptr<GenerationTracker> tracker_;
  net::signal_set signals_;
  net::steady_timer shutdown_timer_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::thread loader_;
  std::atomic<bool> cancel_load_{false};
  bool loading_ = false;
  bool ready_ = false;
  bool stopping_ = false;
  bool stop_sent_ = false;
  bool cancel_sent_ = false;
  std::string load_error_;
  SteadyClock::time_point stop_started_;
  int64_t started_ = 0;
};

}  // namespace

int run_server(const ServeOptions& options) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed stderr or socket shows up as an error, not a signal
  Server server(options);
  return server.run();
}

}  // namespace photon::serve
