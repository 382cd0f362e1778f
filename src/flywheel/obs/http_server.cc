// The loopback HTTP/1.1 server (http_server.h).
//
// One thread polls the listening socket and a self-pipe; Stop() writes to the
// pipe, which every wait of the thread also watches, so Stop() is prompt even
// while a connection is being read or written. Connections are served one at
// a time with Connection: close. A connection gets kReadTimeout in all to
// deliver its request (a deadline, not an idle timeout, so a client trickling
// bytes cannot hold the server either) and kWriteTimeout to take the response.
//
// Requests (RFC 9112): request line and headers up to kMaxHeadBytes (else
// 431), a body framed by Content-Length up to kMaxBodyBytes (else 413; no
// Transfer-Encoding: 501), lines ending in CRLF or LF. HEAD is served as GET
// without the body.
#include <signal.h>
#include "flywheel/obs/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/base/logging.h"
#include "flywheel/base/metrics.h"

namespace flywheel::obs {

bool IsLoopbackHost(std::string_view host) {
  // Strip the port: "[::1]:8080", "127.0.0.1:8080", "localhost".
  std::string_view name = host;
  if (!name.empty() && name.front() == '[') {
    const size_t close = name.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = name.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || rest.size() == 1)) return false;
    name = name.substr(1, close - 1);
    return name == "::1";
  }
  if (const size_t colon = name.rfind(':'); colon != std::string_view::npos) {
    const std::string_view port = name.substr(colon + 1);
    if (port.empty() || port.find_first_not_of("0123456789") != std::string_view::npos) return false;
    name = name.substr(0, colon);
  }
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!lower.empty() && lower.back() == '.') lower.pop_back();
  return lower == "localhost" || lower == "127.0.0.1" || lower.ends_with(".localhost");
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeadBytes = 64 * 1024;    // request line + headers
constexpr size_t kMaxBodyBytes = 1024 * 1024;  // Content-Length
constexpr auto kReadTimeout = std::chrono::seconds(5);
constexpr auto kWriteTimeout = std::chrono::seconds(5);
// After an error response sent before the request was read in full, unread
// input is drained this long so that close() does not reset the connection
// (and destroy the response) under the client.
constexpr auto kLingerTimeout = std::chrono::milliseconds(500);
constexpr size_t kMaxLingerBytes = 4 * 1024 * 1024;

std::string ErrnoText(int error) {
  return std::error_code(error, std::system_category()).message();
}

Status ErrnoStatus(int error, std::string_view what) {
  return Status(absl::ErrnoToStatusCode(error), absl::StrCat(AsAbsl(what), ": ", ErrnoText(error)));
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

bool SetNonBlockingCloexec(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return false;
  const int fd_flags = ::fcntl(fd, F_GETFD, 0);
  return fd_flags >= 0 && ::fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC) >= 0;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 300   ? "OK"
             : status < 400 ? "Redirect"
             : status < 500 ? "Client Error"
                            : "Server Error";
  }
}

// RFC 9110 tchar: what method and header names are made of.
bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar);
}

bool HasControlChars(std::string_view s, bool allow_tab) {
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && !(allow_tab && c == '\t')) || c == 0x7f) return true;
  }
  return false;
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// End of the request head in `buf` (the offset just past the empty line), or
// npos. Scans from `from` (a '\n' before it was already seen not to end it).
size_t FindHeadEnd(std::string_view buf, size_t from) {
  for (size_t i = buf.find('\n', from); i != std::string_view::npos; i = buf.find('\n', i + 1)) {
    if (i + 1 < buf.size() && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

// An error response the server makes itself.
struct Refusal {
  int status;
  std::string message;
};

HttpResponse TextResponse(int status, std::string_view body) {
  HttpResponse r;
  r.status = status;
  r.body = absl::StrCat(AsAbsl(body), "\n");
  return r;
}

// Parses the head (request line and headers, without the final empty line).
// On success fills method, path, query and headers of `req` and sets
// `content_length`.
std::optional<Refusal> ParseHead(std::string_view head, HttpRequest* req, size_t* content_length,
                                 bool* expect_continue) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < head.size();) {
    size_t nl = head.find('\n', pos);
    if (nl == std::string_view::npos) nl = head.size();
    std::string_view line = head.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = nl + 1;
  }
  if (lines.empty()) return Refusal{400, "empty request"};

  // request-line = method SP request-target SP HTTP-version
  const std::string_view request_line = lines[0];
  const size_t sp1 = request_line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : request_line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || request_line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Refusal{400, "malformed request line (want METHOD TARGET HTTP/1.1)"};
  }
  const std::string_view method = request_line.substr(0, sp1);
  std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = request_line.substr(sp2 + 1);
  if (!IsToken(method)) return Refusal{400, "malformed method"};
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !absl::ascii_isdigit(version[5]) ||
      version[6] != '.' || !absl::ascii_isdigit(version[7])) {
    return Refusal{400, "malformed HTTP version"};
  }
  if (version[5] != '1') return Refusal{505, "only HTTP/1.x is supported"};
  if (target.empty() || HasControlChars(target, /*allow_tab=*/false))
    return Refusal{400, "malformed request target"};
  // absolute-form (what a request through a proxy looks like): keep the path.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() &&
        absl::EqualsIgnoreCase(AsAbsl(target.substr(0, scheme.size())), AsAbsl(scheme))) {
      const size_t slash = target.find('/', scheme.size());
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  if (target[0] != '/' && target != "*") return Refusal{400, "malformed request target"};
  const size_t question = target.find('?');
  req->method = std::string(method);
  req->path = std::string(target.substr(0, question));
  req->query = question == std::string_view::npos ? "" : std::string(target.substr(question + 1));
  if (const size_t hash = req->query.find('#'); hash != std::string::npos) req->query.resize(hash);

  bool has_content_length = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.empty()) return Refusal{400, "malformed header line"};
    if (line.front() == ' ' || line.front() == '\t')
      return Refusal{400, "folded header lines are not allowed"};
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
      return Refusal{400, "malformed header line"};
    }
    std::string name = absl::AsciiStrToLower(AsAbsl(line.substr(0, colon)));
    const std::string_view value = TrimBlanks(line.substr(colon + 1));
    if (HasControlChars(value, /*allow_tab=*/true))
      return Refusal{400, absl::StrCat("malformed value of header ", name)};
    if (name == "content-length") {
      if (value.empty() || !std::all_of(value.begin(), value.end(), absl::ascii_isdigit)) {
        return Refusal{400, "malformed Content-Length"};
      }
      if (has_content_length && req->headers[name] != value)
        return Refusal{400, "conflicting Content-Length headers"};
      has_content_length = true;
      req->headers[name] = std::string(value);
      continue;
    }
    auto [it, inserted] = req->headers.emplace(std::move(name), std::string(value));
    if (!inserted) absl::StrAppend(&it->second, ", ", AsAbsl(value));
  }
  if (req->headers.count("transfer-encoding") != 0) {
    return Refusal{501, "Transfer-Encoding is not supported; send the body with Content-Length"};
  }
  *content_length = 0;
  if (has_content_length) {
    const std::string& text = req->headers["content-length"];
    // More digits than the limit has cannot be under it (and cannot overflow).
    size_t n = 0;
    for (char c : text) {
      n = n * 10 + static_cast<size_t>(c - '0');
      if (n > kMaxBodyBytes) {
        return Refusal{413,
                       absl::StrCat("request body over the limit of ", kMaxBodyBytes, " bytes")};
      }
    }
    *content_length = n;
  }
  auto expect = req->headers.find("expect");
  *expect_continue =
      expect != req->headers.end() && absl::EqualsIgnoreCase(expect->second, "100-continue");
  return std::nullopt;
}

}  // namespace

struct HttpServer::Impl {
  std::string address;  // as given, for messages
  int listen_fd = -1;
  int wake_read = -1;  // readable once Stop() was called
  int wake_write = -1;
  int port = 0;

  absl::Mutex handlers_mu;
  std::map<std::string, Handler> handlers ABSL_GUARDED_BY(handlers_mu);

  enum class State { kCreated, kRunning, kStopped };
  absl::Mutex state_mu;
  State state ABSL_GUARDED_BY(state_mu) = State::kCreated;
  std::thread thread;

  ~Impl() {
    CloseFd(listen_fd);
    CloseFd(wake_read);
    CloseFd(wake_write);
  }

  std::string Where() const { return absl::StrCat("http server on ", address, ":", port); }

  enum class Wait { kReady, kTimeout, kStopped };
  // Waits until `fd` has `events`, the deadline passes or Stop() is called.
  Wait WaitFor(int fd, short events, Clock::time_point deadline) const {
    while (true) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Wait::kTimeout;
      pollfd fds[2] = {{fd, events, 0}, {wake_read, POLLIN, 0}};
      const int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 60'000)));
      if (n < 0 && errno != EINTR) return Wait::kTimeout;  // cannot happen with valid fds
      if (n <= 0) continue;
      if (fds[1].revents != 0) return Wait::kStopped;
      if (fds[0].revents != 0) return Wait::kReady;  // errors/hangups show in the next read/send
    }
  }

  void Run() {
    while (true) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_read, POLLIN, 0}};
      const int n = ::poll(fds, 2, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        FW_LOG(ERROR) << Where() << ": poll: " << ErrnoText(errno) << "; the server stops";
        return;
      }
      if (fds[1].revents != 0) return;
      if (fds[0].revents == 0) continue;
      int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) {
        const int e = errno;
        if (e == EINTR || e == EAGAIN || e == EWOULDBLOCK || e == ECONNABORTED || e == EPROTO)
          continue;
        // Out of descriptors or memory: the pending connection stays queued
        // and poll would report it at once; back off instead of spinning.
        FW_LOG(WARNING) << Where() << ": accept: " << ErrnoText(e);
        if (WaitFor(wake_read, POLLIN, Clock::now() + std::chrono::milliseconds(100)) !=
            Wait::kTimeout)
          return;
        continue;
      }
      if (!SetNonBlockingCloexec(fd)) {
        CloseFd(fd);
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Serve(fd);
      CloseFd(fd);
    }
  }

  // Sends all of `data`; false when the client is gone, too slow or the
  // server stops.
  bool SendAll(int fd, std::string_view data) const {
    const auto deadline = Clock::now() + kWriteTimeout;
    while (!data.empty()) {
      const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (WaitFor(fd, POLLOUT, deadline) != Wait::kReady) return false;
        continue;
      }
      return false;
    }
    return true;
  }

  // Reads what the client still sends (up to a limit, for a short while)
  // after the response, so closing does not reset the connection before the
  // client has read the response.
  void Linger(int fd) const {
    ::shutdown(fd, SHUT_WR);
    const auto deadline = Clock::now() + kLingerTimeout;
    size_t drained = 0;
    char buf[16384];
    while (drained < kMaxLingerBytes) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        drained += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
          WaitFor(fd, POLLIN, deadline) == Wait::kReady)
        continue;
      return;  // EOF, error, timeout or stop
    }
  }

  void Respond(int fd, const HttpResponse& response, bool head_only, bool linger) const {
    const bool no_body = response.status == 204 || response.status == 304;
    std::string out =
        absl::StrCat("HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status), "\r\n");
    if (!no_body) {
      if (!response.content_type.empty())
        absl::StrAppend(&out, "Content-Type: ", response.content_type, "\r\n");
      absl::StrAppend(&out, "Content-Length: ", response.body.size(), "\r\n");
    }
    out += "Connection: close\r\n\r\n";
    if (!no_body && !head_only) out += response.body;
    if (SendAll(fd, out) && linger) Linger(fd);
  }

  void Refuse(int fd, const Refusal& refusal, bool linger) const {
    Respond(fd, TextResponse(refusal.status, refusal.message), /*head_only=*/false, linger);
  }

  enum class Read { kData, kEof, kTimeout, kStopped, kError };
  // Appends what arrives on `fd` (at most `max` bytes) to `buf`.
  Read ReadSome(int fd, std::string* buf, size_t max, Clock::time_point deadline) const {
    while (true) {
      const size_t old = buf->size();
      buf->resize(old + max);
      const ssize_t n = ::recv(fd, buf->data() + old, max, 0);
      buf->resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
      if (n > 0) return Read::kData;
      if (n == 0) return Read::kEof;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Read::kError;
      switch (WaitFor(fd, POLLIN, deadline)) {
        case Wait::kReady:
          continue;
        case Wait::kTimeout:
          return Read::kTimeout;
        case Wait::kStopped:
          return Read::kStopped;
      }
    }
  }

  void Serve(int fd) {
    const auto deadline = Clock::now() + kReadTimeout;
    std::string buf;
    size_t head_end = std::string::npos;
    size_t scanned = 0;
    while (head_end == std::string::npos) {
      if (buf.size() >= kMaxHeadBytes) {
        Refuse(fd,
               {431, absl::StrCat("request line and headers over the limit of ", kMaxHeadBytes,
                                  " bytes")},
               true);
        return;
      }
      switch (ReadSome(fd, &buf, 16384, deadline)) {
        case Read::kData:
          break;
        case Read::kEof:
          if (!buf.empty()) Refuse(fd, {400, "incomplete request"}, false);
          return;
        case Read::kTimeout:
          Refuse(fd, {408, "request not received in time"}, false);
          return;
        case Read::kStopped:
        case Read::kError:
          return;
      }
      head_end = FindHeadEnd(buf, scanned);
      scanned = buf.size() < 2 ? 0 : buf.size() - 2;  // a '\n' there may end the head yet
    }
    // Excluding the empty line that ends the head.
    std::string_view head(buf.data(), head_end);
    while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.remove_suffix(1);
    if (head_end > kMaxHeadBytes) {
      Refuse(fd,
             {431,
              absl::StrCat("request line and headers over the limit of ", kMaxHeadBytes, " bytes")},
             true);
      return;
    }

    HttpRequest req;
    size_t content_length = 0;
    bool expect_continue = false;
    if (auto refusal = ParseHead(head, &req, &content_length, &expect_continue)) {
      Refuse(fd, *refusal, true);
      return;
    }
    if (expect_continue && buf.size() - head_end < content_length &&
        !SendAll(fd, "HTTP/1.1 100 Continue\r\n\r\n")) {
      return;
    }
    while (buf.size() - head_end < content_length) {
      switch (ReadSome(fd, &buf, std::min<size_t>(content_length - (buf.size() - head_end), 65536),
                       deadline)) {
        case Read::kData:
          break;
        case Read::kEof:
          Refuse(fd, {400, "request body shorter than its Content-Length"}, false);
          return;
        case Read::kTimeout:
          Refuse(fd, {408, "request body not received in time"}, false);
          return;
        case Read::kStopped:
        case Read::kError:
          return;
      }
    }
    // Bytes past the body (a pipelined request) are not served: drain them
    // after the response.
    const bool extra = buf.size() - head_end > content_length;
    req.body = buf.substr(head_end, content_length);
    buf.clear();

    const bool head_only = req.method == "HEAD";
    if (head_only) req.method = "GET";
    // Only loopback names may be asked for: a web page whose domain was
    // re-pointed at 127.0.0.1 (DNS rebinding) sends its own name as Host and
    // must not read tables, lineage or metrics from the browser's machine.
    if (auto host = req.headers.find("host"); host != req.headers.end() && !IsLoopbackHost(host->second)) {
      Respond(fd, TextResponse(403, absl::StrCat("Host '", host->second, "' is not a loopback name")), head_only,
              extra);
      return;
    }
    Handler handler;
    {
      absl::MutexLock lock(&handlers_mu);
      auto it = handlers.find(req.path);
      if (it != handlers.end()) handler = it->second;
    }
    if (!handler) {
      Respond(fd, TextResponse(404, absl::StrCat("no handler for ", req.path)), head_only, extra);
      return;
    }
    HttpResponse response = handler(req);
    if (response.status < 200 || response.status > 599) {
      FW_LOG(ERROR) << Where() << ": handler for " << req.path << " returned status "
                    << response.status;
      response = TextResponse(500, "handler returned an invalid status");
    } else if (HasControlChars(response.content_type, /*allow_tab=*/true)) {
      FW_LOG(ERROR) << Where() << ": handler for " << req.path
                    << " returned an invalid content type";
      response = TextResponse(500, "handler returned an invalid content type");
    }
    Respond(fd, response, head_only, extra);
  }
};

Result<std::unique_ptr<HttpServer>> HttpServer::Create(const std::string& address, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http server: port ", port, " is out of range [0, 65535]"));
  }
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_INET;
  if (address == "127.0.0.1" || address == "localhost") {
    auto* sin = reinterpret_cast<sockaddr_in*>(&storage);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in);
  } else if (address == "::1") {
    family = AF_INET6;
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_addr = in6addr_loopback;
    sin6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("http server: bind address \"", address,
                     "\" refused: the server listens on loopback only "
                     "(127.0.0.1, ::1 or localhost)"));
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.address = address;
  const std::string where = absl::StrCat("http server: ", address, ":", port);

  impl.listen_fd = ::socket(family, SOCK_STREAM, 0);
  if (impl.listen_fd < 0) return ErrnoStatus(errno, absl::StrCat(where, ": socket"));
  if (!SetNonBlockingCloexec(impl.listen_fd))
    return ErrnoStatus(errno, absl::StrCat(where, ": fcntl"));
  const int one = 1;
  if (::setsockopt(impl.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return ErrnoStatus(errno, absl::StrCat(where, ": SO_REUSEADDR"));
  }
  if (family == AF_INET6) {
    // Only ::1; no IPv4-mapped addresses.
    ::setsockopt(impl.listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  }
  if (::bind(impl.listen_fd, reinterpret_cast<const sockaddr*>(&storage), length) != 0) {
    return ErrnoStatus(errno, absl::StrCat(where, ": bind"));
  }
  if (::listen(impl.listen_fd, 64) != 0) return ErrnoStatus(errno, absl::StrCat(where, ": listen"));
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof bound;
  if (::getsockname(impl.listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    return ErrnoStatus(errno, absl::StrCat(where, ": getsockname"));
  }
  impl.port = ntohs(family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&bound)->sin_port
                                      : reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return ErrnoStatus(errno, absl::StrCat(where, ": pipe"));
  impl.wake_read = pipe_fds[0];
  impl.wake_write = pipe_fds[1];
  if (!SetNonBlockingCloexec(impl.wake_read) || !SetNonBlockingCloexec(impl.wake_write)) {
    return ErrnoStatus(errno, absl::StrCat(where, ": fcntl"));
  }
  return server;
}

HttpServer::~HttpServer() {
  if (impl_ != nullptr) Stop();
}

void HttpServer::Handle(const std::string& path, Handler handler) {
  absl::MutexLock lock(&impl_->handlers_mu);
  impl_->handlers[path] = std::move(handler);
}

void HttpServer::HandleMetrics() {
  Handle("/metrics", [](const HttpRequest& req) {
    if (req.method != "GET") {  // HEAD arrives as GET
      HttpResponse r;
      r.status = 405;
      r.body = "/metrics answers GET and HEAD only\n";
      return r;
    }
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = Metrics().ExpositionText();
    return r;
  });
}

Status HttpServer::Start() {
  Impl& impl = *impl_;
  absl::MutexLock lock(&impl.state_mu);
  switch (impl.state) {
    case Impl::State::kRunning:
      return absl::FailedPreconditionError(absl::StrCat(impl.Where(), " is already started"));
    case Impl::State::kStopped:
      return absl::FailedPreconditionError(
          absl::StrCat(impl.Where(), " was stopped; create a new one"));
    case Impl::State::kCreated:
      break;
  }
  impl.thread = std::thread([&impl] {
    // The process's signals go to its other threads (a CLI waits for
    // SIGTERM on its main thread).
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    impl.Run();
  });
  impl.state = Impl::State::kRunning;
  return absl::OkStatus();
}

void HttpServer::Stop() {
  Impl& impl = *impl_;
  absl::MutexLock lock(&impl.state_mu);
  if (impl.state == Impl::State::kStopped) return;
  // The byte is never read: the pipe stays readable and every wait of the
  // server thread sees it.
  const char byte = 1;
  while (::write(impl.wake_write, &byte, 1) < 0 && errno == EINTR) {
  }
  if (impl.thread.joinable()) impl.thread.join();
  CloseFd(impl.listen_fd);
  impl.state = Impl::State::kStopped;
}

int HttpServer::port() const { return impl_->port; }

}  // namespace flywheel::obs
