// Shared by the fuzz targets: inputs as files, the tiny models inputs run against, and findings
// that are not crashes (a promise of photon.h broken), which abort so that libFuzzer saves them.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "photon.h"
#include "tiny_models.h"

namespace photon::fuzz {

// A finding: prints what was broken and aborts.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::abort();
}

inline void require(bool ok, const std::string& what) {
  if (!ok) finding(what);
}

// PHOTON_ERR_INTERNAL is reserved for bugs in the library.
inline photon_status no_bug(photon_status status, const char* call) {
  if (status == PHOTON_ERR_INTERNAL)
    finding(std::string(call) + " returned PHOTON_ERR_INTERNAL: " + photon_last_error());
  return status;
}

// The input as a file that code taking paths can open: an anonymous memory file named through
// /proc, so nothing touches the disk.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("photon-fuzz", MFD_CLOEXEC);
    require(fd_ >= 0, "memfd_create failed");
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      require(n > 0, "writing the memfd failed");
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  const char* path() const { return path_.c_str(); }

 private:
  int fd_ = -1;
  std::string path_;
};

// The models inputs run against: tiny_config(levels) for levels 0 (vanilla) to 3, written and
// loaded once per process. The seed corpora were made from the same models, so saved states match.
inline photon_model* tiny_model(int levels) {
  // Owned by a static, so that the models are freed at exit and LeakSanitizer sees no leak.
  struct Models {
    Models() {
      for (int l = 0; l <= 3; ++l) {
        const std::string path = dir.file("tiny-" + std::to_string(l) + ".photon");
        hardening::write_tiny_model(path, hardening::tiny_config(l));
        photon_model* m = nullptr;
        require(photon_model_load(path.c_str(), nullptr, &m) == PHOTON_OK, photon_last_error());
        loaded.push_back(m);
      }
    }
    ~Models() {
      for (photon_model* m : loaded) photon_model_free(m);
    }
    hardening::TempDir dir;
    std::vector<photon_model*> loaded;
  };
  static const Models models;
  return models.loaded[static_cast<size_t>(levels)];
}

// Valid UTF-8 (Unicode table 3-7: no overlongs, surrogates or code points above U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
      n = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
      return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if (b(i + k) < (k == 1 ? lo : 0x80) || b(i + k) > (k == 1 ? hi : 0xBF)) return false;
    i += n;
  }
  return true;
}

}  // namespace photon::fuzz
