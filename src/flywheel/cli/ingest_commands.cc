// `flywheel ingest SRC... TABLE` (docs/ingest.md): the ingest driver with a
// progress bar on a terminal, plain periodic lines otherwise, and Ctrl-C
// leaving the table at its last commit.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include <nlohmann/json.hpp>

#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/catalog/read_policy.h"
#include "flywheel/interop/export.h"
#include "flywheel/interop/ingest.h"
#include "flywheel/interop/parquet/compression.h"
#include "flywheel/io/file_system.h"

namespace flywheel::cli {
namespace {

std::atomic<bool> g_interrupted{false};
void OnInterrupt(int) { g_interrupted = true; }


std::string Eta(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

// One progress line: files, rows, MB, MB/s, ETA (from bytes).
std::string ProgressLine(const interop::IngestProgress& p) {
  const double rate = p.seconds > 0 ? static_cast<double>(p.bytes_done) / p.seconds : 0;
  const double left = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : -1;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld/%lld files%s, %lld rows, %.1f/%.1f MB, %.1f MB/s, ETA %s",
                static_cast<long long>(p.files_done), static_cast<long long>(p.files_total),
                p.files_failed ? absl::StrCat(" (", p.files_failed, " failed)").c_str() : "",
                static_cast<long long>(p.rows), static_cast<double>(p.bytes_done) / 1e6,
                static_cast<double>(p.bytes_total) / 1e6, rate / 1e6, Eta(left).c_str());
  return buf;
}

// The ingest as a catalog run: each ingested source file in, each committed
// version out; FAIL with the error when the ingest failed.
Status RecordIngest(catalog::RunScope& run, const std::string& table_uri, const Result<interop::IngestResult>& r) {
  if (!run.recording()) return absl::OkStatus();
  if (!r.ok()) return run.Finish(r.status());
  for (const auto& src : r->sources) {
    if (!src.error.empty()) continue;
    nlohmann::json d = {{"format", src.format}, {"size_bytes", src.size}, {"rows", src.rows},
                        {"xxh3_64", src.checksum}};
    FW_RETURN_IF_ERROR(run.InputFile(src.path, d.dump()));
  }
  if (!r->versions.empty()) {
    FW_ASSIGN_OR_RETURN(auto t, table::Table::Open(table_uri));
    for (int64_t v : r->versions) {
      FW_ASSIGN_OR_RETURN(auto at, t->Checkout(v));
      FW_RETURN_IF_ERROR(run.Output(*at));
    }
  }
  return run.Finish(absl::OkStatus());
}

}  // namespace

void AddIngestCommands(CLI::App& app, int* rc) {
  auto* cmd = app.add_subcommand(
      "ingest",
      "Read Parquet, JSON lines, CSV, WebDataset tar shards or directories of files into a table\n"
      "(created when absent), in parallel, as one commit recording each source's path, size,\n"
      "checksum and rows (docs/ingest.md)");
  auto args = std::make_shared<std::vector<std::string>>();
  auto format = std::make_shared<std::string>("auto");
  auto schema = std::make_shared<std::string>();
  auto columns = std::make_shared<std::string>();
  auto types = std::make_shared<std::vector<std::string>>();
  auto threads = std::make_shared<int>(0);
  auto on_error = std::make_shared<std::string>("fail");
  auto commit_every = std::make_shared<int64_t>(0);
  auto delimiter = std::make_shared<std::string>(",");
  auto no_header = std::make_shared<bool>(false);
  auto quiet = std::make_shared<bool>(false);
  auto job = std::make_shared<std::string>();
  cmd->add_option("--job", *job, "Job name of the catalog run (default: ingest:TABLE)");
  cmd->add_option("SRC... TABLE", *args,
                  "Source files, directories or glob patterns (quote them), then the table directory")
      ->required()
      ->expected(2, -1);
  cmd->add_option("--format", *format, "auto (from the file name), parquet, jsonl, csv, wds or files")
      ->capture_default_str();
  cmd->add_option("--schema", *schema,
                  "JSONL/CSV: the schema instead of inference: a FILE holding name:type,... (or @FILE),\n"
                  "or the text itself, e.g. 'id:int64, text:string?'");
  cmd->add_option("--type", *types, "JSONL/CSV: override one inferred type, NAME=TYPE (repeatable)");
  cmd->add_option("--columns", *columns, "Keep only these top-level columns, comma separated");
  cmd->add_option("--threads", *threads, "Sources read at once (default: the number of CPUs)")
      ->check(AtLeast(1));
  cmd->add_option("--on-error", *on_error,
                  "fail: stop at the first bad source, commit nothing; skip: leave bad sources out;\n"
                  "quarantine: skip and copy them to TABLE/_quarantine/")
      ->capture_default_str();
  cmd->add_option("--commit-every", *commit_every, "Commit after every N sources (default: one commit at the end)")
      ->check(AtLeast(1));
  cmd->add_option("--delimiter", *delimiter, "CSV field delimiter (\\t for tabs; .tsv files use tabs)")
      ->capture_default_str();
  cmd->add_flag("--no-header", *no_header, "CSV files have no header row (fields are named f0, f1, ...)");
  cmd->add_flag("-q,--quiet", *quiet, "No progress output");
  auto skip_crc = std::make_shared<bool>(false);
  cmd->add_flag("--skip-page-crc", *skip_crc, "Parquet: do not verify page CRCs (verified by default where present)");
  cmd->callback([=] {
    interop::IngestOptions o;
    o.sources.assign(args->begin(), args->end() - 1);
    o.verify_page_crc = !*skip_crc;
    auto where = AuthorizedTable(args->back(), catalog::Privilege::kWrite, "ingest", /*for_create=*/true);
    if (!where.ok()) return void(*rc = Fail(where.status()));
    o.table = *where;
    auto f = interop::ParseSourceFormat(*format);
    if (!f.ok()) return void(*rc = Fail(f.status()));
    o.format = *f;
    auto e = interop::ParseOnError(*on_error);
    if (!e.ok()) return void(*rc = Fail(e.status()));
    o.on_error = *e;
    o.threads = *threads;
    o.commit_every = *commit_every;
    if (!columns->empty()) o.columns = absl::StrSplit(*columns, ',', absl::SkipEmpty());
    if (!schema->empty()) {
      std::string text = *schema;
      std::error_code ec;
      if (text[0] == '@' || std::filesystem::is_regular_file(text, ec)) {
        auto data = io::PosixFileSystem()->ReadFile(text[0] == '@' ? text.substr(1) : text);
        if (!data.ok()) return void(*rc = Fail(data.status()));
        text = *data;
        while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      }
      auto s = format::Schema::Parse(text);
      if (!s.ok()) return void(*rc = Fail(Annotate(s.status(), "--schema")));
      o.text.schema = *s;
    }
    for (const std::string& t : *types) {
      const size_t eq = t.find('=');
      if (eq == std::string::npos || eq == 0) {
        return void(*rc = Fail(absl::InvalidArgumentError(absl::StrCat("--type ", t, ": expected NAME=TYPE"))));
      }
      o.text.overrides[t.substr(0, eq)] = t.substr(eq + 1);
    }
    if (*delimiter == "\\t" || *delimiter == "tab") *delimiter = "\t";
    if (delimiter->size() != 1) {
      return void(*rc = Fail(absl::InvalidArgumentError("--delimiter must be one character")));
    }
    o.text.delimiter = (*delimiter)[0];
    o.text.header = !*no_header;
    o.command_line = "flywheel ingest";
    for (const auto& a : *args) absl::StrAppend(&o.command_line, " ", a);
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    double last_line = -1;
    bool final_line = false;
    if (!*quiet) {
      o.progress = [&, tty](const interop::IngestProgress& p) {
        if (tty) {
          std::fprintf(stderr, "\r\033[K%s", ProgressLine(p).c_str());
          std::fflush(stderr);
        } else if (p.seconds - last_line >= 5 || (p.files_done == p.files_total && !final_line)) {
          last_line = p.seconds;
          final_line = p.files_done == p.files_total;
          std::fprintf(stderr, "ingest: %s\n", ProgressLine(p).c_str());
        }
      };
    }
    g_interrupted = false;
    o.cancel = &g_interrupted;
    struct sigaction sa {}, old_int{}, old_term{};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    auto cat = CliCatalog();
    if (!cat.ok()) return void(*rc = Fail(cat.status()));
    nlohmann::json params = {{"command", o.command_line}, {"format", *format}, {"on_error", *on_error}};
    auto run = catalog::RunScope::Start(*cat, job->empty() ? "ingest:" + args->back() : *job, "ingest", params.dump());
    if (!run.ok()) return void(*rc = Fail(run.status()));
    auto r = interop::Ingest(o);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    if (tty && !*quiet) std::fprintf(stderr, "\n");
    if (Status rec = RecordIngest(**run, o.table, r); !rec.ok()) return void(*rc = Fail(rec));
    if (!r.ok()) return void(*rc = Fail(r.status()));
    std::printf("ingested %lld rows from %zu sources into %s in %.2f s", static_cast<long long>(r->rows),
                r->sources.size() - static_cast<size_t>(r->files_failed), o.table.c_str(), r->seconds);
    if (!r->versions.empty()) {
      std::printf(" (version%s", r->versions.size() > 1 ? "s" : "");
      for (size_t i = 0; i < r->versions.size(); ++i) {
        std::printf("%s%lld", i ? ", " : " ", static_cast<long long>(r->versions[i]));
      }
      std::printf(")");
    }
    std::printf("\n");
    for (const auto& s : r->sources) {
      if (!s.error.empty()) std::printf("skipped %s: %s\n", s.path.c_str(), s.error.c_str());
      for (const auto& e : s.skipped_entries) std::printf("skipped in %s: %s\n", s.path.c_str(), e.c_str());
    }
  });
}

namespace {

// TABLE, TABLE@VERSION or TABLE@TAG (the part after the last '@' when the
// part before it is a directory).
Result<std::shared_ptr<table::Table>> OpenTableRef(const std::string& ref_arg) {
  std::string ref = ref_arg;
  std::string path = ref;
  // A dataset name (with an optional @VERSION/@TAG) when a catalog knows it.
  {
    const size_t at = ref.rfind('@');
    FW_ASSIGN_OR_RETURN(std::string base, AuthorizedTable(at == std::string::npos ? ref : ref.substr(0, at),
                                                          catalog::Privilege::kRead, "export"));
    if (at != std::string::npos) ref = base + ref.substr(at);
    else ref = base;
    path = ref;
  }
  table::OpenOptions o;
  const size_t at = ref.rfind('@');
  std::error_code ec;
  if (at != std::string::npos && at > 0 && std::filesystem::is_directory(ref.substr(0, at), ec)) {
    path = ref.substr(0, at);
    const std::string v = ref.substr(at + 1);
    int64_t n = 0;
    if (!v.empty() && absl::SimpleAtoi(v, &n)) {
      o.version = n;
    } else {
      o.tag = v;
    }
  }
  return table::Table::Open(path, o);
}

}  // namespace

void AddExportCommand(CLI::App& app, int* rc) {
  auto* cmd = app.add_subcommand(
      "export", "Write a table version as one Parquet file (read by DuckDB, Spark, Arrow, pandas; docs/ingest.md)");
  auto ref = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto columns = std::make_shared<std::string>();
  auto codec = std::make_shared<std::string>("zstd");
  auto rows = std::make_shared<int64_t>(122880);
  auto no_dict = std::make_shared<bool>(false);
  cmd->add_option("TABLE", *ref, "Table directory, optionally @VERSION or @TAG (default: the latest version)")
      ->required();
  cmd->add_option("OUT", *out, "Parquet file to create (must not exist)")->required();
  cmd->add_option("--columns", *columns, "Columns to write, comma separated (default: all)");
  cmd->add_option("--codec", *codec, "none, snappy, gzip, brotli, zstd or lz4_raw")->capture_default_str();
  cmd->add_option("--row-group-rows", *rows, "Rows per row group")->capture_default_str();
  cmd->add_flag("--no-dictionary", *no_dict, "PLAIN encoding only (no dictionary pages)");
  cmd->callback([=] {
    auto t = OpenTableRef(*ref);
    if (!t.ok()) return void(*rc = Fail(t.status()));
    interop::ExportOptions o;
    if (!columns->empty()) o.columns = absl::StrSplit(*columns, ',', absl::SkipEmpty());
    o.row_group_rows = *rows;
    auto c = interop::parquet::ParseWritableCodec(*codec);
    if (!c.ok()) return void(*rc = Fail(Annotate(c.status(), "--codec")));
    o.writer.codec = *c;
    if (*no_dict) o.writer.dictionary_bytes = 0;
    // A file leaves the catalog's reach: uncleared tagged columns are
    // refused whatever the mode (never masked), as Table.to_parquet does.
    auto guard = ReadGuardFor(**t);
    if (!guard.ok()) return void(*rc = Fail(guard.status()));
    std::vector<std::string> written = o.columns;
    if (written.empty()) {
      for (const auto& f : (*t)->schema().fields) written.push_back(f.name);
    }
    if (Status s = (*guard)->CheckExport(written, "'" + *ref + "'"); !s.ok()) return void(*rc = Fail(s));
    auto cat = CliCatalog();
    if (!cat.ok()) return void(*rc = Fail(cat.status()));
    auto run = catalog::RunScope::Start(*cat, "export:" + *ref, "export",
                                        nlohmann::json{{"codec", *codec}, {"columns", *columns}}.dump());
    if (!run.ok()) return void(*rc = Fail(run.status()));
    Status rec = (*run)->Input(**t);
    auto n = interop::ExportParquet(**t, *out, o);
    if (rec.ok() && n.ok()) rec = (*run)->OutputFile(*out, nlohmann::json{{"rows", *n}}.dump());
    if (rec.ok()) rec = (*run)->Finish(n.status());
    if (!n.ok()) return void(*rc = Fail(n.status()));
    if (!rec.ok()) return void(*rc = Fail(Annotate(rec, "recording the export in the catalog")));
    std::printf("exported %lld rows of %s (version %lld) to %s\n", static_cast<long long>(*n),
                (*t)->uri().c_str(), static_cast<long long>((*t)->version()), out->c_str());
  });
}

}  // namespace flywheel::cli
