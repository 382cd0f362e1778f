// Parquet decode and ingest throughput (issue "Ingest and export",
// "Benchmarks"; docs/benchmarks.md, "Parquet and ingest").
//
// Workloads, on the same files in the same run:
//   decode/<codec>/<T>t  ParquetReader::ReadAll (every column, every row
//                        group, T threads) of a --rows file written by DuckDB
//                        (bench/peers/duckdb_parquet.mjs "make": int64, int32,
//                        double, float, string with nulls, low-cardinality
//                        string, list<int32>; snappy and zstd; DuckDB's
//                        default row groups). rows/s and MB/s of decoded
//                        (uncompressed) column bytes. Peer: DuckDB decoding
//                        the same file into its own storage
//                        (CREATE TEMP TABLE AS SELECT * FROM read_parquet) with
//                        SET threads = T. Target: ratio >= 1 at 1 and 2 threads.
//   ingest/parquet       flywheel ingest of the zstd file into a new table
//                        (--threads 2 sources: the file given --copies times),
//                        MB/s of source bytes. Limit: the same files' raw read.
//   ingest/jsonl         the same rows as JSON lines (DuckDB COPY ... FORMAT
//                        json), MB/s of source bytes.
// Best of --repeats. Results: bench/results/parquet.json.
#include <filesystem>
#include <fstream>

#include "bench_util.h"
#include "flywheel/interop/ingest.h"
#include "flywheel/interop/parquet/reader.h"

namespace fb = flywheel::bench;
using flywheel::interop::parquet::Array;
using flywheel::interop::parquet::ParquetReader;

namespace {

std::string RunPeer(const std::string& args, std::string* why) {
  const std::string peers = fb::SourceDir() + "/bench/peers";
  if (!std::filesystem::exists(peers + "/node_modules/@duckdb/node-api")) {
    *why = "no " + peers + "/node_modules (run: cd bench/peers && npm install)";
    return "";
  }
  const std::string cmd = "cd '" + peers + "' && node duckdb_parquet.mjs " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char chunk[4096];
  size_t n;
  while (p != nullptr && (n = std::fread(chunk, 1, sizeof chunk, p)) > 0) out.append(chunk, n);
  const int rc = p == nullptr ? -1 : ::pclose(p);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (rc != 0) {
    *why = "peer failed: " + cmd;
    return "";
  }
  return out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
}

int64_t DecodedBytes(const Array& a) {
  int64_t b = static_cast<int64_t>(a.values.size() + a.offsets.size() * 8 + a.validity.size());
  for (const Array& c : a.children) b += DecodedBytes(c);
  return b;
}

double FileBytes(const std::vector<std::string>& files) {
  double b = 0;
  for (const auto& f : files) b += static_cast<double>(std::filesystem::file_size(f));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  fb::Flags flags(argc, argv,
                  {{"rows", "1000000"}, {"repeats", "3"}, {"threads", "1,2"}, {"copies", "4"},
                   {"only", "decode,ingest"}, {"tmp", "/tmp"}, {"out", fb::SourceDir() + "/bench/results"}},
                  "parquet_bench [--rows=N] [--repeats=3] [--threads=1,2] [--copies=4] [--only=decode,ingest]");
  fb::TempDir tmp(flags.Str("tmp"), "fw_parquet_bench");
  fb::Report report("parquet", "Parquet decode vs DuckDB; ingest throughput");
  const int repeats = static_cast<int>(flags.Int("repeats"));
  std::string why;
  std::map<std::string, std::string> files;
  for (const char* codec : {"snappy", "zstd"}) {
    const std::string f = tmp.Sub(std::string("bench_") + codec + ".parquet");
    const std::string made = RunPeer("make --rows " + flags.Str("rows") + " --out '" + f + "' --codec " + codec, &why);
    if (made.empty()) {
      std::fprintf(stderr, "parquet_bench: cannot make the DuckDB files: %s\n", why.c_str());
      return 1;
    }
    files[codec] = f;
    report.extra()[std::string("file_") + codec] = nlohmann::json::parse(made);
    report.extra()[std::string("file_") + codec]["bytes"] = std::filesystem::file_size(f);
  }
  const auto only = flags.List("only");
  auto wants = [&](const std::string& w) { return std::find(only.begin(), only.end(), w) != only.end(); };
  if (wants("decode")) {
    for (const auto& [codec, file] : files) {
      for (const std::string& ts : flags.List("threads")) {
        const int threads = std::stoi(ts);
        double best = 0;
        int64_t rows = 0, bytes = 0;
        for (int r = 0; r < repeats + 1; ++r) {  // first run warms the page cache
          const double t0 = fb::Now();
          auto reader = fb::CheckResult(ParquetReader::Open(file), "open");
          flywheel::interop::parquet::ReadOptions o;
          o.threads = threads;
          auto cols = fb::CheckResult(reader->ReadAll(o), "read");
          const double dt = fb::Now() - t0;
          rows = reader->num_rows();
          bytes = 0;
          for (const auto& c : cols) bytes += DecodedBytes(c);
          if (r > 0) best = std::max(best, static_cast<double>(rows) / dt);
        }
        const std::string peer = RunPeer("read --in '" + file + "' --threads " + ts + " --repeats " +
                                             std::to_string(repeats), &why);
        double duck = 0;
        nlohmann::json details{{"rows", rows}, {"decoded_bytes", bytes},
                               {"mb_per_s", best * static_cast<double>(bytes) / static_cast<double>(rows) / 1e6}};
        if (!peer.empty()) {
          const auto j = nlohmann::json::parse(peer);
          duck = static_cast<double>(j["rows"].get<int64_t>()) / j["seconds"].get<double>();
          details["duckdb"] = j;
        }
        report.Add(fb::Comparison{"decode/" + codec + "/" + ts + "t", "rows/s", best,
                                  peer.empty() ? "DuckDB (unavailable: " + why + ")" : "DuckDB read_parquet", duck,
                                  0, "all columns into memory", details});
      }
    }
  }
  if (wants("ingest")) {
    // Sources: the zstd file --copies times (hard links would share a name
    // pattern; copies keep the files distinct), and the same rows as JSONL.
    std::vector<std::string> pq, js;
    const std::string jsonl = tmp.Sub("bench.jsonl");
    RunPeer("jsonl --in '" + files["zstd"] + "' --out '" + jsonl + "'", &why);
    for (int64_t i = 0; i < flags.Int("copies"); ++i) {
      pq.push_back(tmp.Sub("src/part-" + std::to_string(i) + ".parquet"));
      js.push_back(tmp.Sub("src/part-" + std::to_string(i) + ".jsonl"));
      std::filesystem::create_directories(tmp.Sub("src"));
      std::filesystem::copy_file(files["zstd"], pq.back(), std::filesystem::copy_options::overwrite_existing);
      if (std::filesystem::exists(jsonl)) {
        std::filesystem::copy_file(jsonl, js.back(), std::filesystem::copy_options::overwrite_existing);
      }
    }
    auto raw_read = [&](const std::vector<std::string>& srcs) {
      double best = 0;
      std::vector<char> buf(1 << 20);
      for (int r = 0; r < repeats; ++r) {
        const double t0 = fb::Now();
        for (const auto& f : srcs) {
          std::ifstream in(f, std::ios::binary);
          while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
          }
        }
        best = std::max(best, FileBytes(srcs) / (fb::Now() - t0));
      }
      return best;
    };
    for (const auto& [name, srcs] : std::vector<std::pair<std::string, std::vector<std::string>>>{{"parquet", pq},
                                                                                                 {"jsonl", js}}) {
      if (!std::filesystem::exists(srcs[0])) continue;
      double best = 0;
      int64_t rows = 0;
      for (int r = 0; r < repeats; ++r) {
        flywheel::interop::IngestOptions o;
        o.sources = srcs;
        o.table = tmp.Sub("table_" + name + "_" + std::to_string(r));
        o.threads = 2;
        o.table_options.fs = flywheel::io::PosixFileSystem(flywheel::io::PosixOptions{.sync = false});
        const double t0 = fb::Now();
        auto res = fb::CheckResult(flywheel::interop::Ingest(o), "ingest");
        const double dt = fb::Now() - t0;
        rows = res.rows;
        best = std::max(best, FileBytes(srcs) / dt);
        std::filesystem::remove_all(o.table);
      }
      report.Add(fb::Comparison{"ingest/" + name, "MB/s", best / 1e6, "raw read() of the same files",
                                raw_read(srcs) / 1e6, 0, "2 threads, sources of " + std::to_string(rows / srcs.size()) +
                                                              " rows",
                                nlohmann::json{{"rows", rows}, {"source_bytes", FileBytes(srcs)},
                                               {"rows_per_s", best / FileBytes(srcs) * static_cast<double>(rows)}}});
    }
  }
  report.Write(flags.Str("out"), fb::MachineInfo(tmp.path()), flags.ToJson());
  return 0;
}
