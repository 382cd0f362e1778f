// `flywheel doctor`: this machine's limits (memcpy, page cache, disk, loopback
// gRPC of the replay service) and, for a loader run here (--table) or a
// running job (--scrape), each stage's throughput against those limits and
// the bottleneck. docs/doctor.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/catalog/read_policy.h"
#include "flywheel/loader/loader.h"
#include "flywheel/obs/dashboard.h"
#include "flywheel/obs/doctor.h"
#include "flywheel/table/table.h"
#include "nlohmann/json.hpp"

#ifdef FLYWHEEL_HAVE_REPLAY_SERVICE
#include "flywheel/replay/service/client.h"
#include "flywheel/replay/service/server.h"
#endif

namespace flywheel::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int kScrapeTimeoutMs = 5000;

struct DoctorArgs {
  bool json = false;
  bool quick = false;
  std::string dir;
  int64_t size_mb = 1024;  // 64 with --quick unless given
  double seconds = 5;      // 1 with --quick unless given
  std::string table;
  std::vector<std::string> columns;
  int64_t batch_size = 256;
  int num_threads = 2;
  bool shuffle = true;
  std::string scrape;
};

void Progress(const std::string& line) { std::fprintf(stderr, "flywheel doctor: %s\n", line.c_str()); }

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

#ifdef FLYWHEEL_HAVE_REPLAY_SERVICE
// Streams `items` items of `item_bytes` (one uncompressed step each) through
// an in-process replay server on 127.0.0.1, inserting all, then sampling all.
Result<obs::GrpcLoopback> MeasureGrpc(int64_t items, int64_t item_bytes) {
  replay::ReplayTableOptions to;
  to.name = "doctor";
  to.sampler = replay::NewFifoSelector();
  to.remover = replay::NewFifoSelector();
  to.max_size = items + 1;
  to.max_times_sampled = 1;
  to.rate_limiter = replay::RateLimiterOptions::MinSize(1);
  to.watchdog = absl::ZeroDuration();
  FW_ASSIGN_OR_RETURN(std::unique_ptr<replay::ReplayTable> table, replay::ReplayTable::Create(std::move(to)));
  replay::ServerOptions so;
  so.address = "127.0.0.1:0";
  so.tables.push_back(std::shared_ptr<replay::ReplayTable>(std::move(table)));
  FW_ASSIGN_OR_RETURN_CTX(std::unique_ptr<replay::Server> server, replay::Server::Start(std::move(so)),
                      "starting a loopback replay server");
  replay::Client client(server->address());

  replay::RemoteWriterOptions wo;
  wo.writer.chunk_length = 1;
  wo.writer.codec = format::Codec::kNone;
  wo.writer.max_history = 1;  // keep no old steps: memory stays at a few items
  wo.max_in_flight_items = 8;
  wo.reconnect_timeout = absl::ZeroDuration();
  FW_ASSIGN_OR_RETURN(std::unique_ptr<replay::RemoteWriter> writer, client.NewWriter(wo));
  std::vector<uint8_t> data(static_cast<size_t>(item_bytes));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  const format::DataType type = format::DataType::Tensor(format::TypeId::kUInt8, {item_bytes});

  obs::GrpcLoopback out;
  out.items = items;
  out.item_bytes = item_bytes;
  const double total_mb = static_cast<double>(items * item_bytes) / 1e6;
  auto t0 = Clock::now();
  for (int64_t i = 0; i < items; ++i) {
    data[0] = static_cast<uint8_t>(i);
    FW_RETURN_IF_ERROR(writer->Append({{"data", type, data.data()}}));
    FW_ASSIGN_OR_RETURN_CTX(replay::ItemKey key, writer->CreateItem("doctor", 1.0, {{"data", 1}}, absl::Seconds(60)),
                        "loopback insert");
    (void)key;
  }
  FW_RETURN_IF_ERROR_CTX(writer->Flush(absl::Seconds(60)), "loopback insert");
  out.insert_mbps = total_mb / std::max(SecondsSince(t0), 1e-9);
  FW_RETURN_IF_ERROR(writer->Close());

  std::unique_ptr<replay::RemoteSampler> sampler = client.NewSampler(4);
  t0 = Clock::now();
  int64_t got = 0;
  while (got < items) {
    FW_ASSIGN_OR_RETURN_CTX(std::vector<replay::SampledItem> batch,
                        sampler->Sample("doctor", std::min<int64_t>(8, items - got), absl::Seconds(60)),
                        "loopback sample");
    for (const auto& s : batch) {
      if (s.item->columns.size() != 1 || s.item->columns[0].length != 1) {
        return absl::InternalError("loopback sample: an item came back with the wrong shape");
      }
    }
    got += static_cast<int64_t>(batch.size());
  }
  out.sample_mbps = total_mb / std::max(SecondsSince(t0), 1e-9);
  sampler.reset();
  server->Stop();
  return out;
}
#endif

std::string LoaderConfigWords(const DoctorArgs& a) {
  return absl::StrCat("batch ", a.batch_size, ", ", a.num_threads, " thread(s), ",
                      a.shuffle ? "shuffled" : "in order", ", ",
                      a.columns.empty() ? std::string("all columns") : "columns " + absl::StrJoin(a.columns, ","));
}

loader::LoaderOptions LoaderOptionsOf(const DoctorArgs& a) {
  loader::LoaderOptions lo;
  lo.columns = a.columns;
  lo.batch_size = a.batch_size;
  lo.num_threads = a.num_threads;
  lo.shuffle = a.shuffle;
  return lo;
}

// Opens `a.table` and checks the loader options against it, before anything
// is measured, so a wrong table or column fails at once.
Result<std::shared_ptr<table::Table>> OpenForLoader(const DoctorArgs& a) {
  FW_ASSIGN_OR_RETURN(std::string path, AuthorizedTable(a.table, catalog::Privilege::kRead, "doctor"));
  FW_ASSIGN_OR_RETURN_CTX(std::shared_ptr<table::Table> t, table::Table::Open(path), "opening table ", a.table);
  // The doctor reads what this principal may read: refused columns fail
  // here, masked ones are masked in its loader (RunLoader).
  FW_ASSIGN_OR_RETURN(auto guard, ReadGuardFor(*t));
  FW_RETURN_IF_ERROR(guard->CheckRead(a.columns, "doctor"));
  FW_RETURN_IF_ERROR_CTX(LoaderOptionsOf(a).Validate(), "loader options");
  for (const auto& c : a.columns) {
    if (t->schema().FieldIndex(c) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--columns: table ", a.table, " has no column '", c, "'"));
    }
  }
  if (t->num_rows() == 0) return absl::FailedPreconditionError(absl::StrCat("table ", a.table, " has no rows to load"));
  return t;
}

// Runs a loader over `t` for `a.seconds`, taking batches as fast as
// possible, and returns its stage figures over that time (after the first batch).
Result<obs::StageFigures> RunLoader(const DoctorArgs& a, std::shared_ptr<table::Table> t) {
  loader::LoaderOptions o = LoaderOptionsOf(a);
  FW_ASSIGN_OR_RETURN(auto guard, ReadGuardFor(*t));
  if (!guard->empty()) o.batch_transform = guard;
  FW_ASSIGN_OR_RETURN_CTX(std::unique_ptr<loader::Loader> l, loader::Loader::Create({std::move(t)}, o),
                          "loader on ", a.table);
  if (l->epoch_size() == 0 || l->batches_per_epoch() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("table ", a.table, " has no rows to load"));
  }
  Progress(absl::StrCat("running a loader on ", a.table, " for ", a.seconds, " s (", LoaderConfigWords(a), ")"));
  const absl::Duration timeout = absl::Seconds(a.seconds + 60);
  // The first batch pays for opening files; the interval starts after it.
  FW_RETURN_IF_ERROR_CTX(l->Next(timeout).status(), "loading ", a.table);
  const loader::LoaderStats s0 = l->stats();
  const auto t0 = Clock::now();
  while (SecondsSince(t0) < a.seconds) {
    FW_RETURN_IF_ERROR_CTX(l->Next(timeout).status(), "loading ", a.table);  // nullptr: next epoch
  }
  const loader::LoaderStats s1 = l->stats();
  obs::StageFigures f;
  f.wall_seconds = SecondsSince(t0);
  f.io_seconds = s1.io_seconds - s0.io_seconds;
  f.decode_seconds = s1.decode_seconds - s0.decode_seconds;
  f.transform_seconds = s1.transform_seconds - s0.transform_seconds;
  f.assemble_seconds = s1.assemble_seconds - s0.assemble_seconds;
  f.consumer_wait_seconds = s1.consumer_wait_seconds - s0.consumer_wait_seconds;
  f.idle_seconds = s1.idle_seconds - s0.idle_seconds;
  f.rows = s1.rows - s0.rows;
  f.bytes = s1.bytes - s0.bytes;
  f.page_bytes = std::max<int64_t>(0, s1.page_bytes_fetched - s0.page_bytes_fetched);
  f.num_threads = a.num_threads;
  // Worker figures are sampled without a barrier; a stage still in flight
  // can make a difference a hair below zero.
  for (double* v : {&f.io_seconds, &f.decode_seconds, &f.transform_seconds, &f.assemble_seconds,
                    &f.consumer_wait_seconds, &f.idle_seconds}) {
    *v = std::max(*v, 0.0);
  }
  return f;
}

struct ScrapeResult {
  double wall_seconds = 0;
  obs::JobCounters before, after;
};

Result<ScrapeResult> ScrapeTwice(const DoctorArgs& a) {
  Progress(absl::StrCat("scraping ", a.scrape, " twice, ", a.seconds, " s apart"));
  FW_ASSIGN_OR_RETURN(obs::PromScrape first, obs::ScrapeMetrics(a.scrape, kScrapeTimeoutMs));
  const auto t0 = Clock::now();
  ScrapeResult r;
  r.before = obs::CountersFromScrape(first);
  if (r.before.loaders.empty() && r.before.replay.empty()) {
    if (r.before.loader_without_stages) {
      return absl::FailedPreconditionError(
          absl::StrCat(a.scrape, " has loader metrics but no flywheel_loader_stage_seconds_total: the job runs "
                                 "a flywheel without per-stage loader metrics"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "no loader metrics at ", a.scrape,
        " (neither flywheel_loader_stage_seconds_total nor flywheel_replay_* series): is it a flywheel job's "
        "/metrics, and has its loader started?"));
  }
  if (!a.table.empty() && !r.before.loaders.count(a.table)) {
    std::vector<std::string> names;
    for (const auto& [name, c] : r.before.loaders) names.push_back(name);
    return absl::NotFoundError(absl::StrCat("no loader metrics for table ", a.table, " at ", a.scrape,
                                            names.empty() ? std::string(" (no loader tables)")
                                                          : " (tables: " + absl::StrJoin(names, ", ") + ")"));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
  FW_ASSIGN_OR_RETURN(obs::PromScrape second, obs::ScrapeMetrics(a.scrape, kScrapeTimeoutMs));
  r.wall_seconds = SecondsSince(t0);
  r.after = obs::CountersFromScrape(second);
  return r;
}

Status Validate(const DoctorArgs& a, const CLI::App& cmd) {
  if (!(a.seconds > 0) || a.seconds > 3600) {
    return absl::InvalidArgumentError(absl::StrCat("--seconds must be in (0, 3600], got ", a.seconds));
  }
  if (a.size_mb < 1 || a.size_mb > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--size-mb must be in [1, 1048576], got ", a.size_mb));
  }
  if (a.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--batch-size must be >= 1, got ", a.batch_size));
  }
  if (a.num_threads < 1 || a.num_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("--num-threads must be in [1, 1024], got ", a.num_threads));
  }
  if (!a.scrape.empty()) {
    if (a.scrape.rfind("http://", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scrape wants an http:// URL such as http://127.0.0.1:PORT/metrics, got '", a.scrape, "'"));
    }
    for (const char* flag : {"--columns", "--batch-size", "--num-threads", "--shuffle"}) {
      if (cmd.get_option(flag)->count() > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " configures a loader doctor runs itself; it does not apply to --scrape"));
      }
    }
  } else if (a.table.empty()) {
    for (const char* flag : {"--columns", "--batch-size", "--num-threads", "--shuffle"}) {
      if (cmd.get_option(flag)->count() > 0) {
        return absl::InvalidArgumentError(absl::StrCat(flag, " configures the loader of --table, which is missing"));
      }
    }
  }
  return absl::OkStatus();
}

int Doctor(DoctorArgs a, const CLI::App& cmd) {
  if (cmd.get_option("--seconds")->count() == 0) a.seconds = a.quick ? 1 : 5;
  if (cmd.get_option("--size-mb")->count() == 0) a.size_mb = a.quick ? 64 : 1024;
  if (Status s = Validate(a, cmd); !s.ok()) return Fail(s);
  if (a.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    a.dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }

  std::shared_ptr<table::Table> to_load;
  if (!a.table.empty() && a.scrape.empty()) {
    auto t = OpenForLoader(a);
    if (!t.ok()) return Fail(t.status());
    to_load = *std::move(t);
  }

  obs::DoctorReport report;
  // A running job first, before doctor's own measurements load the machine.
  ScrapeResult scraped;
  if (!a.scrape.empty()) {
    auto r = ScrapeTwice(a);
    if (!r.ok()) return Fail(r.status());
    scraped = *std::move(r);
    report.scrape_url = a.scrape;
  }

  obs::MachineOptions mo;
  mo.dir = a.dir;
  mo.file_bytes = a.size_mb * kMiB;
  mo.memcpy_bytes = (a.quick ? 64 : 256) * kMiB;
  mo.repetitions = 3;
  mo.progress = Progress;
  auto machine = obs::MeasureMachine(mo);
  if (!machine.ok()) return Fail(machine.status());
  report.machine = *std::move(machine);

#ifdef FLYWHEEL_HAVE_REPLAY_SERVICE
  {
    int64_t items = a.quick ? 32 : 256;
    const int64_t item_bytes = kMiB;
    if (auto mem = obs::AvailableMemoryBytes(); mem.ok() && items > *mem / 4 / item_bytes) {
      items = std::max<int64_t>(1, *mem / 4 / item_bytes);
      report.notes.push_back(absl::StrCat("gRPC items capped at ", items, " (a quarter of the available memory)"));
    }
    Progress(absl::StrCat("streaming ", items, " items of 1 MiB through a loopback replay server"));
    auto g = MeasureGrpc(items, item_bytes);
    if (g.ok()) {
      report.grpc = *g;
    } else {
      report.grpc_note = std::string(g.status().message());
    }
  }
#else
  report.grpc_note = "this flywheel was built without the replay service (gRPC)";
#endif

  if (to_load != nullptr) {
    const std::string uri = to_load->uri();
    auto f = RunLoader(a, std::move(to_load));
    if (!f.ok()) return Fail(f.status());
    auto analysis = obs::AnalyzeBottleneck(*f, report.machine);
    if (!analysis.ok()) return Fail(analysis.status());
    report.loaders.push_back({"loader", uri, LoaderConfigWords(a), *std::move(analysis)});
  }

  if (!a.scrape.empty()) {
    // One table's bad figures (e.g. two loaders of one table in the process,
    // whose series jump between them) become a note, not a failure of the
    // rest; with nothing else to show, the first such error is the answer.
    Status first_error;
    auto skip = [&](const Status& s) {
      if (first_error.ok()) first_error = s;
      report.notes.push_back(std::string(s.message()));
    };
    for (const auto& [name, after] : scraped.after.loaders) {
      if (!a.table.empty() && name != a.table) continue;
      auto it = scraped.before.loaders.find(name);
      const obs::LoaderCounters before = it == scraped.before.loaders.end() ? obs::LoaderCounters{} : it->second;
      auto f = obs::LoaderFiguresFromDelta(before, after, scraped.wall_seconds);
      if (!f.ok()) {
        skip(Annotate(f.status(), absl::StrCat("loader table ", name, " at ", a.scrape)));
        continue;
      }
      if (f->rows == 0 && f->io_seconds + f->decode_seconds + f->transform_seconds + f->assemble_seconds +
                                  f->consumer_wait_seconds + f->idle_seconds == 0) {
        report.notes.push_back(absl::StrCat("loader table ", name, ": no activity between the scrapes"));
        continue;
      }
      auto analysis = obs::AnalyzeBottleneck(*f, report.machine);
      if (!analysis.ok()) {
        skip(Annotate(analysis.status(), absl::StrCat("loader table ", name)));
        continue;
      }
      report.loaders.push_back({"scrape", name, "", *std::move(analysis)});
    }
    for (const auto& [name, after] : scraped.after.replay) {
      auto it = scraped.before.replay.find(name);
      const obs::ReplayCounters before = it == scraped.before.replay.end() ? obs::ReplayCounters{} : it->second;
      auto r = obs::ReplayFiguresFromDelta(name, before, after, scraped.wall_seconds);
      if (!r.ok()) {
        skip(Annotate(r.status(), absl::StrCat("replay table ", name, " at ", a.scrape)));
        continue;
      }
      report.replay.push_back(*std::move(r));
    }
    if (report.loaders.empty() && report.replay.empty() && !first_error.ok()) return Fail(first_error);
    if (scraped.after.loaders.empty()) {
      report.notes.push_back(scraped.after.loader_without_stages
                                 ? "the job's loader has no per-stage metrics (flywheel_loader_stage_seconds_total)"
                                 : "no loader metrics at the URL: only replay tables were analysed");
    }
  }

  if (a.json) {
    std::printf("%s\n", obs::Dump(obs::DoctorReportJson(report)).c_str());  // labels may not be UTF-8
  } else {
    std::fputs(obs::DoctorReportText(report).c_str(), stdout);
  }
  return 0;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, int* rc) {
  auto* cmd = app.add_subcommand(
      "doctor",
      "Measure this machine's limits (memcpy, page cache, disk, loopback gRPC) and find a loader's bottleneck");
  auto a = std::make_shared<DoctorArgs>();
  cmd->add_flag("--json", a->json, "Print one JSON object instead of tables");
  cmd->add_flag("--quick", a->quick, "Small sizes (64 MiB, 32 gRPC items, 1 s): a few seconds in all");
  cmd->add_option("--dir", a->dir,
                  "Directory for the temporary file of the page-cache and disk reads; put it on the data's\n"
                  "file system (default: $TMPDIR or /tmp)");
  cmd->add_option("--size-mb", a->size_mb,
                  "Size of that file in MiB (default 1024, 64 with --quick; capped at half the free disk and memory)");
  cmd->add_option("--seconds", a->seconds,
                  "How long to run the loader (--table) or between the two scrapes (--scrape) (default 5, 1 with --quick)");
  cmd->add_option("--table", a->table,
                  "Run a loader over this table (path or dataset) and analyse it; with --scrape, the table\n"
                  "label to analyse");
  cmd->add_option("--columns", a->columns, "Columns to load, comma separated (default: all)")->delimiter(',');
  cmd->add_option("--batch-size", a->batch_size, "Rows per batch (default 256)")->check(AtLeast(1));
  cmd->add_option("--num-threads", a->num_threads, "Loader worker threads (default 2)")->check(AtLeast(1));
  cmd->add_flag("--shuffle,!--no-shuffle", a->shuffle, "Shuffled order (default) or table order");
  cmd->add_option("--scrape", a->scrape,
                  "A running job's Prometheus endpoint (http://127.0.0.1:PORT/metrics): analyse its loader\n"
                  "and replay tables from two scrapes --seconds apart");
  cmd->callback([=] { *rc = Doctor(*a, *cmd); });
}

}  // namespace flywheel::cli
