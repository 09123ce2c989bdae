// Internal error type. Code inside the library throws photon::Error; the C API boundary
// (src/api) turns it into a photon_status plus the thread's last-error message. The CUDA backend
// module (libphoton-cuda.so) throws it too, into libphoton: its type information has default
// visibility so that both libraries agree on the type whatever their visibility settings.
#pragma once

#include <stdexcept>
#include <string>

#include "photon.h"

namespace photon {

class __attribute__((visibility("default"))) Error : public std::runtime_error {
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
