// Helpers of the readers of files (model files, safetensors): messages that name the file (and a
// tensor), and a descriptor closed when it goes out of scope.
#pragma once

#include <unistd.h>

#include <string>

#include "core/error.h"

namespace photon {

class FileErrors {
 public:
  explicit FileErrors(const std::string& path) : path_(path) {}
  [[noreturn]] void fail(photon_status status, const std::string& what) const {
    photon::fail(status, path_ + ": " + what);
  }
  [[noreturn]] void fail_tensor(photon_status status, const std::string& tensor,
                                const std::string& what) const {
    fail(status, "tensor '" + tensor + "' " + what);
  }

 private:
  const std::string& path_;
};

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace photon
