#include "flywheel/catalog/openlineage.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace flywheel::catalog {
namespace {

using json = nlohmann::json;

constexpr const char* kSchemaUrl = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent";
constexpr const char* kDatasetNamespace = "flywheel";
constexpr const char* kFileNamespace = "file";

std::string FacetUrl(const char* version, const char* facet) {
  return absl::StrCat("https://openlineage.io/spec/facets/", version, "/", facet, ".json#/$defs/", facet);
}

json Facet(const char* version, const char* facet) {
  return json{{"_producer", kOpenLineageProducer}, {"_schemaURL", FacetUrl(version, facet)}};
}

std::string IsoTime(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof(out), "%s.%03dZ", buf, static_cast<int>(ms % 1000));
  return out;
}

// file:// URI of an absolute path, percent-encoding every byte outside
// RFC 3986's unreserved set and '/' (spaces, quotes, UTF-8, ...).
std::string FileUri(const std::string& path) {
  std::string out = "file://";
  static const char* kHex = "0123456789ABCDEF";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

json DatasetJson(const Edge& e, const std::map<std::string, DatasetFacts>& facts) {
  json d;
  json facets = json::object();
  switch (e.node.kind) {
    case Node::Kind::kDataset: {
      d["namespace"] = kDatasetNamespace;
      d["name"] = e.node.name;
      auto it = facts.find(e.node.ToString());
      // A dataset the catalog has no location for gets no dataSource facet
      // (its uri must be a URI, and "" is not one).
      if (it != facts.end() && !it->second.uri.empty()) {
        json src = Facet("1-0-1", "DatasourceDatasetFacet");
        src["name"] = kDatasetNamespace;
        src["uri"] = it->second.uri.rfind('/', 0) == 0 ? FileUri(it->second.uri) : it->second.uri;
        facets["dataSource"] = src;
        if (!it->second.schema_json.empty()) {
          json fields = json::parse(it->second.schema_json, nullptr, false);
          if (fields.is_array()) {
            json schema = Facet("1-2-0", "SchemaDatasetFacet");
            schema["fields"] = json::array();
            for (const auto& f : fields) {
              if (!f.is_object() || !f.contains("name")) continue;
              schema["fields"].push_back({{"name", f["name"]}, {"type", f.value("type", "")}});
            }
            facets["schema"] = schema;
          }
        }
      }
      json storage = Facet("1-0-1", "StorageDatasetFacet");
      storage["storageLayer"] = "flywheel";
      storage["fileFormat"] = "flywheel-shard";
      facets["storage"] = storage;
      if (e.node.version >= 0) {
        json v = Facet("1-0-1", "DatasetVersionDatasetFacet");
        v["datasetVersion"] = std::to_string(e.node.version);
        facets["version"] = v;
      }
      break;
    }
    case Node::Kind::kArtifact:
    case Node::Kind::kFile: {
      d["namespace"] = kFileNamespace;
      d["name"] = e.node.name;
      if (!e.node.hash.empty()) {
        json v = Facet("1-0-1", "DatasetVersionDatasetFacet");
        v["datasetVersion"] = e.node.hash;
        facets["version"] = v;
      }
      break;
    }
  }
  d["facets"] = facets;
  // What the edge says beyond the name (a loader's seed, epoch and
  // positions; an ingest's row counts) travels as a flywheel facet.
  json detail = json::parse(e.detail_json, nullptr, false);
  if (detail.is_object() && !detail.empty()) {
    json f = {{"_producer", kOpenLineageProducer}, {"_schemaURL", "urn:flywheel:facets:edge:1"}, {"detail", detail}};
    d[e.input ? "inputFacets" : "outputFacets"] = json{{"flywheel", f}};
  }
  return d;
}

}  // namespace

std::string BuildRunEvent(const RunInfo& run, const std::string& event_type, const std::vector<Edge>& edges,
                          const std::map<std::string, DatasetFacts>& facts, int64_t event_time_ms) {
  json ev;
  ev["eventType"] = event_type;
  ev["eventTime"] = IsoTime(event_time_ms);
  ev["producer"] = kOpenLineageProducer;
  ev["schemaURL"] = kSchemaUrl;
  json run_facets = json::object();
  json engine = Facet("1-1-1", "ProcessingEngineRunFacet");
  engine["version"] = "0.1.0";
  engine["name"] = "flywheel";
  run_facets["processing_engine"] = engine;
  if (event_type == "FAIL" && !run.error.empty()) {
    json err = Facet("1-0-1", "ErrorMessageRunFacet");
    err["message"] = run.error;
    err["programmingLanguage"] = "C++";
    run_facets["errorMessage"] = err;
  }
  json params = json::parse(run.params_json, nullptr, false);
  if (params.is_object() && !params.empty()) {
    run_facets["flywheel_params"] = {
        {"_producer", kOpenLineageProducer}, {"_schemaURL", "urn:flywheel:facets:params:1"}, {"params", params}};
  }
  ev["run"] = {{"runId", run.id}, {"facets", run_facets}};
  json job_type = Facet("2-0-4", "JobTypeJobFacet");
  job_type["processingType"] = "BATCH";
  job_type["integration"] = "FLYWHEEL";
  job_type["jobType"] = run.job_type;
  ev["job"] = {{"namespace", kDatasetNamespace}, {"name", run.job}, {"facets", {{"jobType", job_type}}}};
  ev["inputs"] = json::array();
  ev["outputs"] = json::array();
  for (const Edge& e : edges) ev[e.input ? "inputs" : "outputs"].push_back(DatasetJson(e, facts));
  return ev.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

class FileSink final : public EventSink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)) {}
  Status Send(const std::string& event) override {
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("opening ", path_, ": ", std::strerror(errno)));
    // One write per line under an exclusive lock: lines from several
    // processes never interleave.
    ::flock(fd, LOCK_EX);
    std::string line = event + "\n";
    size_t done = 0;
    Status s;
    while (done < line.size()) {
      ssize_t n = ::write(fd, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        s = absl::UnavailableError(absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
        break;
      }
      done += static_cast<size_t>(n);
    }
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return s;
  }
  std::string Describe() const override { return path_; }

 private:
  std::string path_;
};

class HttpSink final : public EventSink {
 public:
  HttpSink(std::string url, int timeout_ms) : url_(std::move(url)), timeout_ms_(timeout_ms) {}

  Status Send(const std::string& event) override {
    FW_RETURN_IF_ERROR_CTX(Post(event), "posting an OpenLineage event to ", url_);
    return absl::OkStatus();
  }
  std::string Describe() const override { return url_; }

 private:
  Status Post(const std::string& body) {
    constexpr std::string_view kScheme = "http://";
    if (url_.rfind(kScheme, 0) != 0) return absl::InvalidArgumentError("only http:// URLs are supported");
    std::string rest = url_.substr(kScheme.size());
    size_t slash = rest.find('/');
    std::string hostport = rest.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    std::string host = hostport, port = "80";
    if (size_t colon = hostport.rfind(':'); colon != std::string::npos && hostport.find(']') == std::string::npos) {
      host = hostport.substr(0, colon);
      port = hostport.substr(colon + 1);
    }
    if (host.empty()) return absl::InvalidArgumentError("no host in the URL");
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
      return absl::UnavailableError(absl::StrCat("resolving ", host, ": ", gai_strerror(rc)));
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, ::freeaddrinfo);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    auto remaining_ms = [&] {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      return static_cast<int>(std::max<int64_t>(0, left.count()));
    };
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
    std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { ::close(*f); });
    if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS)
      return absl::UnavailableError(absl::StrCat("connecting: ", std::strerror(errno)));
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms()) != 1) return absl::DeadlineExceededError("connecting: timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return absl::UnavailableError(absl::StrCat("connecting: ", std::strerror(err)));
    std::string req = absl::StrCat("POST ", prefix, "/api/v1/lineage HTTP/1.1\r\nHost: ", hostport,
                                   "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                                   "\r\nConnection: close\r\nUser-Agent: flywheel/0.1.0\r\n\r\n", body);
    size_t sent = 0;
    while (sent < req.size()) {
      ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd w{fd, POLLOUT, 0};
        if (::poll(&w, 1, remaining_ms()) != 1) return absl::DeadlineExceededError("sending: timed out");
        continue;
      }
      return absl::UnavailableError(absl::StrCat("sending: ", std::strerror(errno)));
    }
    std::string answer;
    char buf[4096];
    while (answer.find("\r\n") == std::string::npos) {
      pollfd r{fd, POLLIN, 0};
      if (::poll(&r, 1, remaining_ms()) != 1) return absl::DeadlineExceededError("waiting for the answer: timed out");
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return absl::UnavailableError("the server closed the connection without an answer");
      answer.append(buf, static_cast<size_t>(n));
      if (answer.size() > 65536) break;
    }
    // "HTTP/1.1 201 Created"
    std::string status_line = answer.substr(0, answer.find("\r\n"));
    size_t sp = status_line.find(' ');
    int code = 0;
    if (sp == std::string::npos || !absl::SimpleAtoi(status_line.substr(sp + 1, 3), &code))
      return absl::UnavailableError(absl::StrCat("not an HTTP answer: ", status_line.substr(0, 80)));
    if (code < 200 || code > 299) return absl::UnavailableError(absl::StrCat("the server answered ", status_line));
    return absl::OkStatus();
  }

  std::string url_;
  int timeout_ms_;
};

}  // namespace

std::unique_ptr<EventSink> MakeFileSink(const std::string& path) { return std::make_unique<FileSink>(path); }
std::unique_ptr<EventSink> MakeHttpSink(const std::string& base_url, int timeout_ms) {
  return std::make_unique<HttpSink>(base_url, timeout_ms);
}

}  // namespace flywheel::catalog
