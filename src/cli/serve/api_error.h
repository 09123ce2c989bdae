// An error answered to an HTTP client in OpenAI's shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}} with its status code.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace photon::serve {

class ApiError : public std::runtime_error {
 public:
  // type: OpenAI's error type ("invalid_request_error", "authentication_error", "server_error",
  // ...); param: the request field at fault ("" for none); code: a short machine-readable name
  // ("" for none).
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "")
      : std::runtime_error(std::move(message)),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // The JSON body, without a trailing newline.
  std::string body() const;

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
};

// A 400 invalid_request_error about the request field `param`.
inline ApiError bad_field(const std::string& param, const std::string& message,
                          const std::string& code = "") {
  return ApiError(400, message, "invalid_request_error", param, code);
}

}  // namespace photon::serve
