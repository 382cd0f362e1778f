#include "flywheel/interop/ingest.h"

#include <glob.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/base/checksum.h"
#include "flywheel/base/logging.h"
#include "flywheel/base/metrics.h"
#include "flywheel/interop/parquet/convert.h"
#include "flywheel/io/file_system.h"
#include "flywheel/interop/wds/wds_reader.h"

namespace flywheel::interop {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr char kVersion[] = "0.1.0";

bool HasGlob(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Result<uint64_t> HashFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path, " to checksum it"));
  Hasher h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.Update(buf.data(), n);
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) return absl::DataLossError(absl::StrCat("reading ", path, " to checksum it failed"));
  return h.Digest();
}

// `table_schema`: the schema JSONL and CSV sources are read into once the
// table exists (so every file parses to the same types); null for the
// source that creates the table, which infers.
Result<std::unique_ptr<RecordBatchReader>> OpenSource(const std::string& path, SourceFormat f,
                                                      const IngestOptions& o,
                                                      const format::Schema* table_schema) {
  switch (f) {
    case SourceFormat::kParquet: {
      parquet::SourceOptions so;
      so.columns = o.columns;
      so.verify_page_crc = o.verify_page_crc;
      return parquet::OpenParquetSource(path, so);
    }
    case SourceFormat::kJsonLines:
    case SourceFormat::kCsv: {
      TextReadOptions t = o.text;
      if (!o.columns.empty()) t.columns = o.columns;
      if (!t.schema && table_schema) {
        format::Schema s;
        for (const auto& field : table_schema->fields) {
          format::Field copy = field;
          copy.id = -1;
          copy.default_json.clear();
          s.fields.push_back(std::move(copy));
        }
        t.schema = std::move(s);
      }
      if (f == SourceFormat::kCsv && t.delimiter == ',' && absl::EndsWith(Lower(path), ".tsv")) t.delimiter = '\t';
      return f == SourceFormat::kCsv ? OpenCsv(path, t) : OpenJsonLines(path, t);
    }
    case SourceFormat::kWebDataset: {
      WdsReadOptions w;
      w.columns = o.columns;
      w.skip_bad_entries = o.on_error != OnError::kFail;
      FW_ASSIGN_OR_RETURN(auto r, OpenWebDataset(path, w));
      return std::unique_ptr<RecordBatchReader>(std::move(r));
    }
    case SourceFormat::kFiles: {
      FilesReadOptions fo;
      return OpenFiles(path, fo);
    }
    case SourceFormat::kAuto:
      break;
  }
  return absl::InternalError("source format not resolved");
}

// Batches of one source, buffered to about `rows` rows, as one batch.
Result<format::RecordBatch> Concat(std::vector<format::RecordBatch>& parts) {
  if (parts.size() == 1) return std::move(parts[0]);
  format::RecordBatch out;
  out.schema = parts[0].schema;
  for (const auto& p : parts) out.num_rows += p.num_rows;
  for (size_t c = 0; c < out.schema.fields.size(); ++c) {
    std::vector<format::Column> cols;
    for (const auto& p : parts) cols.push_back(p.columns[c]);
    out.columns.push_back(format::ConcatColumns(cols));
  }
  return out;
}

struct Job {
  std::string path;
  SourceFormat format;
  int64_t size = 0;
  std::atomic<int64_t> bytes_done{0};
  std::atomic<int64_t> rows{0};
  // Results, set by the worker before it reports the job done.
  Status status;
  uint64_t checksum = 0;
  std::vector<std::string> skipped_entries;
  std::unique_ptr<table::AppendTransaction> part;
};

nlohmann::json RecordJson(const SourceRecord& r) {
  nlohmann::json j{{"path", r.path}, {"format", r.format}, {"size", r.size}, {"rows", r.rows}};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r.checksum));
  j["xxh3_64"] = hex;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.skipped_entries.empty()) j["skipped_entries"] = r.skipped_entries;
  return j;
}

Status Quarantine(const std::string& table, const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::path(table) / "_quarantine";
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir.string(), ": ", ec.message()));
  fs::path dst = dir / fs::path(path).filename();
  for (int i = 1; fs::exists(dst); ++i) dst = dir / (fs::path(path).filename().string() + "." + std::to_string(i));
  fs::copy(path, dst, fs::copy_options::recursive, ec);
  if (ec) return absl::InternalError(absl::StrCat("copying ", path, " to ", dst.string(), ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

std::string_view SourceFormatName(SourceFormat f) {
  switch (f) {
    case SourceFormat::kAuto: return "auto";
    case SourceFormat::kParquet: return "parquet";
    case SourceFormat::kJsonLines: return "jsonl";
    case SourceFormat::kCsv: return "csv";
    case SourceFormat::kWebDataset: return "wds";
    case SourceFormat::kFiles: return "files";
  }
  return "unknown";
}

Result<SourceFormat> ParseSourceFormat(std::string_view name) {
  for (SourceFormat f : {SourceFormat::kAuto, SourceFormat::kParquet, SourceFormat::kJsonLines, SourceFormat::kCsv,
                         SourceFormat::kWebDataset, SourceFormat::kFiles}) {
    if (name == SourceFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown format '", AsAbsl(name),
                                                 "' (expected auto, parquet, jsonl, csv, wds or files)"));
}

Result<OnError> ParseOnError(std::string_view name) {
  if (name == "fail") return OnError::kFail;
  if (name == "skip") return OnError::kSkip;
  if (name == "quarantine") return OnError::kQuarantine;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown on-error policy '", AsAbsl(name), "' (expected fail, skip or quarantine)"));
}

Status IngestOptions::Validate() const {
  if (sources.empty()) return absl::InvalidArgumentError("ingest: no sources given");
  if (table.empty()) return absl::InvalidArgumentError("ingest: no table given");
  if (commit_every < 0) return absl::InvalidArgumentError("ingest: commit_every must be >= 0");
  if (write_rows < 1) return absl::InvalidArgumentError("ingest: write_rows must be >= 1");
  return text.Validate();
}

Result<std::vector<std::string>> ExpandSources(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const std::string& pattern : patterns) {
    FW_ASSIGN_OR_RETURN(const std::string p, io::LocalPath(pattern));
    if (!HasGlob(p)) {
      std::error_code ec;
      if (!fs::exists(p, ec)) return absl::NotFoundError(absl::StrCat("source ", p, " does not exist"));
      out.push_back(p);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(p.c_str(), 0, nullptr, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
      globfree(&g);
      return absl::NotFoundError(absl::StrCat("no source matches '", p, "'"));
    }
    if (rc != 0) {
      globfree(&g);
      return absl::InvalidArgumentError(absl::StrCat("cannot expand '", p, "'"));
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);  // glob sorts
    globfree(&g);
  }
  return out;
}

Result<SourceFormat> DetectFormat(const std::string& path, SourceFormat f) {
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  if (f != SourceFormat::kAuto) {
    if (dir && f != SourceFormat::kFiles) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is a directory; --format ", AsAbsl(SourceFormatName(f)), " reads files"));
    }
    if (!dir && f == SourceFormat::kFiles) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a directory (--format files reads directories)"));
    }
    return f;
  }
  if (dir) return SourceFormat::kFiles;
  const std::string l = Lower(path);
  for (const char* e : {".parquet", ".pq", ".parq"}) {
    if (absl::EndsWith(l, e)) return SourceFormat::kParquet;
  }
  for (const char* e : {".jsonl", ".ndjson", ".json"}) {
    if (absl::EndsWith(l, e)) return SourceFormat::kJsonLines;
  }
  for (const char* e : {".csv", ".tsv"}) {
    if (absl::EndsWith(l, e)) return SourceFormat::kCsv;
  }
  for (const char* e : {".tar", ".tar.gz", ".tgz"}) {
    if (absl::EndsWith(l, e)) return SourceFormat::kWebDataset;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot tell the format of ", path,
      " from its name (.parquet, .jsonl/.ndjson/.json, .csv/.tsv, .tar/.tar.gz/.tgz, or a directory); use --format"));
}

Result<IngestResult> Ingest(const IngestOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  // The table as the local folder it names (file:// resolved; other schemes
  // refused before anything is read or written).
  IngestOptions o = options;
  FW_ASSIGN_OR_RETURN(o.table, io::LocalPath(options.table));
  const auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  FW_ASSIGN_OR_RETURN(std::vector<std::string> paths, ExpandSources(o.sources));
  std::vector<std::unique_ptr<Job>> jobs;
  IngestProgress progress;
  for (const std::string& p : paths) {
    auto j = std::make_unique<Job>();
    std::error_code ec;
    j->path = fs::absolute(p, ec).lexically_normal().string();
    FW_ASSIGN_OR_RETURN(j->format, DetectFormat(p, o.format));
    if (!fs::is_directory(p, ec)) j->size = static_cast<int64_t>(fs::file_size(p, ec));
    progress.bytes_total += j->size;
    jobs.push_back(std::move(j));
  }
  progress.files_total = static_cast<int64_t>(jobs.size());

  // The table: opened, or created with the first source's schema. A table
  // this call creates is removed again when the ingest fails before its
  // first commit, so a failed ingest leaves nothing behind.
  std::shared_ptr<table::Table> table;
  bool created = false;
  {
    std::error_code ec;
    const bool folder_existed = fs::exists(o.table, ec);
    auto opened = table::Table::Open(o.table, {}, o.table_options);
    if (opened.ok()) {
      table = *opened;
    } else if (absl::IsNotFound(opened.status())) {
      FW_ASSIGN_OR_RETURN_CTX(auto first, OpenSource(jobs[0]->path, jobs[0]->format, o, nullptr), jobs[0]->path);
      table::CommitOptions c;
      c.properties = {{"ingest.command", o.command_line}, {"flywheel.version", kVersion}};
      table::TableOptions to = o.table_options;
      if (auto tags = first->logical_types(); !tags.empty()) {
        to.extra_config["logical_types"] = nlohmann::json(tags).dump();
      }
      format::Schema schema = first->schema();
      const bool text = jobs[0]->format == SourceFormat::kJsonLines || jobs[0]->format == SourceFormat::kCsv;
      if (text && !o.text.schema) {
        // Inferred from one file's first rows: later rows and files may
        // leave any field out or null.
        for (auto& field : schema.fields) field.nullable = true;
      }
      FW_ASSIGN_OR_RETURN(table, table::Table::Create(o.table, schema, to, c));
      created = !folder_existed;
    } else {
      return opened.status();
    }
  }

  // A copy: commits (commit_every) replace the handle's manifest while
  // workers open sources.
  const format::Schema table_schema = table->schema();
  IngestResult result;
  result.sources.resize(jobs.size());
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> finished;  // guarded by mu
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  auto cancelled = [&] { return stop.load() || (o.cancel && o.cancel->load()); };

  auto work = [&](Job& job) -> Status {
    FW_ASSIGN_OR_RETURN(auto reader, OpenSource(job.path, job.format, o, &table_schema));
    job.part = table->BeginAppend();
    const Labels labels{{"format", std::string(SourceFormatName(job.format))}};
    Counter* const rows_metric = Metrics().GetCounter("flywheel_ingest_rows_total", "Rows read from ingest sources", labels);
    Counter* const bytes_metric =
        Metrics().GetCounter("flywheel_ingest_bytes_total", "Bytes of ingest sources read", labels);
    std::vector<format::RecordBatch> buffered;
    int64_t buffered_rows = 0;
    auto flush = [&]() -> Status {
      if (buffered.empty()) return absl::OkStatus();
      FW_ASSIGN_OR_RETURN(format::RecordBatch b, Concat(buffered));
      buffered.clear();
      buffered_rows = 0;
      return job.part->Write(b);
    };
    while (true) {
      if (cancelled()) return absl::CancelledError("ingest interrupted");
      FW_ASSIGN_OR_RETURN(auto batch, reader->Next());
      if (!batch) break;
      job.rows += batch->num_rows;
      buffered_rows += batch->num_rows;
      rows_metric->Increment(batch->num_rows);
      buffered.push_back(std::move(*batch));
      const int64_t read = reader->bytes_read();
      bytes_metric->Increment(read - job.bytes_done.exchange(read));
      if (buffered_rows >= o.write_rows) FW_RETURN_IF_ERROR(flush());
    }
    FW_RETURN_IF_ERROR(flush());
    job.skipped_entries = reader->skipped_entries();
    bytes_metric->Increment(std::max<int64_t>(0, job.size - job.bytes_done.exchange(job.size)));
    if (job.format != SourceFormat::kFiles) {
      FW_ASSIGN_OR_RETURN(job.checksum, HashFile(job.path));
    }
    return absl::OkStatus();
  };

  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (!cancelled()) {
        const size_t i = next.fetch_add(1);
        if (i >= jobs.size()) break;
        Job& job = *jobs[i];
        job.status = work(job);
        if (!job.status.ok() && std::string(job.status.message()).find(job.path) == std::string::npos) {
          job.status = Annotate(job.status, job.path);
        }
        std::lock_guard<std::mutex> lock(mu);
        finished.push_back(i);
        cv.notify_all();
      }
    });
  }

  auto tx = table->BeginAppend();
  std::vector<size_t> in_tx;  // sources in the open transaction
  Status failure;
  size_t handled = 0;
  auto commit = [&]() -> Status {
    if (in_tx.empty()) return absl::OkStatus();
    nlohmann::json srcs = nlohmann::json::array(), skipped = nlohmann::json::array();
    int64_t rows = 0;
    for (size_t i : in_tx) {
      const SourceRecord& r = result.sources[i];
      (r.error.empty() ? srcs : skipped).push_back(RecordJson(r));
      rows += r.error.empty() ? r.rows : 0;
    }
    table::CommitOptions c;
    c.properties = {{"ingest.sources", srcs.dump()},
                    {"ingest.rows", std::to_string(rows)},
                    {"ingest.command", o.command_line},
                    {"flywheel.version", kVersion}};
    if (!skipped.empty()) c.properties["ingest.skipped"] = skipped.dump();
    FW_RETURN_IF_ERROR(tx->Commit(c));
    result.versions.push_back(table->version());
    in_tx.clear();
    tx = table->BeginAppend();
    return absl::OkStatus();
  };
  auto report = [&] {
    progress.seconds = since();
    progress.bytes_done = 0;
    progress.rows = 0;
    for (const auto& j : jobs) {
      progress.bytes_done += j->bytes_done.load();
      progress.rows += j->rows.load();
    }
    if (o.progress) o.progress(progress);
  };
  while (handled < jobs.size()) {
    std::vector<size_t> done;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return !finished.empty(); });
      done.assign(finished.begin(), finished.end());
      finished.clear();
    }
    for (size_t i : done) {
      ++handled;
      Job& job = *jobs[i];
      SourceRecord& r = result.sources[i];
      r.path = job.path;
      r.format = std::string(SourceFormatName(job.format));
      r.size = job.size;
      r.checksum = job.checksum;
      r.rows = job.rows.load();
      r.skipped_entries = job.skipped_entries;
      ++progress.files_done;
      Metrics()
          .GetCounter("flywheel_ingest_files_total", "Ingest source files handled, by outcome",
                      {{"format", r.format}, {"outcome", job.status.ok() ? "ok" : "failed"}})
          ->Increment();
      if (job.status.ok()) {
        for (const std::string& e : r.skipped_entries) {
          FW_LOG(WARNING) << "ingest: " << job.path << ": skipped " << e;
        }
        if (!r.skipped_entries.empty() && o.on_error == OnError::kQuarantine) {
          Status q = Quarantine(o.table, job.path);
          if (!q.ok()) {
            FW_LOG(WARNING) << "ingest: " << q;
          }
        }
        if (failure.ok()) {
          Status s = tx->Absorb(*job.part);
          if (!s.ok()) failure = s;
          in_tx.push_back(i);
          result.rows += r.rows;
        }
      } else if (absl::IsCancelled(job.status) || o.on_error == OnError::kFail) {
        if (failure.ok()) failure = job.status;
        stop = true;
      } else {
        r.error = std::string(job.status.message());
        r.rows = 0;
        ++progress.files_failed;
        ++result.files_failed;
        FW_LOG(WARNING) << "ingest: skipping " << job.path << ": " << job.status;
        if (o.on_error == OnError::kQuarantine) {
          Status q = Quarantine(o.table, job.path);
          if (!q.ok()) {
            FW_LOG(WARNING) << "ingest: " << q;
          }
        }
        in_tx.push_back(i);
      }
      job.part.reset();
      if (failure.ok() && o.commit_every > 0 && static_cast<int64_t>(in_tx.size()) >= o.commit_every) {
        failure = commit();
        if (!failure.ok()) stop = true;
      }
    }
    if (o.cancel && o.cancel->load() && failure.ok()) {
      failure = absl::CancelledError("ingest interrupted");
      stop = true;
    }
    report();
    if (stop) break;
  }
  for (auto& th : pool) th.join();
  if (failure.ok()) failure = commit();
  result.seconds = since();
  report();
  if (!failure.ok()) {
    std::string committed;
    if (!result.versions.empty()) {
      committed = absl::StrCat("versions ", absl::StrJoin(result.versions, ", "),
                               " were committed before it; the table is at its last commit");
    } else if (created) {
      // Nothing but our own version 1 (no other writer committed since):
      // remove the table this call made, and say so.
      auto latest = table::Table::Open(o.table, {}, o.table_options);
      std::error_code ec;
      if (latest.ok() && (*latest)->version() == 1 && fs::remove_all(o.table, ec) > 0 && !ec) {
        committed = "nothing was committed and the new table was removed";
      } else {
        committed = absl::StrCat("nothing was committed; the new table ", o.table,
                                 " exists with its schema and no rows");
      }
    } else {
      committed = "nothing was committed; the table is at its last commit";
    }
    return Status(failure.code(),
                  absl::StrCat("ingest into ", o.table, ": ", failure.message(), " (", committed, ")"));
  }
  return result;
}

}  // namespace flywheel::interop
