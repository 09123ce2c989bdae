// The directory store: one file per conversation, named <id>.conv, written to a temporary name,
// flushed to disk and renamed (a reader or a crash never sees half a file). An index in memory
// (built from the directory at start-up) holds each file's version, size and age, so that saves
// compare versions and evict the oldest files without reading the directory again. One server
// process per directory.
//
// File layout (little-endian): "PHCONV01", u64 version, u32 flags (bit 0: has text),
// u64 n + text, u64 n + n int32 tokens, u64 n + state bytes, u64 FNV-1a of everything before.
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

#include "serve/conversation_store.h"

namespace photon::serve {
namespace {

constexpr char kMagic[8] = {'P', 'H', 'C', 'O', 'N', 'V', '0', '1'};
constexpr const char* kSuffix = ".conv";
// Temporary files start with a dot, which no conversation id does.
constexpr const char* kTempPrefix = ".tmp-";
constexpr size_t kMaxIdLength = 128;

uint64_t fnv1a(const uint8_t* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string errno_text() {
  return std::strerror(errno);
}

// Appends into a buffer sized in advance.
class Writer {
 public:
  explicit Writer(size_t size) : out(size) {}
  void bytes(const void* p, size_t n) {
    if (n) std::memcpy(out.data() + at_, p, n);
    at_ += n;
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  void u32(uint32_t v) { bytes(&v, sizeof v); }
  std::vector<uint8_t> out;

 private:
  size_t at_ = 0;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool bytes(void* dst, size_t n) {
    if (n > n_ - at_) return false;
    std::memcpy(dst, p_ + at_, n);
    at_ += n;
    return true;
  }
  bool u64(uint64_t& v) { return bytes(&v, sizeof v); }
  bool u32(uint32_t& v) { return bytes(&v, sizeof v); }
  // A length that the rest of the file can hold, of elements of `size` bytes.
  bool count(uint64_t& v, size_t size) { return u64(v) && v <= (n_ - at_) / size; }
  size_t at() const { return at_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

std::vector<uint8_t> encode(uint64_t version, const Conversation& c) {
  Writer w(sizeof kMagic + 8 + 4 + 8 + c.text.size() + 8 + c.tokens.size() * sizeof(int32_t) + 8 +
           c.state.size() + 8);
  w.bytes(kMagic, sizeof kMagic);
  w.u64(version);
  w.u32(c.has_text ? 1u : 0u);
  w.u64(c.text.size());
  w.bytes(c.text.data(), c.text.size());
  w.u64(c.tokens.size());
  w.bytes(c.tokens.data(), c.tokens.size() * sizeof(int32_t));
  w.u64(c.state.size());
  w.bytes(c.state.data(), c.state.size());
  w.u64(fnv1a(w.out.data(), w.out.size() - 8));
  return std::move(w.out);
}

std::optional<Conversation> decode(const std::vector<uint8_t>& file) {
  if (file.size() < sizeof kMagic + 8 || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  const size_t body = file.size() - 8;
  uint64_t checksum = 0;
  std::memcpy(&checksum, file.data() + body, 8);
  if (checksum != fnv1a(file.data(), body)) return std::nullopt;
  Reader r(file.data() + sizeof kMagic, body - sizeof kMagic);
  Conversation c;
  uint32_t flags = 0;
  uint64_t n = 0;
  if (!r.u64(c.version) || !r.u32(flags) || !r.count(n, 1)) return std::nullopt;
  c.has_text = (flags & 1u) != 0;
  c.text.resize(n);
  if (!r.bytes(c.text.data(), n) || !r.count(n, sizeof(int32_t))) return std::nullopt;
  c.tokens.resize(n);
  if (!r.bytes(c.tokens.data(), n * sizeof(int32_t)) || !r.count(n, 1)) return std::nullopt;
  c.state.resize(n);
  if (!r.bytes(c.state.data(), n) || r.at() != body - sizeof kMagic) return std::nullopt;
  return c;
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (index_.find(id) == index_.end()) return std::nullopt;
    }
    std::vector<uint8_t> file;
    if (!read_whole(path(id), file)) return std::nullopt;
    return decode(file);
  }

  SaveResult save(const std::string& id, uint64_t expected, const Conversation& c) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = index_.find(id);
    const uint64_t stored = it == index_.end() ? 0 : it->second.version;
    if (stored != expected) return SaveResult::Conflict;
    const std::vector<uint8_t> data = encode(expected + 1, c);
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
      uint64_t version = 0;
      const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char head[sizeof kMagic + sizeof version];
      const bool ok = ::read(fd, head, sizeof head) == static_cast<ssize_t>(sizeof head) &&
                      std::memcmp(head, kMagic, sizeof kMagic) == 0;
      ::close(fd);
      if (!ok) continue;
      std::memcpy(&version, head + sizeof kMagic, sizeof version);
      found.push_back({id, {version, static_cast<uint64_t>(st.st_size), 0}, st.st_mtim});
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
  if (spec.find("://") != std::string::npos)
    throw std::runtime_error("--store " + spec +
                             ": only a directory store is built in (give a directory path)");
  return std::make_unique<DirectoryStore>(spec, max_bytes);
}

}  // namespace photon::serve
