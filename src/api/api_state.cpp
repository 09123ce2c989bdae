// photon_session_save* / photon_session_restore*: session state blobs and files.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "api/api_internal.h"
#include "engine/session_state.h"

using photon::api::guard;
using photon::api::require;

namespace {

std::vector<uint8_t> save_blob(photon_session* session, const char* function) {
  require(session, function, "session is NULL");
  return photon::save_session(*session->session, function);
}

photon_session* restore_blob(const photon_model* model, std::span<const uint8_t> blob) {
  auto handle = std::make_unique<photon_session>();
  handle->owner = model;
  handle->session = photon::restore_session(*model->model, blob);
  handle->session->reserve_context();
  return handle.release();
}

}  // namespace

extern "C" {

photon_status photon_session_save(photon_session* session, void* buffer, size_t capacity,
                                  size_t* size) {
  return guard([&] {
    require(size, "photon_session_save", "size is NULL");
    const std::vector<uint8_t> blob = save_blob(session, "photon_session_save");
    *size = blob.size();
    if (capacity < blob.size() || !buffer)
      photon::fail(PHOTON_ERR_BUFFER_TOO_SMALL,
                   "photon_session_save: the state needs " + std::to_string(blob.size()) +
                       " bytes, the buffer holds " + std::to_string(capacity));
    std::memcpy(buffer, blob.data(), blob.size());
  });
}

photon_status photon_session_save_file(photon_session* session, const char* path) {
  return guard([&] {
    require(path && *path, "photon_session_save_file", "path is NULL or empty");
    const std::vector<uint8_t> blob = save_blob(session, "photon_session_save_file");
    const std::string tmp = std::string(path) + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) photon::fail(PHOTON_ERR_IO, std::string(path) + ": cannot create " + tmp);
      out.write(reinterpret_cast<const char*>(blob.data()),
                static_cast<std::streamsize>(blob.size()));
      out.flush();
      if (!out) {
        std::remove(tmp.c_str());
        photon::fail(PHOTON_ERR_IO, std::string(path) + ": write error");
      }
    }
    if (std::rename(tmp.c_str(), path) != 0) {
      std::remove(tmp.c_str());
      photon::fail(PHOTON_ERR_IO, std::string(path) + ": cannot rename " + tmp + " into place");
    }
  });
}

photon_status photon_session_restore(const photon_model* model, const void* data, size_t size,
                                     photon_session** out) {
  return guard([&] {
    require(model, "photon_session_restore", "model is NULL");
    require(data || size == 0, "photon_session_restore", "data is NULL");
    require(out, "photon_session_restore", "out is NULL");
    *out = restore_blob(model, {static_cast<const uint8_t*>(data), size});
  });
}

photon_status photon_session_restore_file(const photon_model* model, const char* path,
                                          photon_session** out) {
  return guard([&] {
    require(model, "photon_session_restore_file", "model is NULL");
    require(path, "photon_session_restore_file", "path is NULL");
    require(out, "photon_session_restore_file", "out is NULL");
    std::ifstream in(path, std::ios::binary);
    if (!in) photon::fail(PHOTON_ERR_IO, std::string(path) + ": cannot open the session state");
    const std::vector<uint8_t> blob((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    if (in.bad()) photon::fail(PHOTON_ERR_IO, std::string(path) + ": read error");
    try {
      *out = restore_blob(model, blob);
    } catch (const photon::Error& e) {
      throw photon::Error(e.status(), std::string(path) + ": " + e.what());
    }
  });
}

}  // extern "C"
