#include "serve/api_error.h"

#include <nlohmann/json.hpp>

namespace photon::serve {

std::string ApiError::body() const {
  const auto text_or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
  };
  nlohmann::ordered_json error;
  error["message"] = what();
  error["type"] = type_;
  error["param"] = text_or_null(param_);
  error["code"] = text_or_null(code_);
  nlohmann::ordered_json body;
  body["error"] = std::move(error);
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace photon::serve
