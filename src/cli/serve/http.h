// The HTTP/1.1 side of `photon serve`: connections, request parsing with limits and timeouts,
// replies whole or streamed as server-sent events, and noticing a client that went away. Built on
// Boost.Beast / Asio (http_server.cpp, the only file that includes them); everything here runs on
// the server's network thread, one io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace photon::serve {

using Headers = std::vector<std::pair<std::string, std::string>>;
using SteadyClock = std::chrono::steady_clock;

struct HttpRequest {
  std::string method;
  std::string target;  // path and query
  std::string body;
  Headers headers;  // names in lower case
  SteadyClock::time_point received;

  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view name) const;
  // The target without its query.
  std::string_view path() const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;
};

// The reply to one request. The handler calls either respond() once, or start_stream(), any
// number of send() and end_stream(). Calls after the client went away do nothing.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void respond(HttpResponse response) = 0;
  // A 200 reply of server-sent events (text/event-stream, no caching, no proxy buffering) with
  // `headers` besides; while it is open, an SSE comment goes out after each quiet ping interval.
  virtual void start_stream(const Headers& headers) = 0;
  virtual void send(std::string_view data) = 0;
  virtual void end_stream() = 0;
  // `callback` runs (once) if the client goes away before the reply ends: it closed the
  // connection, or stopped reading for the write timeout.
  virtual void on_gone(std::function<void()> callback) = 0;
  virtual bool gone() const = 0;
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  virtual void handle(HttpRequest request, std::shared_ptr<Exchange> exchange) = 0;
  // A reply the HTTP layer made itself (a malformed request, a body over the limit, a timeout).
  virtual void rejected(int status) = 0;
  // A connection was accepted (true) or refused for the connection limit (false).
  virtual void connection(bool accepted) = 0;
};

struct HttpOptions {
  uint64_t max_body_bytes = 4u << 20;
  uint32_t max_header_bytes = 16u << 10;
  size_t max_connections = 1024;
  std::chrono::milliseconds header_timeout{10000};  // also how long an idle connection is kept
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds ping_interval{1000};
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, RequestHandler& handler, const HttpOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0: any free port) and listens; returns the port bound. Throws
  // std::runtime_error naming the address on failure. Call before the io_context runs.
  uint16_t listen(const std::string& host, uint16_t port);
  // Starts accepting connections.
  void start();
  // Stops accepting, closes connections that wait for a request, and lets those with a reply
  // under way finish it, then close.
  void shut_down();
  size_t open_connections() const;

  struct Impl;  // defined in http_server.cpp, shared with its connections

 private:
  std::shared_ptr<Impl> impl_;
};

// "HTTP/1.1 200 OK"'s reason phrase for a status code.
const char* reason_phrase(int status);

}  // namespace photon::serve
