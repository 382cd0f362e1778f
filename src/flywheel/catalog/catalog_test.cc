// The catalog against both backends: SQLite in a temporary catalog root and a
// throwaway PostgreSQL server the test starts itself (testing/pg_server.h).
#include "flywheel/catalog/catalog.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "flywheel/catalog/openlineage.h"
#include "flywheel/catalog/sql.h"
#include "flywheel/catalog/testing/pg_server.h"
#include "gtest/gtest.h"

namespace flywheel::catalog {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string TempDir(const std::string& tag) {
  std::string dir = testing::MakeTempDir("catalog-" + tag);
  EXPECT_FALSE(dir.empty());
  return dir;
}

std::vector<json> ReadLines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

class CatalogTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = TempDir(GetParam());
    warehouse_ = dir_ + "/warehouse";
    events_ = dir_ + "/events.jsonl";
    auto spec = testing::CatalogSpecForTest(GetParam(), dir_, "cat");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    cat_ = OpenCatalog("alice");
  }
  void TearDown() override {
    cat_.reset();
    fs::remove_all(dir_);
  }

  std::unique_ptr<Catalog> OpenCatalog(const std::string& principal) {
    CatalogOptions o;
    o.principal = principal;
    o.warehouse = warehouse_;
    o.openlineage_file = events_;
    auto c = Catalog::Open(spec_, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  Node Dataset(const std::string& name, int64_t v) { return Node{Node::Kind::kDataset, name, v, ""}; }

  std::string RunWith(const std::string& job, const std::string& type, std::vector<Node> in, std::vector<Node> out,
                      const std::string& in_detail = "{}") {
    auto run = cat_->StartRun(job, type);
    EXPECT_TRUE(run.ok()) << run.status();
    for (auto& n : in) EXPECT_TRUE(cat_->AddEdge(Edge{run->id, true, n, in_detail}).ok());
    for (auto& n : out) EXPECT_TRUE(cat_->AddEdge(Edge{run->id, false, n, "{}"}).ok());
    EXPECT_TRUE(cat_->FinishRun(run->id, RunState::kComplete).ok());
    return run->id;
  }

  std::string dir_, warehouse_, events_, spec_;
  std::unique_ptr<Catalog> cat_;
};

TEST_P(CatalogTest, MigrationsAreAppliedOnceAndVersioned) {
  ASSERT_NE(cat_, nullptr);
  EXPECT_EQ(cat_->backend(), GetParam());
  auto v = cat_->SchemaVersion();
  ASSERT_TRUE(v.ok());
  EXPECT_GE(*v, 1);
  auto again = OpenCatalog("bob");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(*again->SchemaVersion(), *v);
  auto rows = again->db()->Query("SELECT count(*) FROM schema_migrations");
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->at(0).Int(0), *v);
  // A catalog written by a newer flywheel is refused with a clear error.
  ASSERT_TRUE(again->db()->Exec("INSERT INTO schema_migrations (version, applied_ms) VALUES (999, 0)").ok());
  CatalogOptions o;
  o.principal = "carol";
  auto newer = Catalog::Open(spec_, o);
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("schema is version 999"), std::string::npos) << newer.status();
}

TEST_P(CatalogTest, DatasetNamesAreValidatedAndNeverEscapeTheWarehouse) {
  for (const std::string& bad : std::vector<std::string>{"noslash", "a/b/c", "../x", "ns/..", "./t", "ns/", "/t", "ns/a\\b",
                                std::string("ns/a\nb"), std::string(129, 'n') + "/t"}) {
    EXPECT_FALSE(Catalog::ValidateDatasetName(bad).ok()) << bad;
    EXPECT_FALSE(cat_->DefaultLocation(bad).ok()) << bad;
    EXPECT_FALSE(cat_->RegisterDataset(bad, dir_ + "/x").ok()) << bad;
  }
  // Quotes, semicolons and unicode are names like any other.
  const std::string tricky = "o'brien; DROP TABLE datasets;--/täble \"ü\" 数据";
  ASSERT_TRUE(Catalog::ValidateDatasetName(tricky).ok());
  auto loc = cat_->DefaultLocation(tricky);
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(fs::path(*loc).parent_path().parent_path(), fs::path(warehouse_));
  auto reg = cat_->RegisterDataset(tricky, *loc);
  ASSERT_TRUE(reg.ok()) << reg.status();
  auto got = cat_->GetDataset(tricky);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->name, tricky);
  EXPECT_EQ(got->ns, "o'brien; DROP TABLE datasets;--");
  auto all = cat_->ListDatasets();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ(all->at(0).name, tricky);
}

TEST_P(CatalogTest, RegisteringIsIdempotentAndConflictsAreNamed) {
  ASSERT_TRUE(cat_->RegisterDataset("ns/a", dir_ + "/a").ok());
  ASSERT_TRUE(cat_->RegisterDataset("ns/a", dir_ + "/./a").ok());
  auto other_uri = cat_->RegisterDataset("ns/a", dir_ + "/b");
  ASSERT_FALSE(other_uri.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(other_uri.status()));
  EXPECT_NE(other_uri.status().message().find("ns/a"), std::string::npos);
  auto other_name = cat_->RegisterDataset("ns/b", dir_ + "/a");
  ASSERT_FALSE(other_name.ok());
  EXPECT_NE(other_name.status().message().find("registered as dataset 'ns/a'"), std::string::npos);
  EXPECT_TRUE(absl::IsNotFound(cat_->GetDataset("ns/zzz").status()));
  auto only_ns = cat_->ListDatasets("ns");
  ASSERT_TRUE(only_ns.ok());
  EXPECT_EQ(only_ns->size(), 1u);
  EXPECT_TRUE(cat_->ListDatasets("other")->empty());
}

TEST_P(CatalogTest, ResolveTableNamesWarehouseTablesByPathAndOthersAsExternal) {
  auto inside = cat_->ResolveTable(warehouse_ + "/raw/events");
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(inside->name, "raw/events");
  auto out1 = cat_->ResolveTable(dir_ + "/elsewhere/events");
  ASSERT_TRUE(out1.ok());
  EXPECT_EQ(out1->name, "external/events");
  auto out2 = cat_->ResolveTable(dir_ + "/other/events");
  ASSERT_TRUE(out2.ok());
  EXPECT_EQ(out2->name, "external/events-2");
  // The same table resolves to the same dataset.
  EXPECT_EQ(cat_->ResolveTable(dir_ + "/elsewhere/../elsewhere/events")->name, "external/events");
}

TEST_P(CatalogTest, RunsRecordStateEdgesAndErrors) {
  auto run = cat_->StartRun("nightly-ingest", "ingest", R"({"files": 3})");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->id.size(), 36u);
  EXPECT_EQ(run->principal, "alice");
  ASSERT_TRUE(cat_->AddEdge(Edge{run->id, true, Node{Node::Kind::kFile, "/data/a.parquet", -1, ""}, "{}"}).ok());
  ASSERT_TRUE(cat_->AddEdge(Edge{run->id, false, Dataset("raw/events", 1), R"({"rows": 10})"}).ok());
  EXPECT_FALSE(cat_->AddEdge(Edge{"no-such-run", true, Dataset("raw/x", 1), "{}"}).ok());
  EXPECT_FALSE(cat_->AddEdge(Edge{run->id, true, Dataset("bad", 1), "{}"}).ok());
  EXPECT_FALSE(cat_->AddEdge(Edge{run->id, true, Dataset("raw/x", 1), "{not json"}).ok());
  ASSERT_TRUE(cat_->FinishRun(run->id, RunState::kFail, "disk full").ok());
  auto again = cat_->FinishRun(run->id, RunState::kComplete);
  EXPECT_TRUE(absl::IsFailedPrecondition(again)) << again;
  auto got = cat_->GetRun(run->id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, RunState::kFail);
  EXPECT_EQ(got->error, "disk full");
  EXPECT_GE(got->ended_ms, got->started_ms);
  EXPECT_EQ(json::parse(got->params_json)["files"], 3);
  auto edges = cat_->RunEdges(run->id);
  ASSERT_TRUE(edges.ok());
  ASSERT_EQ(edges->size(), 2u);
  EXPECT_TRUE(edges->at(0).input);
  EXPECT_EQ(edges->at(0).node.ToString(), "file:/data/a.parquet");
  EXPECT_EQ(edges->at(1).node.ToString(), "raw/events@1");
  EXPECT_EQ(json::parse(edges->at(1).detail_json)["rows"], 10);
  EXPECT_FALSE(cat_->StartRun("j", "t", "[1]").ok());
  EXPECT_FALSE(cat_->StartRun("", "t").ok());
}

TEST_P(CatalogTest, LineageOfIngestTransformTrainCheckpoint) {
  const Node src{Node::Kind::kFile, "/data/clicks.parquet", -1, ""};
  RunWith("ingest-clicks", "ingest", {src}, {Dataset("raw/clicks", 1)});
  RunWith("ingest-clicks", "ingest", {Node{Node::Kind::kFile, "/data/clicks2.parquet", -1, ""}},
          {Dataset("raw/clicks", 2)});
  RunWith("clean", "transform", {Dataset("raw/clicks", 2)}, {Dataset("clean/clicks", 1)});
  const std::string state = R"({"seed": 7, "epoch": 1, "consumed": 512})";
  auto train = cat_->StartRun("train-ranker", "train", R"({"lr": 0.1})");
  ASSERT_TRUE(train.ok());
  ASSERT_TRUE(cat_->AddEdge(Edge{train->id, true, Dataset("clean/clicks", 1), state}).ok());
  const std::string ckpt = dir_ + "/model.ckpt";
  std::ofstream(ckpt) << "weights v1";
  auto art = cat_->LogArtifact(train->id, ckpt,
                               json::array({{{"dataset", "clean/clicks"}, {"version", 1}, {"state", json::parse(state)}}})
                                   .dump());
  ASSERT_TRUE(art.ok()) << art.status();
  EXPECT_EQ(art->hash.rfind("xxh3:", 0), 0u);
  EXPECT_EQ(art->hash.size(), 5u + 32u);
  ASSERT_TRUE(cat_->FinishRun(train->id, RunState::kComplete).ok());
  // An unrelated run must not show up.
  RunWith("other", "transform", {Dataset("raw/other", 1)}, {Dataset("clean/other", 1)});

  auto up = cat_->Upstream(Node{Node::Kind::kArtifact, ckpt, -1, ""});
  ASSERT_TRUE(up.ok()) << up.status();
  std::vector<std::string> jobs;
  for (const auto& s : up->steps) jobs.push_back(s.run.job + "/" + std::to_string(s.depth));
  EXPECT_EQ(jobs, (std::vector<std::string>{"train-ranker/1", "clean/2", "ingest-clicks/3", "ingest-clicks/3"}));

  auto down = cat_->Downstream(Dataset("raw/clicks", 1));
  ASSERT_TRUE(down.ok());
  jobs.clear();
  for (const auto& s : down->steps) jobs.push_back(s.run.job);
  EXPECT_EQ(jobs, (std::vector<std::string>{"clean", "train-ranker"}));
  ASSERT_EQ(down->steps[1].outputs.size(), 1u);
  EXPECT_EQ(down->steps[1].outputs[0].node.kind, Node::Kind::kArtifact);

  // Version semantics: up from raw/clicks@1 sees only the first ingest; down
  // from clean/clicks@2 (after the version trained on) sees nothing.
  auto up1 = cat_->Upstream(Dataset("raw/clicks", 1));
  ASSERT_EQ(up1->steps.size(), 1u);
  EXPECT_EQ(up1->steps[0].inputs[0].node.name, "/data/clicks.parquet");
  EXPECT_TRUE(cat_->Downstream(Dataset("clean/clicks", 2))->steps.empty());
  EXPECT_EQ(cat_->Upstream(Dataset("raw/clicks", -1))->steps.size(), 2u);
  EXPECT_EQ(cat_->Upstream(Node{Node::Kind::kArtifact, ckpt, -1, ""}, 1)->steps.size(), 1u);

  auto samples = cat_->Samples(Node{Node::Kind::kArtifact, ckpt, -1, ""});
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->run_id, train->id);
  EXPECT_EQ(samples->artifact.hash, art->hash);
  ASSERT_EQ(samples->sources.size(), 1u);
  EXPECT_EQ(samples->sources[0].node.ToString(), "clean/clicks@1");
  EXPECT_EQ(json::parse(samples->sources[0].detail_json)["state"]["consumed"], 512);
  EXPECT_TRUE(absl::IsNotFound(cat_->Samples(Node{Node::Kind::kArtifact, dir_ + "/nope", -1, ""}).status()));
}

TEST_P(CatalogTest, EveryRunEmitsStartAndCompleteWithItsDatasets) {
  ASSERT_TRUE(cat_->RegisterDataset("raw/clicks", warehouse_ + "/raw/clicks").ok());
  ASSERT_TRUE(cat_->RecordVersion(DatasetVersion{"raw/clicks", 1, 1000, "append", 10,
                                                 R"([{"name":"user_id","type":"int64"}])"})
                  .ok());
  std::string id = RunWith("clean", "transform", {Dataset("raw/clicks", 1)}, {Dataset("clean/clicks", 1)});
  auto fail = cat_->StartRun("broken", "transform");
  ASSERT_TRUE(cat_->FinishRun(fail->id, RunState::kFail, "bad row 7").ok());
  auto lines = ReadLines(events_);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["eventType"], "START");
  EXPECT_EQ(lines[0]["run"]["runId"], id);
  EXPECT_EQ(lines[1]["eventType"], "COMPLETE");
  EXPECT_EQ(lines[1]["job"]["name"], "clean");
  ASSERT_EQ(lines[1]["inputs"].size(), 1u);
  const auto& in = lines[1]["inputs"][0];
  EXPECT_EQ(in["name"], "raw/clicks");
  EXPECT_EQ(in["facets"]["version"]["datasetVersion"], "1");
  EXPECT_EQ(in["facets"]["schema"]["fields"][0]["name"], "user_id");
  EXPECT_EQ(in["facets"]["dataSource"]["uri"], "file://" + warehouse_ + "/raw/clicks");
  EXPECT_EQ(lines[1]["outputs"][0]["name"], "clean/clicks");
  EXPECT_EQ(lines[3]["eventType"], "FAIL");
  EXPECT_EQ(lines[3]["run"]["facets"]["errorMessage"]["message"], "bad row 7");
}

TEST_P(CatalogTest, ConcurrentProcessesKeepEveryRunAndEvent) {
  constexpr int kProcs = 4, kRuns = 25;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto c = OpenCatalog("worker" + std::to_string(p));
      int ok = c != nullptr;
      for (int i = 0; ok && i < kRuns; ++i) {
        auto run = c->StartRun("job" + std::to_string(p), "transform");
        ok = run.ok() && c->AddEdge(Edge{run->id, true, Dataset("in/t", i), "{}"}).ok() &&
             c->AddEdge(Edge{run->id, false, Dataset("out/t" + std::to_string(p), i), "{}"}).ok() &&
             c->FinishRun(run->id, RunState::kComplete).ok();
      }
      ::_exit(ok ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto runs = cat_->db()->Query("SELECT count(*), count(DISTINCT id) FROM runs WHERE state = 'COMPLETE'");
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->at(0).Int(0), kProcs * kRuns);
  EXPECT_EQ(runs->at(0).Int(1), kProcs * kRuns);
  EXPECT_EQ(cat_->db()->Query("SELECT count(*) FROM edges")->at(0).Int(0), 2 * kProcs * kRuns);
  auto lines = ReadLines(events_);
  EXPECT_EQ(lines.size(), static_cast<size_t>(2 * kProcs * kRuns));
  EXPECT_EQ(cat_->Downstream(Dataset("in/t", 0))->steps.size(), static_cast<size_t>(kProcs * kRuns));
}

INSTANTIATE_TEST_SUITE_P(Backends, CatalogTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

TEST(PrincipalTest, IdentityComesFromFlywheelUserThenTheTokenFileThenTheOsUser) {
  const std::string dir = TempDir("principal");
  const std::string token = dir + "/token";
  std::ofstream(token) << "carol:s3cret\n";
  ::setenv("FLYWHEEL_USER", "alice", 1);
  ::setenv("FLYWHEEL_TOKEN_FILE", token.c_str(), 1);
  EXPECT_EQ(*PrincipalFromEnvironment(), "alice");
  ::unsetenv("FLYWHEEL_USER");
  EXPECT_EQ(*PrincipalFromEnvironment(), "carol");  // the secret after ':' is not the name
  ::setenv("FLYWHEEL_TOKEN_FILE", (dir + "/missing").c_str(), 1);
  auto missing = PrincipalFromEnvironment();
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(missing.status()));
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos);
  ::unsetenv("FLYWHEEL_TOKEN_FILE");
  auto os_user = PrincipalFromEnvironment();
  ASSERT_TRUE(os_user.ok());
  EXPECT_FALSE(os_user->empty());
  fs::remove_all(dir);
}

TEST(NodeTest, ParsesAndPrintsEveryForm) {
  EXPECT_EQ(Node::Parse("ns/t@3")->ToString(), "ns/t@3");
  EXPECT_EQ(Node::Parse("ns/t")->version, -1);
  EXPECT_EQ(Node::Parse("artifact:/ckpt/m.pt")->kind, Node::Kind::kArtifact);
  EXPECT_EQ(Node::Parse("file:/a/b.parquet")->ToString(), "file:/a/b.parquet");
  EXPECT_FALSE(Node::Parse("ns/t@x").ok());
  EXPECT_FALSE(Node::Parse("ns/t@-1").ok());
  EXPECT_FALSE(Node::Parse("/abs/path").ok());
}

// A one-shot HTTP server on loopback: answers each request with `status`
// and keeps the bodies it received.
class TinyHttpServer {
 public:
  explicit TinyHttpServer(int status) : status_(status) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 8);
    thread_ = std::thread([this] { Serve(); });
  }
  ~TinyHttpServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<std::string> requests;

 private:
  void Serve() {
    while (true) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      size_t want = std::string::npos;
      while (req.size() < want) {
        ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
        size_t hdr = req.find("\r\n\r\n");
        size_t cl = req.find("Content-Length: ");
        if (hdr != std::string::npos && cl != std::string::npos) want = hdr + 4 + std::stoul(req.substr(cl + 16));
      }
      requests.push_back(req);
      std::string resp = "HTTP/1.1 " + std::to_string(status_) + " X\r\nContent-Length: 0\r\n\r\n";
      ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  int status_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(HttpSinkTest, PostsEventsToTheLineageEndpoint) {
  TinyHttpServer server(201);
  auto sink = MakeHttpSink("http://127.0.0.1:" + std::to_string(server.port()) + "/prefix/", 5000);
  ASSERT_TRUE(sink->Send(R"({"eventType":"START"})").ok());
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_EQ(server.requests[0].rfind("POST /prefix/api/v1/lineage HTTP/1.1\r\n", 0), 0u) << server.requests[0];
  EXPECT_NE(server.requests[0].find("Content-Type: application/json"), std::string::npos);
  EXPECT_NE(server.requests[0].find("\r\n\r\n{\"eventType\":\"START\"}"), std::string::npos);
}

TEST(HttpSinkTest, ErrorsNameTheUrlAndTheAnswer) {
  TinyHttpServer server(500);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  Status s = MakeHttpSink(url, 5000)->Send("{}");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(url), std::string::npos) << s;
  EXPECT_NE(s.message().find("500"), std::string::npos) << s;
  // Nothing listens on port 1 of loopback: refused, not a hang.
  Status refused = MakeHttpSink("http://127.0.0.1:1", 2000)->Send("{}");
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(MakeHttpSink("https://example.invalid", 1000)->Send("{}").ok());
}

TEST(HttpSinkTest, ARunSucceedsWhenTheEndpointIsDown) {
  std::string dir = TempDir("http");
  CatalogOptions o;
  o.principal = "alice";
  o.openlineage_url = "http://127.0.0.1:1";
  auto c = Catalog::Open(dir, o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto run = (*c)->StartRun("j", "transform");
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE((*c)->FinishRun(run->id, RunState::kComplete).ok());
  // The file sink of a directory catalog still has both events.
  EXPECT_EQ(ReadLines(dir + "/openlineage.jsonl").size(), 2u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flywheel::catalog
