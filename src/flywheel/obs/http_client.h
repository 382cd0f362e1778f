// A minimal HTTP/1.1 client for flywheel's own endpoints: scraping /metrics
// (the dashboard, doctor) and posting OpenLineage events. Plain http:// only,
// one request per connection (Connection: close), a deadline for the whole
// exchange, and a cap on the response size.
//
// Thread-safety: the functions are thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "flywheel/base/status.h"

namespace flywheel::obs {

struct HttpClientResponse {
  int status = 0;            // e.g. 200
  std::string content_type;  // the Content-Type header, empty when absent
  std::string body;
};

struct HttpClientOptions {
  int timeout_ms = 5000;                        // connect + send + receive
  size_t max_response_bytes = 64 * 1024 * 1024;  // head + body
};

// `url`: http://host[:port]/path[?query]. A transport failure (resolve,
// connect, timeout, a truncated or malformed answer) is an error status; any
// HTTP status code is a response.
Result<HttpClientResponse> HttpFetch(const std::string& method, const std::string& url,
                                     const std::string& body = {}, const std::string& content_type = {},
                                     const HttpClientOptions& options = {});

// Parses an answer received so far: nullopt while more bytes are needed;
// `complete` says the connection has closed (a body without a length ends
// there). Errors: a malformed status line or header, a bad chunk, an answer
// cut short.
Result<std::optional<HttpClientResponse>> ParseHttpResponse(std::string_view bytes, bool complete,
                                                            bool head_request = false);

inline Result<HttpClientResponse> HttpGet(const std::string& url, int timeout_ms) {
  HttpClientOptions o;
  o.timeout_ms = timeout_ms;
  return HttpFetch("GET", url, {}, {}, o);
}

}  // namespace flywheel::obs
