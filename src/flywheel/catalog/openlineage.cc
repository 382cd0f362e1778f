#include "flywheel/catalog/openlineage.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flywheel/obs/http_client.h"

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
    std::string base = url_;
    while (!base.empty() && base.back() == '/') base.pop_back();
    obs::HttpClientOptions o;
    o.timeout_ms = timeout_ms_;
    o.max_response_bytes = 1 << 20;
    FW_ASSIGN_OR_RETURN(const obs::HttpClientResponse r,
                        obs::HttpFetch("POST", base + "/api/v1/lineage", body, "application/json", o));
    if (r.status < 200 || r.status > 299) {
      return absl::UnavailableError(absl::StrCat("the server answered HTTP ", r.status, ": ", r.body.substr(0, 200)));
    }
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
