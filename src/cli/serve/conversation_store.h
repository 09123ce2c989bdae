// Where conversations that resume are kept between turns: a conversation's text and token history
// and its session state (photon_request_save's bytes), under the client's X-Conversation-Id, with
// a version that every save increments. Saving compares the version first (compare-and-set), so
// two turns of one conversation that run at once cannot overwrite each other unnoticed.
//
// The store is an interface so that other backends (a shared key-value store for several servers)
// can stand beside the directory store; open_store picks one from --store's text. Its calls block
// (file or network I/O): the server makes them on a thread of their own, one at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace photon::serve {

struct Conversation {
  uint64_t version = 0;         // 1 after the first save
  bool has_text = false;        // every turn was given as text
  std::string text;             // the prompts and completions so far (when has_text)
  std::vector<int32_t> tokens;  // the session's token history
  std::vector<uint8_t> state;   // the session state after the last turn
  // The stored record could not be read (damaged, another format): only `version` is known, so
  // that the turn, which reads its whole prompt, can save over it.
  bool refused = false;
};

class ConversationStore {
 public:
  enum class SaveResult {
    Saved,     // stored as version expected + 1
    Conflict,  // the stored version is not `expected`: another turn saved first; nothing written
    TooLarge,  // the conversation alone exceeds the store's size cap; nothing written
  };

  virtual ~ConversationStore() = default;

  // The conversation, or none when it is not stored. A record that cannot be read (damaged,
  // written by another format) comes back `refused`: the turn then runs without it. Throws
  // std::runtime_error when the store cannot be reached.
  virtual std::optional<Conversation> load(const std::string& id) = 0;
  // Stores `conversation` (its version field is ignored) as version expected + 1, provided the
  // stored version is `expected` (0: nothing stored). Throws std::runtime_error on an I/O failure.
  virtual SaveResult save(const std::string& id, uint64_t expected,
                          const Conversation& conversation) = 0;

  // For the metrics; any thread.
  virtual uint64_t stored_bytes() const = 0;
  virtual uint64_t stored_count() const = 0;
  virtual uint64_t evicted_count() const = 0;
  // For the start-up message: what the store is and where.
  virtual std::string describe() const = 0;
};

// An X-Conversation-Id the store accepts: 1 to 128 of A-Z a-z 0-9 '.' '_' '-', not starting with
// '.'. Only such an id reaches the file system (as a file name).
bool valid_conversation_id(std::string_view id);

// The store --store names: a directory path (created if missing, its parent must exist) holding
// one file per conversation, at most max_bytes in all (the oldest saved are removed first); or
// redis://HOST[:PORT][/DB][?ttl=S&timeout=S], a Redis server that several servers share
// (redis_store.h), records of at most max_bytes each. Throws std::runtime_error naming the path
// or URL when it cannot be used.
std::unique_ptr<ConversationStore> open_store(const std::string& spec, uint64_t max_bytes);

}  // namespace photon::serve
