// Internal error type. Code inside the library throws photon::Error; the C API boundary
// (src/api) turns it into a photon_status plus the thread's last-error message. Like everything
// but photon_*, its type information is private to each library: the CUDA backend module
// (libphoton-cuda.so) throws its own, and hands each failure to libphoton as a status and a
// message at the boundary (backend/module.h), never as an exception.
#pragma once

#include <stdexcept>
#include <string>

#include "photon.h"

namespace photon {

class Error : public std::runtime_error {
 public:
  Error(photon_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  photon_status status() const { return status_; }

 private:
  photon_status status_;
};

[[noreturn]] inline void fail(photon_status status, const std::string& message) {
  throw Error(status, message);
}

inline void check(bool ok, photon_status status, const std::string& message) {
  if (!ok) fail(status, message);
}

}  // namespace photon
