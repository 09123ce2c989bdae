// HTTP/1.1 connections on Boost.Beast: Beast parses requests (with header and body limits and
// tcp_stream's timeouts); replies are written as plain bytes, streams with chunked encoding, one
// write in flight per connection and the rest queued, so a slow client holds only its own queue.
// While a reply is under way the socket is watched for readability: a client that closes its
// connection makes it readable at once (end of file), which is how a disconnect is noticed
// without waiting for a write to fail.
#include <sys/socket.h>

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <set>

#include "serve/api_error.h"
#include "serve/http.h"

namespace photon::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name) return &value;
  return nullptr;
}

std::string_view HttpRequest::path() const {
  return std::string_view(target).substr(0, target.find('?'));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

namespace {

constexpr auto kLingerTime = std::chrono::seconds(1);
constexpr size_t kLingerBytes = 1u << 20;
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

std::string to_string(beast::string_view s) {
  return std::string(s.data(), s.size());
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string status_line(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
}

std::string seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

}  // namespace

class Connection;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  Impl(net::io_context& context, RequestHandler& h, const HttpOptions& o)
      : io(context), handler(h), options(o), acceptor(context), accept_retry(context) {}

  void accept();

  net::io_context& io;
  RequestHandler& handler;
  const HttpOptions options;
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;
  std::set<Connection*> connections;
  bool stopping = false;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<HttpServer::Impl> server)
      : stream_(std::move(socket)),
        server_(std::move(server)),
        ping_(stream_.get_executor()),
        read_deadline_(stream_.get_executor()) {
    server_->connections.insert(this);
  }
  ~Connection() { server_->connections.erase(this); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void start(bool refuse) {
    if (refuse) {
      reject(503, "the server has too many open connections; try again later");
      return;
    }
    read_request();
  }

  void close_if_idle() {
    if (reading_idle_) close();
  }

  // ---- the current exchange (serial tells a stale one) ----
  void respond(uint64_t serial, HttpResponse r) {
    if (serial != serial_ || reply_ != Reply::Pending) return;
    const bool keep = keep_alive_ && !server_->stopping;
    std::string out = status_line(r.status);
    out += "Content-Type: " + r.content_type + "\r\n";
    out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
    out += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    out += r.body;
    keep_alive_ = keep;
    reply_ = Reply::Done;
    write(std::move(out));
    finish_reply();
  }

  void start_stream(uint64_t serial, const Headers& headers) {
    if (serial != serial_ || reply_ != Reply::Pending) return;
    // HTTP/1.0 has no chunked encoding: the stream then ends with the connection.
    chunked_ = http11_;
    if (!chunked_) keep_alive_ = false;
    std::string out = status_line(200);
    out +=
        "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
    for (const auto& [name, value] : headers) out += name + ": " + value + "\r\n";
    out += chunked_ ? "Transfer-Encoding: chunked\r\n\r\n" : "Connection: close\r\n\r\n";
    reply_ = Reply::Streaming;
    write(std::move(out));
    schedule_ping();
  }

  void send(uint64_t serial, std::string_view data) {
    if (serial != serial_ || reply_ != Reply::Streaming || data.empty()) return;
    sent_since_ping_ = true;
    write_chunk(data);
  }

  void end_stream(uint64_t serial) {
    if (serial != serial_ || reply_ != Reply::Streaming) return;
    if (chunked_) write("0\r\n\r\n");
    if (server_->stopping) keep_alive_ = false;
    reply_ = Reply::Done;
    ping_.cancel();
    finish_reply();
  }

  void on_gone(uint64_t serial, std::function<void()> callback) {
    if (serial != serial_) return;
    if (gone_) {
      if (reply_ != Reply::Done) callback();
      return;
    }
    on_gone_ = std::move(callback);
  }

  bool gone(uint64_t serial) const { return serial != serial_ || gone_; }

  // Replies the handler dropped without answering get a 500 rather than a hung connection.
  void abandoned(uint64_t serial) {
    if (serial != serial_) return;
    if (reply_ == Reply::Pending) {
      respond(serial, {500,
                       "application/json",
                       ApiError(500, "the server dropped this request", "server_error").body(),
                       {}});
    } else if (reply_ == Reply::Streaming) {
      end_stream(serial);
    }
  }

 private:
  enum class Reply { None, Pending, Streaming, Done };

  void read_request() {
    reply_ = Reply::None;
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(server_->options.max_header_bytes);
    reading_idle_ = true;
    stream_.expires_never();
    arm_read_deadline(server_->options.header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    reading_idle_ = false;
    if (ec) return read_failed(ec);
    ++read_serial_;  // the header's deadline is over; the body's follows
    const auto& request = parser_->get();
    http11_ = request.version() >= 11;
    keep_alive_ = request.keep_alive();
    const auto length = parser_->content_length();
    if (length && *length > server_->options.max_body_bytes)
      return reject(413, "the request body has " + std::to_string(*length) +
                             " bytes; this server takes at most " +
                             std::to_string(server_->options.max_body_bytes));
    const auto expect = request.find(http::field::expect);
    if (expect != request.end() && lower(to_string(expect->value())) == "100-continue") {
      // 25 bytes into a socket that has sent nothing yet: the kernel takes them at once.
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      beast::error_code ignored;
      net::write(stream_.socket(), net::buffer(kContinue, sizeof kContinue - 1), ignored);
    }
    arm_read_deadline(server_->options.body_timeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code e, size_t) { self->on_body(e); });
  }

  void on_body(beast::error_code ec) {
    if (ec) return read_failed(ec);
    read_deadline_.cancel();
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    HttpRequest request;
    request.received = SteadyClock::now();
    request.method = to_string(message.method_string());
    request.target = to_string(message.target());
    for (const auto& field : message)
      request.headers.emplace_back(lower(to_string(field.name_string())), to_string(field.value()));
    request.body = std::move(message.body());
    ++serial_;
    reply_ = Reply::Pending;
    on_gone_ = nullptr;
    watch();
    server_->handler.handle(std::move(request), make_exchange());
  }

  std::shared_ptr<Exchange> make_exchange();

  // A read's deadline of its own (not tcp_stream's, which closes the socket when it expires):
  // a request that stalls half-way still gets its 408.
  void arm_read_deadline(std::chrono::milliseconds timeout) {
    read_timed_out_ = false;
    read_deadline_.expires_after(timeout);
    read_deadline_.async_wait(
        [self = shared_from_this(), serial = ++read_serial_](beast::error_code ec) {
          if (ec || serial != self->read_serial_ || self->closed_) return;
          self->read_timed_out_ = true;
          beast::error_code ignored;
          self->stream_.socket().cancel(ignored);
        });
  }

  void read_failed(beast::error_code ec) {
    ++read_serial_;  // the deadline no longer applies
    read_deadline_.cancel();
    if (read_timed_out_) {
      read_timed_out_ = false;
      if (parser_ && parser_->got_some())
        return reject(408,
                      "the request did not arrive within the server's read timeout (" +
                          seconds(parser_->is_header_done() ? server_->options.body_timeout
                                                            : server_->options.header_timeout) +
                          " s)");
      return close();
    }
    if (ec == http::error::header_limit)
      return reject(431, "the request's headers exceed " +
                             std::to_string(server_->options.max_header_bytes) + " bytes");
    if (ec == http::error::body_limit)
      return reject(413, "the request body exceeds " +
                             std::to_string(server_->options.max_body_bytes) + " bytes");
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted ||
        ec == net::error::bad_descriptor || closed_)
      return close();
    reject(400, "malformed HTTP request: " + ec.message());
  }

  // Answers an error the HTTP layer found itself, then closes the connection.
  void reject(int status, const std::string& message) {
    server_->handler.rejected(status);
    ++serial_;
    reply_ = Reply::Pending;
    keep_alive_ = false;
    HttpResponse r;
    r.status = status;
    r.body =
        ApiError(status, message, status >= 500 ? "server_error" : "invalid_request_error").body();
    if (status == 503) r.headers.emplace_back("Retry-After", "1");
    respond(serial_, std::move(r));
  }

  // ---- writing ----
  void write_chunk(std::string_view data) {
    if (!chunked_) return write(std::string(data));
    char size[20];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string out;
    out.reserve(static_cast<size_t>(n) + data.size() + 2);
    out.append(size, static_cast<size_t>(n));
    out.append(data);
    out.append("\r\n");
    write(std::move(out));
  }

  void write(std::string data) {
    if (closed_) return;
    out_ += data;
    if (!writing_) flush();
  }

  void flush() {
    writing_ = true;
    in_flight_.swap(out_);
    out_.clear();
    stream_.expires_after(server_->options.write_timeout);
    net::async_write(
        stream_, net::buffer(in_flight_),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_written(ec); });
  }

  void on_written(beast::error_code ec) {
    writing_ = false;
    in_flight_.clear();
    if (ec) return lost();
    if (!out_.empty()) return flush();
    stream_.expires_never();
    if (reply_ == Reply::Done) after_reply();
  }

  // The reply is queued in full: once written, read the next request or close.
  void finish_reply() {
    if (!writing_ && out_.empty()) after_reply();
  }

  void after_reply() {
    if (closed_) return;
    if (watching_) {
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      watching_ = false;
    }
    if (keep_alive_ && !server_->stopping) return read_request();
    linger_close();
  }

  // ---- the client going away ----
  void watch() {
    watching_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(),
                                                         serial = serial_](beast::error_code ec) {
      if (ec == net::error::operation_aborted || serial != self->serial_) return;
      self->watching_ = false;
      if (self->reply_ == Reply::Done || self->reply_ == Reply::None) return;
      if (ec) return self->lost();
      char byte;
      const ssize_t n =
          ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return self->lost();
      if (n < 0) return self->watch();
      // A pipelined request: it waits in the socket until this reply ends. A disconnect is
      // then noticed by the writes (and the stream's pings).
    });
  }

  void lost() {
    if (gone_) return;
    gone_ = true;
    ping_.cancel();
    close();
    std::function<void()> callback = std::move(on_gone_);
    on_gone_ = nullptr;
    if (callback && reply_ != Reply::Done) callback();
  }

  void schedule_ping() {
    sent_since_ping_ = false;
    ping_.expires_after(server_->options.ping_interval);
    ping_.async_wait([self = shared_from_this(), serial = serial_](beast::error_code ec) {
      if (ec || serial != self->serial_ || self->reply_ != Reply::Streaming || self->closed_)
        return;
      if (!self->sent_since_ping_) self->write_chunk(": ping\n\n");
      self->schedule_ping();
    });
  }

  // ---- closing ----
  void close() {
    if (closed_) return;
    closed_ = true;
    ping_.cancel();
    read_deadline_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  // Half-closes, then reads and drops what the client still sends for a moment before closing:
  // closing a socket with unread input resets the connection, and the client could lose the reply.
  void linger_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    drain_.resize(4096);
    stream_.expires_after(kLingerTime);
    linger_read(0);
  }

  void linger_read(size_t drained) {
    stream_.async_read_some(net::buffer(drain_),
                            [self = shared_from_this(), drained](beast::error_code ec, size_t n) {
                              if (ec || drained + n > kLingerBytes) return self->close();
                              self->linger_read(drained + n);
                            });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpServer::Impl> server_;
  net::steady_timer ping_;
  net::steady_timer read_deadline_;
  uint64_t read_serial_ = 0;
  bool read_timed_out_ = false;

  bool reading_idle_ = false;  // waiting for a request's header (shut_down closes these)
  bool keep_alive_ = false;
  bool http11_ = true;
  bool chunked_ = true;
  uint64_t serial_ = 0;  // the current exchange
  Reply reply_ = Reply::None;
  bool closed_ = false;
  bool gone_ = false;
  bool watching_ = false;
  bool sent_since_ping_ = false;
  std::function<void()> on_gone_;
  std::string out_;        // queued for writing
  std::string in_flight_;  // being written
  bool writing_ = false;
  std::string drain_;
};

namespace {

class ConnectionExchange final : public Exchange {
 public:
  ConnectionExchange(std::shared_ptr<Connection> c, uint64_t serial)
      : c_(std::move(c)), serial_(serial) {}
  ~ConnectionExchange() override { c_->abandoned(serial_); }
  ConnectionExchange(const ConnectionExchange&) = delete;
  ConnectionExchange& operator=(const ConnectionExchange&) = delete;

  void respond(HttpResponse response) override { c_->respond(serial_, std::move(response)); }
  void start_stream(const Headers& headers) override { c_->start_stream(serial_, headers); }
  void send(std::string_view data) override { c_->send(serial_, data); }
  void end_stream() override { c_->end_stream(serial_); }
  void on_gone(std::function<void()> callback) override {
    c_->on_gone(serial_, std::move(callback));
  }
  bool gone() const override { return c_->gone(serial_); }

 private:
  std::shared_ptr<Connection> c_;
  uint64_t serial_;
};

}  // namespace

std::shared_ptr<Exchange> Connection::make_exchange() {
  return std::make_shared<ConnectionExchange>(shared_from_this(), serial_);
}

void HttpServer::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->stopping || !self->acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or a connection reset before it was accepted: try again shortly.
      self->accept_retry.expires_after(kAcceptRetry);
      self->accept_retry.async_wait([self](beast::error_code e) {
        if (!e) self->accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    const bool refuse = self->connections.size() >= self->options.max_connections;
    self->handler.connection(!refuse);
    std::make_shared<Connection>(std::move(socket), self)->start(refuse);
    self->accept();
  });
}

HttpServer::HttpServer(net::io_context& io, RequestHandler& handler, const HttpOptions& options)
    : impl_(std::make_shared<Impl>(io, handler, options)) {}

HttpServer::~HttpServer() {
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

uint16_t HttpServer::listen(const std::string& host, uint16_t port) {
  beast::error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(
      host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty())
    throw std::runtime_error("cannot resolve --host " + host + ": " + ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    a.close(ignored);
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                             ec.message());
  }
  return a.local_endpoint().port();
}

void HttpServer::start() {
  impl_->accept();
}

void HttpServer::shut_down() {
  impl_->stopping = true;
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
  impl_->accept_retry.cancel();
  // Closing may destroy a connection, which erases itself from the set: iterate over a copy.
  std::vector<std::shared_ptr<Connection>> open;
  for (Connection* c : impl_->connections) open.push_back(c->shared_from_this());
  for (auto& c : open) c->close_if_idle();
}

size_t HttpServer::open_connections() const {
  return impl_->connections.size();
}

}  // namespace photon::serve
