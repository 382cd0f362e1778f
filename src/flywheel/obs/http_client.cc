// The minimal HTTP/1.1 client (http_client.h).
//
// The response is read until the server closes the connection or the body
// framed by Content-Length (or chunked transfer coding) is complete; the
// whole exchange shares one deadline.
#include "flywheel/obs/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace flywheel::obs {
namespace {

using Clock = std::chrono::steady_clock;

struct Url {
  std::string host, port, hostport, target;
};

Result<Url> ParseUrl(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "': only http:// URLs are supported"));
  }
  Url u;
  std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find_first_of("/?");
  u.hostport = rest.substr(0, slash);
  u.target = slash == std::string::npos ? "/" : rest.substr(slash);
  if (u.target[0] == '?') u.target.insert(0, "/");
  u.host = u.hostport;
  u.port = "80";
  if (!u.host.empty() && u.host[0] == '[') {  // [::1]:8080
    const size_t close = u.host.find(']');
    if (close == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("'", url, "': unclosed '['"));
    if (close + 1 < u.host.size()) {
      if (u.host[close + 1] != ':') return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad host"));
      u.port = u.host.substr(close + 2);
    }
    u.host = u.host.substr(1, close - 1);
  } else if (const size_t colon = u.host.rfind(':'); colon != std::string::npos) {
    u.port = u.host.substr(colon + 1);
    u.host = u.host.substr(0, colon);
  }
  int port = 0;
  if (u.host.empty()) return absl::InvalidArgumentError(absl::StrCat("'", url, "': no host"));
  if (!absl::SimpleAtoi(u.port, &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad port '", u.port, "'"));
  }
  for (char c : u.target) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat("'", url, "': control character or space in the path"));
    }
  }
  return u;
}

class Connection {
 public:
  explicit Connection(Clock::time_point deadline) : deadline_(deadline) {}
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }

  int RemainingMs() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
  }

  Status Connect(const Url& u) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res); rc != 0) {
      return absl::UnavailableError(absl::StrCat("resolving ", u.host, ": ", gai_strerror(rc)));
    }
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, ::freeaddrinfo);
    Status last = absl::UnavailableError(absl::StrCat("no address for ", u.host));
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd_ < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
      if (::connect(fd_, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
        last = absl::UnavailableError(absl::StrCat("connecting to ", u.hostport, ": ", std::strerror(errno)));
        continue;
      }
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, RemainingMs()) != 1) {
        return absl::DeadlineExceededError(absl::StrCat("connecting to ", u.hostport, ": timed out"));
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) return absl::OkStatus();
      last = absl::UnavailableError(absl::StrCat("connecting to ", u.hostport, ": ", std::strerror(err)));
    }
    return last;
  }

  Status SendAll(std::string_view data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd w{fd_, POLLOUT, 0};
        if (::poll(&w, 1, RemainingMs()) != 1) return absl::DeadlineExceededError("sending the request: timed out");
        continue;
      }
      return absl::UnavailableError(absl::StrCat("sending the request: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  // Appends what arrives to `out`; false at the end of the stream.
  Result<bool> Receive(std::string* out) {
    char buf[16384];
    for (;;) {
      pollfd r{fd_, POLLIN, 0};
      if (::poll(&r, 1, RemainingMs()) != 1) return absl::DeadlineExceededError("waiting for the answer: timed out");
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        out->append(buf, static_cast<size_t>(n));
        return true;
      }
      if (n == 0) return false;
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("reading the answer: ", std::strerror(errno)));
    }
  }

 private:
  int fd_ = -1;
  Clock::time_point deadline_;
};

// Decodes a complete chunked body; nullopt-like false when more bytes are needed.
Result<bool> Dechunk(absl::string_view in, std::string* out) {
  out->clear();
  size_t pos = 0;
  for (;;) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == absl::string_view::npos) return false;
    absl::string_view size_text = in.substr(pos, eol - pos);
    if (const size_t semi = size_text.find(';'); semi != absl::string_view::npos) size_text = size_text.substr(0, semi);
    uint64_t size = 0;
    if (size_text.empty() || !absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size) ||
        size > (uint64_t{1} << 40)) {
      return absl::DataLossError("malformed chunked body");
    }
    pos = eol + 2;
    if (size == 0) return in.find("\r\n", pos) != absl::string_view::npos;  // trailers end with an empty line
    if (in.size() < pos + size + 2) return false;
    out->append(in.data() + pos, size);
    pos += size + 2;
  }
}

}  // namespace

Result<HttpClientResponse> HttpFetch(const std::string& method, const std::string& url, const std::string& body,
                                     const std::string& content_type, const HttpClientOptions& options) {
  FW_ASSIGN_OR_RETURN(const Url u, ParseUrl(url));
  Connection c(Clock::now() + std::chrono::milliseconds(std::max(1, options.timeout_ms)));
  FW_RETURN_IF_ERROR(c.Connect(u));
  std::string req = absl::StrCat(method, " ", u.target, " HTTP/1.1\r\nHost: ", u.hostport,
                                 "\r\nConnection: close\r\nUser-Agent: flywheel/0.1.0\r\n");
  if (!content_type.empty()) absl::StrAppend(&req, "Content-Type: ", content_type, "\r\n");
  if (!body.empty() || method == "POST" || method == "PUT") absl::StrAppend(&req, "Content-Length: ", body.size(), "\r\n");
  absl::StrAppend(&req, "\r\n", body);
  FW_RETURN_IF_ERROR(c.SendAll(req));

  std::string in;
  bool open = true;
  const bool head_request = method == "HEAD";
  for (;;) {
    FW_ASSIGN_OR_RETURN_CTX(std::optional<HttpClientResponse> resp,
                            ParseHttpResponse(in, /*complete=*/!open, head_request), "the answer from ", u.hostport);
    if (resp) return *std::move(resp);
    if (in.size() > options.max_response_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the answer from ", u.hostport, " is over ", options.max_response_bytes, " bytes"));
    }
    FW_ASSIGN_OR_RETURN(open, c.Receive(&in));
  }
}

Result<std::optional<HttpClientResponse>> ParseHttpResponse(std::string_view bytes, bool complete,
                                                            bool head_request) {
  const absl::string_view in(bytes.data(), bytes.size());
  const size_t head_end = in.find("\r\n\r\n");
  if (head_end == absl::string_view::npos) {
    if (in.size() > 64 * 1024) return absl::DataLossError("over 64 KiB of headers");
    if (complete) return absl::DataLossError("the connection closed before the answer was complete");
    return std::nullopt;
  }
  HttpClientResponse resp;
  std::optional<size_t> content_length;
  bool chunked = false;
  const absl::string_view head = in.substr(0, head_end);
  const size_t eol = head.find("\r\n");
  const absl::string_view status_line = head.substr(0, eol);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12 || status_line[8] != ' ' ||
      !absl::SimpleAtoi(status_line.substr(9, 3), &resp.status) || resp.status < 100 || resp.status > 999) {
    return absl::DataLossError(
        absl::StrCat("not an HTTP answer: '", absl::CHexEscape(status_line.substr(0, 80)), "'"));
  }
  size_t pos = eol == absl::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == absl::string_view::npos) next = head.size();
    const absl::string_view line = head.substr(pos, next - pos);
    pos = next + 2;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (name == "content-type") resp.content_type = value;
    if (name == "content-length") {
      size_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) return absl::DataLossError(absl::StrCat("bad Content-Length '", value, "'"));
      content_length = n;
    }
    if (name == "transfer-encoding" && absl::AsciiStrToLower(value).find("chunked") != std::string::npos) {
      chunked = true;
    }
  }
  if (head_request || resp.status == 204 || resp.status == 304 || (resp.status >= 100 && resp.status < 200)) {
    return resp;
  }
  const absl::string_view rest = in.substr(head_end + 4);
  if (chunked) {
    FW_ASSIGN_OR_RETURN(const bool done, Dechunk(rest, &resp.body));
    if (done) return resp;
  } else if (content_length) {
    if (rest.size() >= *content_length) {
      resp.body.assign(rest.data(), *content_length);
      return resp;
    }
  } else if (complete) {
    resp.body.assign(rest.data(), rest.size());  // delimited by the end of the connection
    return resp;
  }
  if (complete) return absl::DataLossError("the connection closed before the answer was complete");
  return std::nullopt;
}

}  // namespace flywheel::obs
