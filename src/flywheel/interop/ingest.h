// The ingest driver: many source files (Parquet, JSON Lines, CSV,
// WebDataset tar shards, directories of files) read in parallel into one
// table, committed once (or every N files), with each source's provenance in
// the commit. `flywheel ingest` and `flywheel.ingest` are thin wrappers.
// docs/ingest.md.
//
// Interrupt-safe: cancelling (or any failure with on_error = kFail) commits
// nothing further; the table stays at its last commit, and data files
// written for the uncommitted part are unreferenced (Table::Vacuum reclaims
// them).
//
// Thread-safety: Ingest may run concurrently with other readers and writers
// of the table (its commit rebases like any append).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/types.h"
#include "flywheel/interop/text/text_reader.h"
#include "flywheel/table/table.h"

namespace flywheel::interop {

enum class SourceFormat { kAuto, kParquet, kJsonLines, kCsv, kWebDataset, kFiles };
std::string_view SourceFormatName(SourceFormat f);
Result<SourceFormat> ParseSourceFormat(std::string_view name);  // auto|parquet|jsonl|csv|wds|files

enum class OnError {
  kFail,        // the first bad source stops the ingest; nothing is committed
  kSkip,        // a bad source is left out (none of its rows land) and reported
  kQuarantine,  // as kSkip, and the source is copied to TABLE/_quarantine/
};
Result<OnError> ParseOnError(std::string_view name);  // fail|skip|quarantine

struct IngestProgress {
  int64_t files_done = 0;
  int64_t files_total = 0;
  int64_t files_failed = 0;
  int64_t rows = 0;
  int64_t bytes_done = 0;   // source bytes consumed
  int64_t bytes_total = 0;  // sum of the sources' sizes
  double seconds = 0;
};

struct SourceRecord {
  std::string path;  // absolute
  std::string format;
  int64_t size = 0;
  uint64_t checksum = 0;  // XXH3-64 of the file's bytes (0 for directories)
  int64_t rows = 0;
  std::string error;  // why it was skipped or quarantined; empty when ingested
  // Entries inside the source refused and left out under on_error = skip or
  // quarantine (WebDataset: "tar entry N 'name' at offset O: why"); also in
  // the commit's "ingest.sources" property. Quarantine copies such a source
  // to TABLE/_quarantine/ too.
  std::vector<std::string> skipped_entries;
};

struct IngestOptions {
  // Paths, directories or glob patterns ("data/*.parquet"); each pattern must
  // match something.
  std::vector<std::string> sources;
  // The table's URI; created with the first source's schema when absent.
  std::string table;
  SourceFormat format = SourceFormat::kAuto;
  // Schema for JSONL/CSV sources (instead of inference), and per-field
  // overrides and CSV dialect (text.schema/overrides/delimiter/...).
  TextReadOptions text;
  // Top-level columns to keep (Parquet fields, JSON/CSV fields, WebDataset
  // extensions); empty = all.
  std::vector<std::string> columns;
  // Sources read at once; <= 0: the number of CPUs.
  int threads = 0;
  OnError on_error = OnError::kFail;
  // Parquet: verify page CRCs where pages carry one (false: skip the check).
  bool verify_page_crc = true;
  // Commit after every this many sources (in completion order); 0 = one
  // commit at the end.
  int64_t commit_every = 0;
  // Rows buffered per source before they are written as data files.
  int64_t write_rows = 1 << 18;
  // Recorded in the commit ("ingest.command").
  std::string command_line;
  // Called about twice a second from the calling thread, and once at the end.
  std::function<void(const IngestProgress&)> progress;
  // Set to true (from a signal handler, another thread) to stop early.
  const std::atomic<bool>* cancel = nullptr;
  table::TableOptions table_options;

  Status Validate() const;
};

struct IngestResult {
  int64_t rows = 0;
  std::vector<SourceRecord> sources;  // every source, in the order given
  std::vector<int64_t> versions;      // versions committed
  int64_t files_failed = 0;
  double seconds = 0;
};

Result<IngestResult> Ingest(const IngestOptions& options);

// The sources `patterns` name, expanded and sorted (globs in order given;
// each must match); NotFound naming a pattern that matches nothing.
Result<std::vector<std::string>> ExpandSources(const std::vector<std::string>& patterns);
// The format of `path` from its name (or directory-ness) when `f` is kAuto.
Result<SourceFormat> DetectFormat(const std::string& path, SourceFormat f);

}  // namespace flywheel::interop
