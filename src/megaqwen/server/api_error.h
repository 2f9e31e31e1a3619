// ApiError: a request the server refuses, carried to the HTTP layer as OpenAI's error object
// {"error": {"message", "type", "param", "code"}} with its HTTP status. Thrown by the request
// parsers; anything else that escapes a handler is a 500.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace megaqwen::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::string param = "", std::string code = "")
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // the offending field, "" when none
  const std::string& code() const { return code_; }     // "" when none

 private:
  int status_;
  std::string type_, param_, code_;
};

// The common refusals, named as OpenAI names them.
ApiError invalid_request(std::string message, std::string param = "", std::string code = "");  // 400
ApiError unauthorized();                                                                         // 401
ApiError not_found(std::string message);                                                         // 404
ApiError payload_too_large(size_t limit_bytes);                                                  // 413
ApiError overloaded(std::string message);                                                        // 503

// {"error": {...}}: param and code are null when empty.
nlohmann::ordered_json error_json(const ApiError& error);

}  // namespace megaqwen::server
