// Tests of the loopback HTTP server (real sockets) and the Prometheus text
// parser, including a real scrape of the process registry.
#include "flywheel/obs/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "flywheel/base/metrics.h"
#include "flywheel/obs/prometheus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::obs {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// A minimal HTTP client over a real socket.

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;
};

// A connected socket, closed on destruction.
class Conn {
 public:
  Conn(int port, int family = AF_INET) {
    fd_ = ::socket(family, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    int rc;
    if (family == AF_INET) {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } else {
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_addr = in6addr_loopback;
      addr.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    }
    if (rc != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    // No blocking call of the test hangs forever.
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Everything the server sends until it closes; nullopt on timeout.
  std::optional<std::string> ReadAll(std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
    const auto deadline = Clock::now() + timeout;
    std::string out;
    char buf[65536];
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == ECONNRESET) return out;
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
};

// Parses a whole response (status line, headers, body); checks the framing.
std::optional<Reply> ParseReply(const std::string& raw) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return std::nullopt;
  Reply reply;
  std::string head = raw.substr(0, head_end);
  size_t pos = head.find("\r\n");
  const std::string status_line = head.substr(0, pos);
  if (status_line.rfind("HTTP/1.1 ", 0) != 0 || status_line.size() < 12) return std::nullopt;
  reply.status = std::stoi(status_line.substr(9, 3));
  while (pos != std::string::npos) {
    const size_t start = pos + 2;
    pos = head.find("\r\n", start);
    const std::string line =
        head.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) return std::nullopt;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    reply.headers[name] = line.substr(colon + 2);
  }
  reply.body = raw.substr(head_end + 4);
  return reply;
}

// Sends `request` on a new connection and reads the reply.
std::optional<Reply> Exchange(int port, const std::string& request) {
  Conn conn(port);
  if (!conn.ok() || !conn.Send(request)) return std::nullopt;
  auto raw = conn.ReadAll();
  if (!raw) return std::nullopt;
  return ParseReply(*raw);
}

std::optional<Reply> Get(int port, const std::string& target) {
  return Exchange(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

std::unique_ptr<HttpServer> StartedServer(const std::string& address = "127.0.0.1") {
  auto server = HttpServer::Create(address, 0);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  EXPECT_GT((*server)->port(), 0);
  EXPECT_TRUE((*server)->Start().ok());
  return std::move(*server);
}

// Each run (--gtest_repeat) gets fresh series.
std::string RunLabel() {
  static std::atomic<int> runs{0};
  return std::to_string(runs.fetch_add(1));
}

// ---------------------------------------------------------------------------
// HttpServerTest

TEST(HttpServerTest, ScrapeOfMetricsParsesWithExactValues) {
  const std::string run = RunLabel();
  const std::string tricky = "say \"hi\"\\path\nnext line";
  Counter* requests =
      Metrics().GetCounter("fw_obs_http_test_requests_total", "Requests \\ served\nby the test",
                           {{"run", run}, {"route", tricky}});
  Counter* other = Metrics().GetCounter("fw_obs_http_test_requests_total", "",
                                        {{"run", run}, {"route", "other"}});
  Gauge* gauge = Metrics().GetGauge("fw_obs_http_test_temperature", "A gauge", {{"run", run}});
  Gauge* inf_gauge =
      Metrics().GetGauge("fw_obs_http_test_temperature", "A gauge", {{"run", run}, {"k", "inf"}});
  Histogram* hist = Metrics().GetHistogram("fw_obs_http_test_latency_seconds", "A histogram",
                                           {{"run", run}, {"op", "read"}}, {0.1, 1, 10});
  Histogram* hist2 = Metrics().GetHistogram("fw_obs_http_test_latency_seconds", "A histogram",
                                            {{"run", run}, {"op", "write"}}, {0.1, 1, 10});

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([requests] {
      for (int i = 0; i < 10000; ++i) requests->Increment();
    });
  }
  for (auto& t : threads) t.join();
  other->Increment(7);
  gauge->Set(-2.5);
  inf_gauge->Set(std::numeric_limits<double>::infinity());
  double expected_sum = 0;
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0, 1000.0}) {
    hist->Observe(v);
    expected_sum += v;
  }
  hist2->Observe(0.2);

  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  server->HandleMetrics();
  auto reply = Get(server->port(), "/metrics");
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(reply->headers["content-length"], std::to_string(reply->body.size()));
  EXPECT_EQ(reply->headers["connection"], "close");

  auto scrape = ParsePrometheusText(reply->body);
  ASSERT_TRUE(scrape.ok()) << scrape.status() << "\n" << reply->body;

  EXPECT_EQ(scrape->Find("fw_obs_http_test_requests_total", {{"run", run}, {"route", tricky}}),
            40000);
  EXPECT_EQ(scrape->Find("fw_obs_http_test_requests_total", {{"run", run}, {"route", "other"}}), 7);
  EXPECT_EQ(scrape->Find("fw_obs_http_test_requests_total", {{"run", run}}), std::nullopt);
  const PromFamily& counter_family = scrape->families.at("fw_obs_http_test_requests_total");
  EXPECT_EQ(counter_family.type, "counter");
  EXPECT_EQ(counter_family.help, "Requests \\ served\nby the test");

  EXPECT_EQ(scrape->Find("fw_obs_http_test_temperature", {{"run", run}}), -2.5);
  EXPECT_EQ(scrape->Find("fw_obs_http_test_temperature", {{"run", run}, {"k", "inf"}}),
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(scrape->families.at("fw_obs_http_test_temperature").type, "gauge");

  const std::string h = "fw_obs_http_test_latency_seconds";
  EXPECT_EQ(scrape->families.at(h).type, "histogram");
  auto bucket = [&](const std::string& op, const std::string& le) {
    return scrape->Find(h + "_bucket", {{"run", run}, {"op", op}, {"le", le}});
  };
  // le is inclusive: 0.1 lands in le="0.1".
  EXPECT_EQ(bucket("read", "0.1"), 2);
  EXPECT_EQ(bucket("read", "1"), 3);
  EXPECT_EQ(bucket("read", "10"), 4);
  EXPECT_EQ(bucket("read", "+Inf"), 6);
  EXPECT_EQ(scrape->Find(h + "_count", {{"run", run}, {"op", "read"}}), 6);
  EXPECT_EQ(scrape->Find(h + "_sum", {{"run", run}, {"op", "read"}}), expected_sum);
  EXPECT_EQ(bucket("write", "0.1"), 0);
  EXPECT_EQ(bucket("write", "1"), 1);
  EXPECT_EQ(bucket("write", "+Inf"), 1);
  EXPECT_EQ(scrape->Find(h + "_count", {{"run", run}, {"op", "write"}}), 1);

  // A second scrape sees later increments.
  requests->Increment();
  auto again = Get(server->port(), "/metrics");
  ASSERT_TRUE(again.has_value());
  auto scrape2 = ParsePrometheusText(again->body);
  ASSERT_TRUE(scrape2.ok()) << scrape2.status();
  EXPECT_EQ(scrape2->Find("fw_obs_http_test_requests_total", {{"run", run}, {"route", tricky}}),
            40001);
}

TEST(HttpServerTest, HeadGetsTheLengthWithoutTheBody) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  server->Handle("/page", [](const HttpRequest& req) {
    HttpResponse r;
    r.body = "method " + req.method;
    return r;
  });
  auto reply = Exchange(server->port(), "HEAD /page HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->headers["content-length"], std::to_string(std::string("method GET").size()));
  EXPECT_EQ(reply->body, "");
}

TEST(HttpServerTest, UnknownPathIs404AndQueryIsNotPartOfThePath) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  server->HandleMetrics();
  auto missing = Get(server->port(), "/nope");
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 404);
  auto prefix = Get(server->port(), "/metrics/extra");
  ASSERT_TRUE(prefix.has_value());
  EXPECT_EQ(prefix->status, 404);
  auto with_query = Get(server->port(), "/metrics?name=x");
  ASSERT_TRUE(with_query.has_value());
  EXPECT_EQ(with_query->status, 200);
  auto post = Exchange(server->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(post->status, 405);
}

TEST(HttpServerTest, CustomHandlerGetsMethodPathQueryHeadersAndBody) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  HttpRequest seen;
  server->Handle("/api/echo", [&seen](const HttpRequest& req) {
    seen = req;
    HttpResponse r;
    r.status = 201;
    r.content_type = "application/json";
    r.body = "{\"got\":" + std::to_string(req.body.size()) + "}";
    return r;
  });
  const std::string body = "line one\r\n\0binary\xff tail";
  const std::string request =
      "POST /api/echo?a=1&b=%20x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Custom-Thing:  some value \r\n"
      "Content-Type: text/plain\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  auto reply = Exchange(server->port(), request);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 201);
  EXPECT_EQ(reply->headers["content-type"], "application/json");
  EXPECT_EQ(reply->body, "{\"got\":" + std::to_string(body.size()) + "}");
  EXPECT_EQ(seen.method, "POST");
  EXPECT_EQ(seen.path, "/api/echo");
  EXPECT_EQ(seen.query, "a=1&b=%20x");
  EXPECT_EQ(seen.headers["x-custom-thing"], "some value");
  EXPECT_EQ(seen.headers["host"], "127.0.0.1");
  EXPECT_EQ(seen.headers["content-type"], "text/plain");
  EXPECT_EQ(seen.body, body);

  // A body that arrives in pieces after the head (and LF-only line ends).
  Conn conn(server->port());
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Send("PUT /api/echo HTTP/1.1\nContent-Length: 10\n\n01234"));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(50));  // not sync: makes a second segment likely
  ASSERT_TRUE(conn.Send("56789"));
  auto raw = conn.ReadAll();
  ASSERT_TRUE(raw.has_value());
  auto split = ParseReply(*raw);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->status, 201);
  EXPECT_EQ(seen.method, "PUT");
  EXPECT_EQ(seen.body, "0123456789");

  // Expect: 100-continue (curl sends it for larger bodies) gets the interim
  // response before the client sends the body.
  Conn expect(server->port());
  ASSERT_TRUE(expect.ok());
  ASSERT_TRUE(
      expect.Send("POST /api/echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
  std::string interim;
  char c;
  while (interim.find("\r\n\r\n") == std::string::npos && ::recv(expect.fd(), &c, 1, 0) == 1)
    interim += c;
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(expect.Send("hello"));
  auto final_raw = expect.ReadAll();
  ASSERT_TRUE(final_raw.has_value());
  auto final_reply = ParseReply(*final_raw);
  ASSERT_TRUE(final_reply.has_value());
  EXPECT_EQ(final_reply->status, 201);
  EXPECT_EQ(seen.body, "hello");
}

TEST(HttpServerTest, RequestsForOtherHostNamesAreRefused) {
  auto created = HttpServer::Create("127.0.0.1", 0);
  ASSERT_TRUE(created.ok());
  auto& server = *created;
  server->HandleMetrics();
  ASSERT_TRUE(server->Start().ok());
  const std::string port = std::to_string(server->port());
  for (const std::string& host : std::vector<std::string>{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port,
                                 "127.0.0.1", "app.localhost:" + port}) {
    auto r = Exchange(server->port(), "GET /metrics HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    ASSERT_TRUE(r.has_value()) << host;
    EXPECT_EQ(r->status, 200) << host;
  }
  // DNS rebinding: the attacker's name, pointed at 127.0.0.1.
  for (const std::string& host : std::vector<std::string>{"evil.example:" + port, "127.0.0.1.evil.example", "[::2]:" + port,
                                 "localhost:x", "127.0.0.2"}) {
    auto r = Exchange(server->port(), "GET /metrics HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    ASSERT_TRUE(r.has_value()) << host;
    EXPECT_EQ(r->status, 403) << host;
    EXPECT_THAT(r->body, HasSubstr("not a loopback name"));
  }
}

TEST(HttpServerTest, RefusesNonLoopbackAddresses) {
  for (const std::string address :
       {"0.0.0.0", "192.168.1.1", "", "::", "example.com", "127.0.0.2"}) {
    auto server = HttpServer::Create(address, 0);
    ASSERT_FALSE(server.ok()) << address;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_THAT(std::string(server.status().message()), HasSubstr("\"" + address + "\""));
    EXPECT_THAT(std::string(server.status().message()), HasSubstr("listens on loopback only"));
  }
  auto bad_port = HttpServer::Create("127.0.0.1", 70000);
  ASSERT_FALSE(bad_port.ok());
  EXPECT_EQ(bad_port.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HttpServerTest, LocalhostAndIpv6LoopbackServe) {
  auto server = StartedServer("localhost");
  ASSERT_NE(server, nullptr);
  server->HandleMetrics();
  auto reply = Get(server->port(), "/metrics");
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 200);

  auto v6 = HttpServer::Create("::1", 0);
  if (!v6.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << v6.status();
  (*v6)->HandleMetrics();
  ASSERT_TRUE((*v6)->Start().ok());
  Conn conn((*v6)->port(), AF_INET6);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Send("GET /metrics HTTP/1.1\r\n\r\n"));
  auto raw = conn.ReadAll();
  ASSERT_TRUE(raw.has_value());
  auto v6_reply = ParseReply(*raw);
  ASSERT_TRUE(v6_reply.has_value());
  EXPECT_EQ(v6_reply->status, 200);
}

TEST(HttpServerTest, PortInUseIsAnError) {
  auto first = StartedServer();
  ASSERT_NE(first, nullptr);
  auto second = HttpServer::Create("127.0.0.1", first->port());
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(std::to_string(first->port())));
}

TEST(HttpServerTest, SilentClientDoesNotBlockOthersBeyondTheReadTimeout) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  server->HandleMetrics();
  Conn silent(server->port());
  ASSERT_TRUE(silent.ok());
  const auto start = Clock::now();
  auto reply = Get(server->port(), "/metrics");  // queued behind the silent one
  const auto elapsed = Clock::now() - start;
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 200);
  EXPECT_LT(elapsed, std::chrono::milliseconds(6500));
  // The silent client was told off and disconnected.
  auto raw = silent.ReadAll(std::chrono::seconds(1));
  ASSERT_TRUE(raw.has_value());
  auto timeout = ParseReply(*raw);
  ASSERT_TRUE(timeout.has_value());
  EXPECT_EQ(timeout->status, 408);
}

TEST(HttpServerTest, MalformedAndOversizedRequestsAreRefused) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  server->Handle("/x", [](const HttpRequest&) { return HttpResponse{}; });
  const int port = server->port();
  struct Case {
    std::string request;
    int status;
  };
  const std::string huge_header = "X-Big: " + std::string(70 * 1024, 'a') + "\r\n";
  const std::vector<Case> cases = {
      {"GET /x HTTP/1.1\r\n" + huge_header + "\r\n", 431},
      {"GET /x HTTP/1.1\r\n" + huge_header, 431},  // no end of head at all
      {"POST /x HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", 413},
      {"POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n", 413},
      {"GARBAGE\r\n\r\n", 400},
      {"GET /x\r\n\r\n", 400},
      {"GET  /x HTTP/1.1\r\n\r\n", 400},
      {"GET x HTTP/1.1\r\n\r\n", 400},
      {"GET /x HTTP/1.1 extra\r\n\r\n", 400},
      {"GET /x HTTX/1.1\r\n\r\n", 400},
      {"GET /x HTTP/2.0\r\n\r\n", 505},
      {"G(T /x HTTP/1.1\r\n\r\n", 400},
      {"GET /x HTTP/1.1\r\nNo colon here\r\n\r\n", 400},
      {"GET /x HTTP/1.1\r\nBad Name: v\r\n\r\n", 400},
      {"GET /x HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET /x HTTP/1.1\r\nA: b\x01\r\n\r\n", 400},
      {"POST /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501},
      {"GET /x HTTP/1.1\r\n\r\n", 200},  // the server still works
  };
  for (const Case& c : cases) {
    Conn conn(port);
    ASSERT_TRUE(conn.ok());
    conn.Send(c.request);  // may fail once the server has answered
    auto raw = conn.ReadAll();
    ASSERT_TRUE(raw.has_value()) << c.request.substr(0, 60);
    auto reply = ParseReply(*raw);
    ASSERT_TRUE(reply.has_value()) << c.request.substr(0, 60) << " -> " << raw->substr(0, 200);
    EXPECT_EQ(reply->status, c.status) << c.request.substr(0, 60) << " -> " << reply->body;
  }

  // A body cut short by the client's half-close.
  Conn conn(port);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Send("POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
  conn.ShutdownWrite();
  auto raw = conn.ReadAll();
  ASSERT_TRUE(raw.has_value());
  auto reply = ParseReply(*raw);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 400);
  EXPECT_THAT(reply->body, HasSubstr("shorter than its Content-Length"));
}

TEST(HttpServerTest, HandlerResponsesAreChecked) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  server->Handle("/status", [](const HttpRequest&) {
    HttpResponse r;
    r.status = 42;
    return r;
  });
  server->Handle("/type", [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain\r\nX-Injected: 1";
    return r;
  });
  server->Handle("/empty", [](const HttpRequest&) {
    HttpResponse r;
    r.status = 204;
    r.body = "dropped";
    return r;
  });
  auto bad_status = Get(server->port(), "/status");
  ASSERT_TRUE(bad_status.has_value());
  EXPECT_EQ(bad_status->status, 500);
  auto bad_type = Get(server->port(), "/type");
  ASSERT_TRUE(bad_type.has_value());
  EXPECT_EQ(bad_type->status, 500);
  EXPECT_EQ(bad_type->headers.count("x-injected"), 0u);
  auto empty = Get(server->port(), "/empty");
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->status, 204);
  EXPECT_EQ(empty->body, "");
}

TEST(HttpServerTest, StopJoinsPromptlyWithAnIdleClientConnected) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  server->HandleMetrics();
  const int port = server->port();
  ASSERT_EQ(Get(port, "/metrics")->status, 200);
  Conn idle(port);  // being read by the server thread (or queued) when Stop comes
  ASSERT_TRUE(idle.ok());
  const auto start = Clock::now();
  server->Stop();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  server->Stop();  // idempotent
  EXPECT_EQ(server->Start().code(), absl::StatusCode::kFailedPrecondition);
  Conn after(port);
  EXPECT_FALSE(after.ok()) << "still accepting after Stop()";
  server.reset();  // the destructor after Stop
}

TEST(HttpServerTest, StartTwiceFailsAndDestructorStops) {
  auto server = StartedServer();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->Start().code(), absl::StatusCode::kFailedPrecondition);
  const auto start = Clock::now();
  server.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));

  // Never started: the destructor only closes.
  auto idle = HttpServer::Create();
  ASSERT_TRUE(idle.ok());
  idle->reset();
}

// ---------------------------------------------------------------------------
// PrometheusTest

// The example from https://prometheus.io/docs/instrumenting/exposition_formats/
constexpr char kDocExample[] = R"(# HELP http_requests_total The total number of HTTP requests.
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3 1395066363000

# Escaping in label values:
msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9

# Minimalistic line:
metric_without_timestamp_and_labels 12.47

# A weird metric from before the epoch:
something_weird{problem="division by zero"} +Inf -3982045

# A histogram, which has a pretty complex representation in the text format:
# HELP http_request_duration_seconds A histogram of the request duration.
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{le="0.05"} 24054
http_request_duration_seconds_bucket{le="0.1"} 33444
http_request_duration_seconds_bucket{le="0.2"} 100392
http_request_duration_seconds_bucket{le="0.5"} 129389
http_request_duration_seconds_bucket{le="1"} 133988
http_request_duration_seconds_bucket{le="+Inf"} 144320
http_request_duration_seconds_sum 53423
http_request_duration_seconds_count 144320

# Finally a summary, which has a complex representation, too:
# HELP rpc_duration_seconds A summary of the RPC duration in seconds.
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.01"} 3102
rpc_duration_seconds{quantile="0.05"} 3272
rpc_duration_seconds{quantile="0.5"} 4773
rpc_duration_seconds{quantile="0.9"} 9001
rpc_duration_seconds{quantile="0.99"} 76656
rpc_duration_seconds_sum 1.7560473e+07
rpc_duration_seconds_count 2693
)";

TEST(PrometheusTest, ParsesTheFormatDocumentationExample) {
  auto scrape = ParsePrometheusText(kDocExample);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->samples.size(), 20u);

  const PromSample& first = scrape->samples[0];
  EXPECT_EQ(first.name, "http_requests_total");
  EXPECT_EQ(first.labels,
            (std::map<std::string, std::string>{{"method", "post"}, {"code", "200"}}));
  EXPECT_EQ(first.value, 1027);
  EXPECT_EQ(first.timestamp_ms, 1395066363000);
  EXPECT_EQ(scrape->Find("http_requests_total", {{"method", "post"}, {"code", "400"}}), 3);

  EXPECT_EQ(
      scrape->Find("msdos_file_access_time_seconds",
                   {{"path", "C:\\DIR\\FILE.TXT"}, {"error", "Cannot find file:\n\"FILE.TXT\""}}),
      1.458255915e9);
  EXPECT_EQ(scrape->Find("metric_without_timestamp_and_labels"), 12.47);
  EXPECT_EQ(scrape->samples[3].timestamp_ms, std::nullopt);
  EXPECT_EQ(scrape->Find("something_weird", {{"problem", "division by zero"}}),
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(scrape->samples[4].timestamp_ms, -3982045);
  EXPECT_EQ(scrape->Find("http_request_duration_seconds_bucket", {{"le", "0.2"}}), 100392);
  EXPECT_EQ(scrape->Find("http_request_duration_seconds_count"), 144320);
  EXPECT_EQ(scrape->Find("rpc_duration_seconds", {{"quantile", "0.99"}}), 76656);
  EXPECT_EQ(scrape->Find("rpc_duration_seconds_sum"), 1.7560473e+07);

  EXPECT_EQ(scrape->families.at("http_requests_total").type, "counter");
  EXPECT_EQ(scrape->families.at("http_requests_total").help, "The total number of HTTP requests.");
  EXPECT_EQ(scrape->families.at("http_request_duration_seconds").type, "histogram");
  EXPECT_EQ(scrape->families.at("rpc_duration_seconds").type, "summary");
  // Samples without a TYPE make untyped families; a histogram's samples do not
  // make families of their own.
  EXPECT_EQ(scrape->families.at("metric_without_timestamp_and_labels").type, "untyped");
  EXPECT_EQ(scrape->families.count("http_request_duration_seconds_bucket"), 0u);
  EXPECT_EQ(scrape->families.count("rpc_duration_seconds_count"), 0u);
}

TEST(PrometheusTest, ParsesTheRegistryExposition) {
  MetricsRegistry registry;
  registry.GetCounter("a_total", "", {{"x", "\\\"\n"}})->Increment(3);
  registry.GetGauge("b", "help with \\ and\nnewline")->Set(0.1);
  Histogram* h = registry.GetHistogram("c_seconds", "latency");  // default bounds, le="1e-05" etc.
  h->Observe(3e-5);
  h->Observe(1e9);
  registry.GetHistogram("d", "empty", {{"k", "v"}}, {1, 2});
  auto scrape = ParsePrometheusText(registry.ExpositionText());
  ASSERT_TRUE(scrape.ok()) << scrape.status() << "\n" << registry.ExpositionText();
  EXPECT_EQ(scrape->Find("a_total", {{"x", "\\\"\n"}}), 3);
  EXPECT_EQ(scrape->Find("b"), 0.1);
  EXPECT_EQ(scrape->families.at("b").help, "help with \\ and\nnewline");
  EXPECT_EQ(scrape->families.at("a_total").help, "");
  EXPECT_EQ(scrape->Find("c_seconds_bucket", {{"le", "1e-05"}}), 0);
  EXPECT_EQ(scrape->Find("c_seconds_bucket", {{"le", "+Inf"}}), 2);
  EXPECT_EQ(scrape->Find("c_seconds_count"), 2);
  EXPECT_EQ(scrape->Find("d_count", {{"k", "v"}}), 0);
}

TEST(PrometheusTest, LabelValueAndHelpEscapes) {
  auto scrape = ParsePrometheusText(
      "# HELP m back\\\\slash\\\\n and\\nnewline \"quotes\" stay\n"
      "m{a=\"\\\\\",b=\"\\\"\",c=\"x\\ny\",d=\"\",e=\"caf\xc3\xa9 {}=,\"} 1\n");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->families.at("m").help, "back\\slash\\n and\nnewline \"quotes\" stay");
  ASSERT_EQ(scrape->samples.size(), 1u);
  EXPECT_EQ(scrape->samples[0].labels,
            (std::map<std::string, std::string>{
                {"a", "\\"}, {"b", "\""}, {"c", "x\ny"}, {"d", ""}, {"e", "caf\xc3\xa9 {}=,"}}));
}

TEST(PrometheusTest, WhitespaceCommentsAndOptionalParts) {
  auto scrape = ParsePrometheusText(
      "\n   \n\t\n"
      "# just a comment\n"
      "#HELPER is a comment too\n"
      "#\n"
      "  # TYPE spaced gauge\n"
      "spaced { a = \"1\" , b=\"2\", } \t 5 \t 10 \t\n"
      "colon:name_x{} 6\n"
      "trailing_comma{a=\"1\",} 7\n");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->families.at("spaced").type, "gauge");
  EXPECT_EQ(scrape->Find("spaced", {{"a", "1"}, {"b", "2"}}), 5);
  EXPECT_EQ(scrape->samples[0].timestamp_ms, 10);
  EXPECT_EQ(scrape->Find("colon:name_x"), 6);
  EXPECT_EQ(scrape->Find("trailing_comma", {{"a", "1"}}), 7);
  EXPECT_EQ(scrape->Find("trailing_comma"), std::nullopt);
  EXPECT_EQ(scrape->Find("nope"), std::nullopt);
  EXPECT_TRUE(ParsePrometheusText("").ok());
}

TEST(PrometheusTest, ValuesAreGoFloats) {
  const std::vector<std::pair<std::string, double>> good = {
      {"1", 1},
      {"-1.5e3", -1500},
      {".5", 0.5},
      {"5.", 5},
      {"1E2", 100},
      {"+7", 7},
      {"0x1p-2", 0.25},
      {"-0X1.8P1", -3},
      {"Inf", INFINITY},
      {"+Inf", INFINITY},
      {"-Inf", -INFINITY},
      {"infinity", INFINITY},
      {"-inf", -INFINITY},
      {"1e-400", 0},
      {"1.7976931348623157e308", 1.7976931348623157e308},
  };
  for (const auto& [text, want] : good) {
    auto scrape = ParsePrometheusText("m " + text + "\n");
    ASSERT_TRUE(scrape.ok()) << text << ": " << scrape.status();
    EXPECT_EQ(scrape->samples[0].value, want) << text;
  }
  for (const std::string nan : {"NaN", "nan", "NAN"}) {
    auto scrape = ParsePrometheusText("m " + nan + "\n");
    ASSERT_TRUE(scrape.ok()) << nan;
    EXPECT_TRUE(std::isnan(scrape->samples[0].value));
  }
  for (const std::string bad : {"1_000", "+NaN", "-nan", "0x10", "1e", "e1", "--1", "1.2.3", ".",
                                "0x", "inff", "1e400", "-1e400", "1,5", "one", "0x1p", "1e+"}) {
    auto scrape = ParsePrometheusText("m " + bad + "\n");
    ASSERT_FALSE(scrape.ok()) << bad;
    EXPECT_EQ(scrape.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(scrape.status().message()), StartsWith("line 1: ")) << bad;
  }
}

TEST(PrometheusTest, TimestampsAreInt64) {
  auto max = ParsePrometheusText("m 1 9223372036854775807\nn 1 -9223372036854775808\no 1 +5\n");
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_EQ(max->samples[0].timestamp_ms, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(max->samples[1].timestamp_ms, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(max->samples[2].timestamp_ms, 5);
  for (const std::string bad : {"9223372036854775808", "1.5", "1e3", "++5", "0x10", "-", "5x"}) {
    auto scrape = ParsePrometheusText("m 1 " + bad + "\n");
    ASSERT_FALSE(scrape.ok()) << bad;
    EXPECT_THAT(std::string(scrape.status().message()), HasSubstr("timestamp")) << bad;
  }
}

// Each error names its line and what is wrong.
TEST(PrometheusTest, ErrorsNameTheLineAndTheProblem) {
  const std::string ok = "# TYPE ok counter\nok 1\n";  // lines 1-2
  struct Case {
    std::string text;
    int line;
    std::string what;
  };
  const std::vector<Case> cases = {
      {"1abc 1\n", 3, "expected a metric name"},
      {"{a=\"b\"} 1\n", 3, "expected a metric name"},
      {"m-x 1\n", 3, "invalid value"},
      {"m\n", 3, "has no value"},
      {"m{} \n", 3, "has no value"},
      {"m{1a=\"x\"} 1\n", 3, "invalid label name"},
      {"m{a:b=\"x\"} 1\n", 3, "expected '='"},
      {"m{a=x} 1\n", 3, "expected '\"'"},
      {"m{a=\"x} 1\n", 3, "unterminated value of label a"},
      {"m{a=\"x\\\n", 3, "unterminated value of label a"},
      {"m{a=\"x\\t\"} 1\n", 3, "invalid escape sequence"},
      {"m{a=\"x\" b=\"y\"} 1\n", 3, "expected ',' or '}'"},
      {"m{a=\"x\"\n", 3, "unterminated label set"},
      {"m{a=\"x\",a=\"y\"} 1\n", 3, "duplicate label a"},
      {"m{__name__=\"x\"} 1\n", 3, "reserved"},
      {"m{a=\"\xff\"} 1\n", 3, "not valid UTF-8"},
      {"m 1 2 3\n", 3, "unexpected text after the timestamp"},
      {"m 1\nm 2\n", 4, "duplicate sample m (first on line 3)"},
      {"m{a=\"1\",b=\"2\"} 1\nm{b=\"2\",a=\"1\"} 2\n", 4, "duplicate sample"},
      {"# TYPE m countr\n", 3, "unknown metric type \"countr\""},
      {"# TYPE m Counter\n", 3, "unknown metric type"},
      {"# TYPE m counter extra\n", 3, "unknown metric type"},
      {"# TYPE m\n", 3, "without a type"},
      {"# TYPE\n", 3, "TYPE line without a valid metric name"},
      {"# HELP 9m x\n", 3, "HELP line without a valid metric name"},
      {"# HELP m{ x\n", 3, "HELP line without a valid metric name"},
      {"# HELP m a\\tb\n", 3, "invalid escape sequence"},
      {"# HELP m a\\\n", 3, "unfinished escape"},
      {"# HELP m \xc3\n", 3, "not valid UTF-8"},
      {"# HELP m x\n# HELP m y\n", 4, "second HELP line for m (first on line 3)"},
      {"# TYPE m gauge\n# TYPE m gauge\n", 4, "second TYPE line for m (first on line 3)"},
      {"# TYPE ok gauge\n", 3, "second TYPE line for ok (first on line 1)"},
      {"m 1\n# TYPE m gauge\n", 4, "TYPE line for m comes after its samples (line 3)"},
      {"m_bucket{le=\"1\"} 1\n# TYPE m histogram\n", 4,
       "comes after its samples (m_bucket on line 3)"},
      {"m_count 1\n# TYPE m summary\n", 4, "comes after its samples (m_count on line 3)"},
      {"# HELP m_sum x\n# TYPE m histogram\n", 4, "conflicts with the family m_sum (line 3)"},
      {"# TYPE m histogram\n# TYPE m_count counter\n", 4, "sample name of histogram m"},
      {"# TYPE m summary\n# HELP m_sum s\n", 4, "sample name of summary m"},
      {"m 1", 3, "does not end with a newline"},
      {"m 1\r\n", 3, "invalid value"},
      {"# TYPE s summary\ns 1\n", 4, "has no quantile label"},
      {"# TYPE s summary\ns{quantile=\"x\"} 1\n", 4, "quantile \"x\" of s is not a number"},
      {"# TYPE s summary\ns_sum{quantile=\"0.5\"} 1\n", 4, "has a quantile label"},
  };
  for (const Case& c : cases) {
    auto scrape = ParsePrometheusText(ok + c.text);
    ASSERT_FALSE(scrape.ok()) << c.text;
    EXPECT_EQ(scrape.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    const std::string message(scrape.status().message());
    EXPECT_THAT(message, StartsWith("line " + std::to_string(c.line) + ": ")) << c.text;
    EXPECT_THAT(message, HasSubstr(c.what)) << c.text;
  }
}

TEST(PrometheusTest, HistogramChecks) {
  const std::string head = "# TYPE h histogram\n";  // line 1
  struct Case {
    std::string body;
    int line;
    std::string what;
  };
  const std::vector<Case> cases = {
      // Non-cumulative buckets.
      {"h_bucket{le=\"1\"} 5\nh_bucket{le=\"2\"} 3\nh_bucket{le=\"+Inf\"} 5\nh_count 5\n", 3,
       "bucket counts must be cumulative"},
      // Buckets out of le order, and a repeated le.
      {"h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", 3,
       "increasing le order"},
      {"h_bucket{le=\"1\"} 1\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", 3,
       "increasing le order"},
      {"h_bucket{le=\"+Inf\"} 1\nh_bucket{le=\"5\"} 1\nh_count 1\n", 3, "increasing le order"},
      // Missing +Inf, +Inf not equal to _count, no _count.
      {"h_bucket{le=\"1\"} 1\nh_bucket{le=\"2\"} 2\nh_count 2\n", 3, "has no le=\"+Inf\" bucket"},
      {"h_sum 1\nh_count 2\n", 2, "has no le=\"+Inf\" bucket"},
      {"h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_count 3\nh_sum 1\n", 4,
       "h_count is 3 but its le=\"+Inf\" bucket (line 3) is 2"},
      {"h_bucket{le=\"+Inf\"} 2\nh_sum 1\n", 2, "has no h_count sample"},
      // Bucket syntax.
      {"h_bucket 1\n", 2, "has no le label"},
      {"h_bucket{le=\"x\"} 1\n", 2, "le=\"x\" is not a number"},
      {"h_bucket{le=\"NaN\"} 1\n", 2, "is not a number"},
      {"h_bucket{le=\"1\"} NaN\n", 2, "non-negative"},
      {"h_bucket{le=\"1\"} -1\n", 2, "non-negative"},
      {"h_count{le=\"1\"} 1\n", 2, "has an le label"},
      {"h 1\n", 2, "must be h_bucket, _sum or _count"},
      // Series are told apart by their labels other than le.
      {"h_bucket{a=\"x\",le=\"+Inf\"} 1\nh_count{a=\"x\"} 1\nh_bucket{a=\"y\",le=\"+Inf\"} 2\n"
       "h_count{a=\"y\"} 1\n",
       5, "h_count{a=\"y\"} is 1"},
  };
  for (const Case& c : cases) {
    auto scrape = ParsePrometheusText(head + c.body);
    ASSERT_FALSE(scrape.ok()) << c.body;
    const std::string message(scrape.status().message());
    EXPECT_THAT(message, StartsWith("line " + std::to_string(c.line) + ": ")) << c.body;
    EXPECT_THAT(message, HasSubstr(c.what)) << c.body;
  }

  // Interleaved series, _count before the buckets, equal counts: fine.
  auto good = ParsePrometheusText(head +
                                  "h_count{a=\"x\"} 3\n"
                                  "h_bucket{a=\"x\",le=\"0.5\"} 1\n"
                                  "h_bucket{a=\"y\",le=\"0.5\"} 0\n"
                                  "h_bucket{a=\"x\",le=\"1\"} 1\n"
                                  "h_bucket{a=\"x\",le=\"+Inf\"} 3\n"
                                  "h_bucket{a=\"y\",le=\"+Inf\"} 0\n"
                                  "h_count{a=\"y\"} 0\n"
                                  "h_sum{a=\"y\"} 0\n");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->Find("h_bucket", {{"a", "x"}, {"le", "1"}}), 1);
  // An untyped family's _bucket samples are not checked.
  EXPECT_TRUE(ParsePrometheusText("u_bucket{le=\"1\"} 5\nu_bucket{le=\"2\"} 3\n").ok());
}

}  // namespace
}  // namespace flywheel::obs
