// WebDataset shards and directories of files as sources.
// docs/ingest.md, "WebDataset" and "Files".
//
// A WebDataset shard is a tar (optionally gzip-compressed) where the files
// sharing a key (the name up to the first '.' of its last path component,
// with the directory kept: "a/000123.jpg" and "a/000123.json" → key
// "a/000123") form one sample. Each sample becomes one row: "__key__"
// (string) plus one column per extension ("jpg", "json", "cls", ...). Text
// extensions (txt, json, cls, ...) are strings, "cls"/"cls2"/"index" are
// int64 when every value is an integer, others binary; a sample lacking an
// extension has null there.
//
// Entries are only ever read into memory, never written to disk; still, an
// entry whose name is absolute or contains "..", and any link, device, FIFO
// or other non-regular entry, is refused with an error naming it (or skipped
// with `skip_bad_entries`). Truncated archives and bad checksums are errors
// naming the entry and its byte offset.
//
// Thread-safety: see source.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/interop/source.h"

namespace flywheel::interop {

struct WdsReadOptions {
  // Extensions to keep as columns, in this order; empty = all seen.
  std::vector<std::string> columns;
  // Rows per batch (>= 1). Default 1024.
  int64_t batch_rows = 1024;
  // Skip (count in skipped_entries()) instead of failing on refused entries.
  bool skip_bad_entries = false;
};

// skipped_entries() lists the entries refused and skipped (skip_bad_entries),
// each "tar entry N 'name' at offset O: why".
class WdsReader : public RecordBatchReader {};

// `path` is a .tar, .tar.gz or .tgz (gzip is detected from its magic bytes).
Result<std::unique_ptr<WdsReader>> OpenWebDataset(const std::string& path, const WdsReadOptions& options);

struct FilesReadOptions {
  // Rows per batch (>= 1). Default 256.
  int64_t batch_rows = 256;
  // Only files whose name ends with one of these (e.g. ".jpg"); empty = all.
  std::vector<std::string> extensions;
};

// Every regular file under `dir` (recursively, sorted by path; symlinks are
// not followed) as rows {path: string (relative to dir), bytes: binary}.
Result<std::unique_ptr<RecordBatchReader>> OpenFiles(const std::string& dir, const FilesReadOptions& options);

}  // namespace flywheel::interop
