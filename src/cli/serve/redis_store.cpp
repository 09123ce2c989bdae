#include "serve/redis_store.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "serve/conversation_record.h"

namespace photon::serve {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kKeyPrefix = "photon:conversation:";
constexpr auto kReconnectInterval = std::chrono::seconds(1);
constexpr auto kStatsInterval = std::chrono::seconds(5);

// KEYS[1] the conversation; ARGV: the expected version, the new one, the record, the TTL. A key
// that holds something else than a conversation counts as version 0 and is replaced.
constexpr std::string_view kSaveScript = R"(
local kind = redis.call('TYPE', KEYS[1]).ok
local stored = 0
if kind == 'hash' then stored = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0 end
if stored ~= tonumber(ARGV[1]) then return 0 end
if kind ~= 'none' and kind ~= 'hash' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'd', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
)";

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  throw std::runtime_error("--store " + url + ": " + why +
                           " (give redis://HOST[:PORT][/DB][?ttl=SECONDS&timeout=SECONDS])");
}

// A whole decimal number in [low, high], or none.
std::optional<int64_t> parse_integer(std::string_view text, int64_t low, int64_t high) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < low || v > high) return std::nullopt;
  return v;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

std::string_view text_of(const redisReply* r) {
  return {r->str, static_cast<size_t>(r->len)};
}

// A field "name:value" of INFO's reply, as a number (0 when absent).
uint64_t info_field(std::string_view info, std::string_view name) {
  const std::string key = "\n" + std::string(name) + ":";
  const size_t at = info.find(key);
  if (at == std::string_view::npos) return 0;
  return std::strtoull(std::string(info.substr(at + key.size(), 20)).c_str(), nullptr, 10);
}

class RedisStore final : public ConversationStore {
 public:
  RedisStore(RedisAddress address, uint64_t max_record_bytes)
      : a_(std::move(address)), max_record_(max_record_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      connect();
      refresh_stats();
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr,
                   "photon serve: warning: %s; turns read their whole prompt until it "
                   "answers\n",
                   e.what());
    }
  }
  ~RedisStore() override {
    if (ctx_) redisFree(ctx_);
  }
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  std::optional<Conversation> load(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = kKeyPrefix + id;
    const Reply r = command({"HMGET", key, "v", "d"}, "HMGET");
    Conversation refused;
    refused.refused = true;
    // A key of another type: not a conversation this store wrote.
    if (r->type == REDIS_REPLY_ERROR && text_of(r.get()).rfind("WRONGTYPE", 0) == 0) return refused;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) unexpected("HMGET", r.get());
    const redisReply* v = r->element[0];
    const redisReply* d = r->element[1];
    if (v->type == REDIS_REPLY_NIL && d->type == REDIS_REPLY_NIL) return std::nullopt;
    if (v->type == REDIS_REPLY_STRING) {
      const auto version = parse_integer(text_of(v), 1, INT64_MAX);
      refused.version = version ? static_cast<uint64_t>(*version) : 0;
    }
    if (d->type != REDIS_REPLY_STRING) return refused;
    const auto* bytes = reinterpret_cast<const uint8_t*>(d->str);
    std::optional<Conversation> c =
        decode_conversation(std::vector<uint8_t>(bytes, bytes + d->len));
    if (!c || c->version != refused.version) return refused;
    return c;
  }

  SaveResult save(const std::string& id, uint64_t expected,
                  const Conversation& conversation) override {
    const std::vector<uint8_t> record = encode_conversation(expected + 1, conversation);
    if (record.size() > max_record_) return SaveResult::TooLarge;
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = kKeyPrefix + id;
    const std::string from = std::to_string(expected);
    const std::string to = std::to_string(expected + 1);
    const std::string ttl = std::to_string(a_.ttl_seconds);
    const std::string_view data(reinterpret_cast<const char*>(record.data()), record.size());
    const Reply r = command({"EVAL", kSaveScript, "1", key, from, to, data, ttl}, "EVAL");
    if (r->type != REDIS_REPLY_INTEGER || (r->integer != 0 && r->integer != 1))
      unexpected("the save script", r.get());
    if (Clock::now() >= stats_due_) {
      try {
        refresh_stats();
      } catch (const std::runtime_error&) {
        // The save itself went through; the figures wait for the next one.
      }
    }
    return r->integer == 1 ? SaveResult::Saved : SaveResult::Conflict;
  }

  uint64_t stored_bytes() const override { return bytes_.load(); }
  uint64_t stored_count() const override { return count_.load(); }
  uint64_t evicted_count() const override { return evicted_.load(); }
  std::string describe() const override {
    char timeout[32];
    std::snprintf(timeout, sizeof timeout, "%g", a_.timeout_seconds);
    return "Redis at " + a_.host + ":" + std::to_string(a_.port) + " database " +
           std::to_string(a_.db) + " (conversations expire " + std::to_string(a_.ttl_seconds) +
           " s after their last save; timeout " + timeout + " s)";
  }

 private:
  std::string where() const { return "Redis at " + a_.host + ":" + std::to_string(a_.port); }

  [[noreturn]] void unexpected(const char* what, const redisReply* r) const {
    const std::string detail =
        r->type == REDIS_REPLY_ERROR ? std::string(text_of(r)) : "type " + std::to_string(r->type);
    throw std::runtime_error(where() + ": unexpected reply to " + what + ": " + detail);
  }

  timeval timeout() const {
    const double whole = std::floor(a_.timeout_seconds);
    return {static_cast<time_t>(whole),
            static_cast<suseconds_t>((a_.timeout_seconds - whole) * 1e6)};
  }

  // Connects, unless the last try failed less than kReconnectInterval ago.
  void connect() {
    const auto now = Clock::now();
    if (now < retry_at_) throw std::runtime_error(where() + " is unavailable: " + last_error_);
    retry_at_ = now + kReconnectInterval;
    redisContext* c = redisConnectWithTimeout(a_.host.c_str(), a_.port, timeout());
    if (!c || c->err) {
      last_error_ = c ? c->errstr : "out of memory";
      if (c) redisFree(c);
      throw std::runtime_error("cannot connect to " + where() + ": " + last_error_);
    }
    if (redisSetTimeout(c, timeout()) != REDIS_OK) {
      last_error_ = c->errstr;
      redisFree(c);
      throw std::runtime_error("cannot set the timeout of " + where() + ": " + last_error_);
    }
    ctx_ = c;
    if (a_.db != 0) {
      const Reply r = command({"SELECT", std::to_string(a_.db)}, "SELECT");
      if (r->type == REDIS_REPLY_ERROR) {
        last_error_ = "database " + std::to_string(a_.db) + ": " + std::string(text_of(r.get()));
        redisFree(ctx_);
        ctx_ = nullptr;
        throw std::runtime_error(where() + ": " + last_error_);
      }
    }
    retry_at_ = {};
  }

  // Sends one command; a connection that failed (down, timed out) is dropped, to be made again
  // by the next command.
  Reply command(std::initializer_list<std::string_view> args, const char* what) {
    if (!ctx_) connect();
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string_view a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lengths.data()));
    if (!r) {
      last_error_ = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
      redisFree(ctx_);
      ctx_ = nullptr;
      throw std::runtime_error(where() + ": " + what + " failed: " + last_error_);
    }
    return Reply(r);
  }

  // The figures /metrics shows, from INFO: Redis's memory, the keys of the database, the keys
  // evicted (maxmemory) or expired (TTL).
  void refresh_stats() {
    stats_due_ = Clock::now() + kStatsInterval;
    const Reply r = command({"INFO"}, "INFO");
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) unexpected("INFO", r.get());
    const std::string info = "\n" + std::string(text_of(r.get()));
    bytes_ = info_field(info, "used_memory");
    count_ = info_field(info, "db" + std::to_string(a_.db) + ":keys");
    evicted_ = info_field(info, "evicted_keys") + info_field(info, "expired_keys");
  }

  const RedisAddress a_;
  const uint64_t max_record_;
  std::mutex mutex_;  // guards what follows
  redisContext* ctx_ = nullptr;
  Clock::time_point retry_at_{};
  Clock::time_point stats_due_{};
  std::string last_error_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> evicted_{0};
};

}  // namespace

RedisAddress parse_redis_url(const std::string& url) {
  constexpr std::string_view scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) bad_url(url, "not a redis:// URL");
  RedisAddress a;
  std::string_view rest = std::string_view(url).substr(scheme.size());
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view authority = rest;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    const auto db = parse_integer(rest.substr(slash + 1), 0, 1 << 20);
    if (!db) bad_url(url, "the database must be a number");
    a.db = static_cast<int>(*db);
  }
  if (authority.find('@') != std::string_view::npos)
    bad_url(url, "passwords are not supported (keep Redis on a private network)");
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) bad_url(url, "an IPv6 address lacks its ']'");
    a.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') bad_url(url, "':' must follow ']'");
    if (!after.empty()) port = after.substr(1);
  } else {
    const size_t colon = authority.find(':');
    a.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (a.host.empty()) bad_url(url, "no host");
  if (!port.empty() || authority.find(':') != std::string_view::npos) {
    const auto p = parse_integer(port, 1, 65535);
    if (!p) bad_url(url, "the port must be in [1, 65535]");
    a.port = static_cast<int>(*p);
  }
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    if (name == "ttl") {
      const auto ttl = parse_integer(value, 1, int64_t{10} * 365 * 24 * 3600);
      if (!ttl) bad_url(url, "ttl must be a whole number of seconds, at least 1");
      a.ttl_seconds = *ttl;
    } else if (name == "timeout") {
      char* end = nullptr;
      const double t = value.empty() ? NAN : std::strtod(value.c_str(), &end);
      if (!(t >= 0.001 && t <= 600) || *end != '\0')
        bad_url(url, "timeout must be a number of seconds in [0.001, 600]");
      a.timeout_seconds = t;
    } else {
      bad_url(url, "unknown option '" + std::string(name) + "'");
    }
  }
  return a;
}

std::unique_ptr<ConversationStore> open_redis_store(const RedisAddress& address,
                                                    uint64_t max_record_bytes) {
  return std::make_unique<RedisStore>(address, max_record_bytes);
}

}  // namespace photon::serve
