// The directory store: one file per conversation, named <id>.conv, written to a temporary name,
// flushed to disk and renamed (a reader or a crash never sees half a file). An index in memory
// (built from the directory at start-up) holds each file's version, size and age, so that saves
// compare versions and evict the oldest files without reading the directory again. One server
// process per directory.
//
// Each file holds one record (conversation_record.h).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include "serve/conversation_record.h"
#include "serve/redis_store.h"

namespace photon::serve {
namespace {

constexpr const char* kSuffix = ".conv";
// Temporary files start with a dot, which no conversation id does.
constexpr const char* kTempPrefix = ".tmp-";
constexpr size_t kMaxIdLength = 128;

std::string errno_text() {
  return std::strerror(errno);
}

bool read_whole(const std::string& path, std::vector<uint8_t>& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st = {};
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    out.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (ok && done < out.size()) {
      const ssize_t got = ::read(fd, out.data() + done, out.size() - done);
      if (got < 0 && errno == EINTR) continue;
      ok = got > 0;
      if (ok) done += static_cast<size_t>(got);
    }
  }
  ::close(fd);
  return ok;
}

void write_all(int fd, const std::vector<uint8_t>& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t put = ::write(fd, data.data() + done, data.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw std::runtime_error("cannot write " + path + ": " + errno_text());
    done += static_cast<size_t>(put);
  }
}

class DirectoryStore final : public ConversationStore {
 public:
  DirectoryStore(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_(max_bytes) {
    if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create the store directory " + dir_ + ": " + errno_text());
    scan();
  }

  std::optional<Conversation> load(const std::string& id) override {
    Conversation refused;
    refused.refused = true;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = index_.find(id);
      if (it == index_.end()) return std::nullopt;
      refused.version = it->second.version;
    }
    std::vector<uint8_t> file;
    if (!read_whole(path(id), file)) return std::nullopt;
    std::optional<Conversation> c = decode_conversation(file);
    return c ? c : refused;
  }

  SaveResult save(const std::string& id, uint64_t expected, const Conversation& c) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = index_.find(id);
    const uint64_t stored = it == index_.end() ? 0 : it->second.version;
    if (stored != expected) return SaveResult::Conflict;
    const std::vector<uint8_t> data = encode_conversation(expected + 1, c);
    if (data.size() > max_) return SaveResult::TooLarge;
    const std::string final_path = path(id);
    const std::string temp = dir_ + "/" + kTempPrefix + std::to_string(::getpid()) + "-" +
                             std::to_string(++temp_counter_) + "-" + id;
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error("cannot create " + temp + ": " + errno_text());
    try {
      write_all(fd, data, temp);
      if (::fsync(fd) != 0) throw std::runtime_error("cannot flush " + temp + ": " + errno_text());
    } catch (...) {
      ::close(fd);
      ::unlink(temp.c_str());
      throw;
    }
    ::close(fd);
    if (::rename(temp.c_str(), final_path.c_str()) != 0) {
      const std::string error = errno_text();
      ::unlink(temp.c_str());
      throw std::runtime_error("cannot rename " + temp + " to " + final_path + ": " + error);
    }
    if (it != index_.end()) total_ -= it->second.bytes;
    index_[id] = {expected + 1, data.size(), ++age_};
    total_ += data.size();
    evict(id);
    return SaveResult::Saved;
  }

  uint64_t stored_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return total_;
  }
  uint64_t stored_count() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return index_.size();
  }
  uint64_t evicted_count() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return evicted_;
  }
  std::string describe() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return "directory " + dir_ + " (" + std::to_string(index_.size()) + " conversations, cap " +
           std::to_string(max_ >> 20) + " MiB)";
  }

 private:
  struct Entry {
    uint64_t version;
    uint64_t bytes;
    uint64_t age;  // the order of the last saves: smaller is older
  };

  std::string path(const std::string& id) const { return dir_ + "/" + id + kSuffix; }

  // Builds the index from the directory: each file's version (from its header), size and age
  // (modification time); removes temporary files a crash left behind.
  void scan() {
    DIR* d = ::opendir(dir_.c_str());
    if (!d)
      throw std::runtime_error("cannot read the store directory " + dir_ + ": " + errno_text());
    struct Found {
      std::string id;
      Entry entry;
      struct timespec mtime;
    };
    std::vector<Found> found;
    while (const struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      const std::string full = dir_ + "/" + name;
      if (name.rfind(kTempPrefix, 0) == 0) {
        ::unlink(full.c_str());
        continue;
      }
      const size_t suffix = std::strlen(kSuffix);
      if (name.size() <= suffix || name.compare(name.size() - suffix, suffix, kSuffix) != 0)
        continue;
      const std::string id = name.substr(0, name.size() - suffix);
      if (!valid_conversation_id(id)) continue;
      struct stat st = {};
      if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      uint8_t head[16];
      const ssize_t got = ::read(fd, head, sizeof head);
      ::close(fd);
      const std::optional<uint64_t> version =
          record_version(head, got > 0 ? static_cast<size_t>(got) : 0);
      if (!version) continue;
      found.push_back({id, {*version, static_cast<uint64_t>(st.st_size), 0}, st.st_mtim});
    }
    ::closedir(d);
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec
                                              : a.mtime.tv_nsec < b.mtime.tv_nsec;
    });
    for (Found& f : found) {
      f.entry.age = ++age_;
      total_ += f.entry.bytes;
      index_[f.id] = f.entry;
    }
    evict("");
  }

  // Removes the oldest conversations (never `keep`) until the total fits the cap.
  void evict(const std::string& keep) {
    while (total_ > max_) {
      auto oldest = index_.end();
      for (auto it = index_.begin(); it != index_.end(); ++it)
        if (it->first != keep && (oldest == index_.end() || it->second.age < oldest->second.age))
          oldest = it;
      if (oldest == index_.end()) return;
      ::unlink(path(oldest->first).c_str());
      total_ -= oldest->second.bytes;
      index_.erase(oldest);
      ++evicted_;
    }
  }

  const std::string dir_;
  const uint64_t max_;
  mutable std::mutex mutex_;  // guards what follows
  std::map<std::string, Entry> index_;
  uint64_t total_ = 0;
  uint64_t age_ = 0;
  uint64_t evicted_ = 0;
  uint64_t temp_counter_ = 0;
};

}  // namespace

bool valid_conversation_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength || id.front() == '.') return false;
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::unique_ptr<ConversationStore> open_store(const std::string& spec, uint64_t max_bytes) {
  if (spec.rfind("redis://", 0) == 0) return open_redis_store(parse_redis_url(spec), max_bytes);
  if (spec.find("://") != std::string::npos)
    throw std::runtime_error("--store " + spec + ": give a directory path or a redis:// URL");
  return std::make_unique<DirectoryStore>(spec, max_bytes);
}

}  // namespace photon::serve
