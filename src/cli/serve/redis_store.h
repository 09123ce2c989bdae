// The Redis store: conversations in a Redis server that several servers share, so that any
// replica behind a load balancer can continue any conversation. Each conversation is a hash under
// photon:conversation:<id> with fields v (its version, decimal) and d (its record,
// conversation_record.h), expiring `ttl` seconds after its last save. A save is one Lua script
// (EVAL) that compares the stored version and writes only when it is the expected one, so that of
// two replicas racing on a conversation one saves and the other gets Conflict.
//
// A Redis that is down or slow makes load and save throw after at most the timeout (connecting
// and each command); the server then reads the turn's whole prompt. The next call reconnects, at
// most once a second while Redis stays down. One connection, its calls one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "serve/conversation_store.h"

namespace photon::serve {

struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  int64_t ttl_seconds = 7 * 24 * 3600;  // a week after the last save
  double timeout_seconds = 1.0;         // connecting, and each command
};

// redis://HOST[:PORT][/DB][?ttl=SECONDS&timeout=SECONDS] (HOST may be [IPv6]). Throws
// std::runtime_error naming the URL and what is wrong with it.
RedisAddress parse_redis_url(const std::string& url);

// Connects at once; a Redis that does not answer yet is reported on stderr, not an error (the
// store reconnects when used). Records over max_record_bytes are not saved (TooLarge).
std::unique_ptr<ConversationStore> open_redis_store(const RedisAddress& address,
                                                    uint64_t max_record_bytes);

}  // namespace photon::serve
