// Tests of the minimal HTTP client against the loopback server and against a
// raw socket that answers with canned bytes (chunked, truncated, garbage).
#include "flywheel/obs/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "flywheel/obs/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::obs {
namespace {

using ::testing::HasSubstr;

// Accepts one connection, reads the request head, writes `answer`, closes.
class CannedServer {
 public:
  explicit CannedServer(std::string answer, bool hold_open = false) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, hold_open] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      while (in.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      request_ = in;
      ::send(c, answer_.data(), answer_.size(), MSG_NOSIGNAL);
      if (hold_open) {
        while (::recv(c, buf, sizeof buf, 0) > 0) {
        }
      }
      ::close(c);
    });
  }
  ~CannedServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path = "/x") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  const std::string& request() const { return request_; }

 private:
  std::string answer_;
  int fd_ = -1;
  int port_ = 0;
  std::string request_;
  std::thread thread_;
};

TEST(HttpClientTest, GetsBodyStatusAndContentTypeFromTheServer) {
  auto server = HttpServer::Create("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  (*server)->Handle("/hello", [](const HttpRequest& r) {
    HttpResponse resp;
    resp.content_type = "application/json";
    resp.body = "{\"query\":\"" + r.query + "\"}";
    return resp;
  });
  ASSERT_TRUE((*server)->Start().ok());
  const std::string base = "http://127.0.0.1:" + std::to_string((*server)->port());
  auto r = HttpGet(base + "/hello?a=1", 2000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->content_type, "application/json");
  EXPECT_EQ(r->body, "{\"query\":\"a=1\"}");
  auto missing = HttpGet(base + "/nope", 2000);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  auto local = HttpGet("http://localhost:" + std::to_string((*server)->port()) + "/hello", 2000);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->status, 200);
}

TEST(HttpClientTest, ChunkedAndCloseDelimitedBodies) {
  {
    CannedServer s("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n",
                   /*hold_open=*/true);
    auto r = HttpFetch("POST", s.url("/api/v1/lineage"), "{}", "application/json");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, "hello, world");
    EXPECT_THAT(s.request(), HasSubstr("POST /api/v1/lineage HTTP/1.1\r\n"));
    EXPECT_THAT(s.request(), HasSubstr("Content-Length: 2\r\n"));
  }
  {
    CannedServer s("HTTP/1.0 201 Created\r\n\r\nno length, ends at close");
    auto r = HttpGet(s.url(), 2000);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 201);
    EXPECT_EQ(r->body, "no length, ends at close");
  }
}

TEST(HttpClientTest, BadAnswersAndUrlsAreClearErrors) {
  {
    CannedServer s("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort");
    auto r = HttpGet(s.url(), 2000);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("closed before the answer was complete"));
  }
  {
    CannedServer s("SSH-2.0-OpenSSH\r\n\r\n");
    auto r = HttpGet(s.url(), 2000);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("not an HTTP answer"));
  }
  {
    CannedServer s("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", /*hold_open=*/true);  // never finishes
    auto r = HttpGet(s.url(), 300);
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr("timed out"));
  }
  EXPECT_THAT(HttpGet("https://127.0.0.1/", 100).status().message(), HasSubstr("only http://"));
  EXPECT_THAT(HttpGet("http://127.0.0.1:99999/", 100).status().message(), HasSubstr("bad port"));
  EXPECT_THAT(HttpGet("http:///metrics", 100).status().message(), HasSubstr("no host"));
  EXPECT_THAT(HttpGet("http://127.0.0.1:1/a b", 100).status().message(), HasSubstr("space in the path"));
  // Nothing listens on port 1 of loopback.
  auto refused = HttpGet("http://127.0.0.1:1/metrics", 1000);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("connecting to 127.0.0.1:1"));
}

}  // namespace
}  // namespace flywheel::obs
