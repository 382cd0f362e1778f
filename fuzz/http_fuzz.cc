// Fuzzes the HTTP answer parser of flywheel's client (obs/http_client.h:
// what a scraped endpoint or a lineage server sends back) and the dashboard's
// query-string decoding (obs/dashboard.h).
//
// Beyond "no crash": a parsed answer has a status in 100..999 and a body no
// longer than the input; an answer parsed before the connection closed
// parses to the same answer once it has (more bytes never change a complete
// answer); a decoded query value is never longer than the query.
#include <cstdint>
#include <string>
#include <string_view>

#include "flywheel/obs/dashboard.h"
#include "flywheel/obs/http_client.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  using flywheel::obs::ParseHttpResponse;
  for (bool head : {false, true}) {
    auto open = ParseHttpResponse(in, /*complete=*/false, head);
    auto closed = ParseHttpResponse(in, /*complete=*/true, head);
    if (closed.ok()) {
      Check(closed->has_value());  // a closed connection always settles it
    }
    for (const auto* r : {&open, &closed}) {
      if (r->ok() && r->value()) {
        Check((*r)->value().status >= 100 && (*r)->value().status <= 999);
        Check((*r)->value().body.size() <= size);
      }
    }
    if (open.ok() && *open) {
      Check(closed.ok() && *closed);
      Check((*open)->status == (*closed)->status && (*open)->body == (*closed)->body &&
            (*open)->content_type == (*closed)->content_type);
    }
  }
  // Query strings: the first byte picks the key's length.
  if (size > 0) {
    const size_t k = std::min<size_t>(data[0] % 8, size - 1);
    const std::string key(in.substr(1, k));
    const std::string_view query = in.substr(1 + k);
    Check(flywheel::obs::QueryParam(query, key).size() <= query.size());
  }
  return 0;
}
