#include "serving/prefix_cache.h"

#include <algorithm>
#include <utility>

namespace photon::serving {

const PrefixCache::Entry* PrefixCache::find(const Key& key, std::span<const int32_t> prompt) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!(it->key == key) || it->tokens.size() > prompt.size()) continue;
    if (!extends(key) && it->tokens.size() < prompt.size()) continue;
    if (best != entries_.end() && it->tokens.size() <= best->tokens.size()) continue;
    if (std::equal(it->tokens.begin(), it->tokens.end(), prompt.begin())) best = it;
  }
  if (best == entries_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, best);
  return &entries_.front();
}

void PrefixCache::insert(const Key& key, std::vector<int32_t> tokens, std::vector<uint8_t> state) {
  const auto same = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.key == key && e.tokens == tokens;
  });
  if (same != entries_.end()) {
    bytes_ -= size_of(*same);
    entries_.erase(same);
  }
  Entry entry{key, std::move(tokens), std::move(state)};
  const uint64_t size = size_of(entry);
  if (size > capacity_) return;
  entries_.push_front(std::move(entry));
  bytes_ += size;
  while (bytes_ > capacity_) {
    bytes_ -= size_of(entries_.back());
    entries_.pop_back();
  }
}

}  // namespace photon::serving
