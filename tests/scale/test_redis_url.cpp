// --store redis://... parsed into its parts, and the URLs refused with what is wrong.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "serve/redis_store.h"

namespace photon::serve {
namespace {

TEST(RedisUrl, Defaults) {
  const RedisAddress a = parse_redis_url("redis://cache.internal");
  EXPECT_EQ(a.host, "cache.internal");
  EXPECT_EQ(a.port, 6379);
  EXPECT_EQ(a.db, 0);
  EXPECT_EQ(a.ttl_seconds, 604800);
  EXPECT_DOUBLE_EQ(a.timeout_seconds, 1.0);
}

TEST(RedisUrl, EveryPart) {
  const RedisAddress a = parse_redis_url("redis://127.0.0.1:6390/3?ttl=3600&timeout=0.25");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 6390);
  EXPECT_EQ(a.db, 3);
  EXPECT_EQ(a.ttl_seconds, 3600);
  EXPECT_DOUBLE_EQ(a.timeout_seconds, 0.25);
  const RedisAddress v6 = parse_redis_url("redis://[::1]:7000?timeout=2");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 7000);
  EXPECT_DOUBLE_EQ(v6.timeout_seconds, 2.0);
}

void expect_refused(const std::string& url, const std::string& fragment) {
  try {
    parse_redis_url(url);
    ADD_FAILURE() << url << " was accepted";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(url), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(RedisUrl, Refused) {
  expect_refused("rediss://host", "not a redis:// URL");
  expect_refused("redis://", "no host");
  expect_refused("redis://:6379", "no host");
  expect_refused("redis://host:", "port");
  expect_refused("redis://host:0", "port");
  expect_refused("redis://host:65536", "port");
  expect_refused("redis://host:12ab", "port");
  expect_refused("redis://host/x", "database");
  expect_refused("redis://user:secret@host", "password");
  expect_refused("redis://[::1", "']'");
  expect_refused("redis://host?ttl=0", "ttl");
  expect_refused("redis://host?ttl=1.5", "ttl");
  expect_refused("redis://host?timeout=0", "timeout");
  expect_refused("redis://host?timeout=fast", "timeout");
  expect_refused("redis://host?color=blue", "unknown option 'color'");
}

}  // namespace
}  // namespace photon::serve
