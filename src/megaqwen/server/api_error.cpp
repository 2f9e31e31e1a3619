#include "megaqwen/server/api_error.h"

#include <fmt/format.h>

namespace megaqwen::server {

ApiError invalid_request(std::string message, std::string param, std::string code) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

ApiError unauthorized() {
  return ApiError(401, "invalid or missing API key (send it as 'Authorization: Bearer KEY')", "authentication_error",
                  "", "invalid_api_key");
}

ApiError not_found(std::string message) { return ApiError(404, std::move(message), "not_found_error"); }

ApiError payload_too_large(size_t limit_bytes) {
  return ApiError(413, fmt::format("the request body exceeds the limit of {} bytes", limit_bytes),
                  "invalid_request_error", "", "payload_too_large");
}

ApiError overloaded(std::string message) {
  return ApiError(503, std::move(message), "server_error", "", "server_overloaded");
}

nlohmann::ordered_json error_json(const ApiError& e) {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s); };
  return {{"error",
           {{"message", e.what()}, {"type", e.type()}, {"param", or_null(e.param())}, {"code", or_null(e.code())}}}};
}

}  // namespace megaqwen::server
