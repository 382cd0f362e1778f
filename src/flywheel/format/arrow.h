// Columns and record batches through the Arrow C data interface, both ways.
//
// Export hands flywheel columns to any Arrow implementation (pyarrow, Polars,
// DuckDB, ...) without copying rows where the layouts agree: fixed-width
// values, int64 offsets (large_string, large_binary, large_list) and validity
// bitmaps are the Arrow buffers themselves, and the exported array holds the
// Buffers' owners (a memory-mapped shard page stays mapped until the consumer
// releases the array). Import takes an Arrow array or stream and builds
// columns over the producer's buffers where possible (the ArrowArray's
// release callback runs when the last column over it is dropped); layouts
// flywheel does not share (bit-packed booleans, int32 offsets, string views,
// dictionary encoding) are converted.
//
// The type mapping, both ways, is specified in docs/arrow.md; an Arrow type
// flywheel cannot hold is refused with an error naming the column and type.
// The C structs below are the ABI of the Arrow C data interface and C stream
// interface specifications, guarded as those specifications ask so that
// another definition of them can coexist.
//
// Thread-safety: the functions are reentrant. An exported stream may be used
// from one thread at a time (the Arrow stream contract).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/types.h"

extern "C" {
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};
#endif  // ARROW_C_DATA_INTERFACE

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE
struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  const char* (*get_last_error)(struct ArrowArrayStream*);
  void (*release)(struct ArrowArrayStream*);
  void* private_data;
};
#endif  // ARROW_C_STREAM_INTERFACE
}

namespace flywheel::format {

// Column name -> logical type tag of an integer column that holds Arrow
// temporal values (a table keeps them in its config as "logical_types",
// docs/arrow.md): "timestamp(us)", "timestamp(ns, UTC)",
// "timestamp(s, Europe/Paris)", "date32", "date64", "time(ms)", "time(ns)",
// "duration(us)". Timestamps, date64, time(us|ns) and durations are int64;
// date32 and time(s|ms) int32. Parquet ingest writes the same tags.
using LogicalTypes = std::map<std::string, std::string>;

// ---- export. Each fills a released (or fresh) struct; the consumer owns it
// and calls its release callback.

// `schema` as an Arrow struct type, one child per field; integer fields with
// a tag in `logical` become that Arrow temporal type.
Status ExportSchema(const Schema& schema, ArrowSchema* out, const LogicalTypes* logical = nullptr);
// One field as an Arrow field (`tag`: its logical type tag, or empty).
Status ExportField(const Field& field, ArrowSchema* out, const std::string& tag = "");
// `batch` as an Arrow struct array (the layout of a record batch).
Status ExportBatch(const RecordBatch& batch, ArrowArray* out);
// One column.
Status ExportColumn(const Column& column, ArrowArray* out);

// Pulls the next batch; nullopt at the end. Called from the stream
// consumer's thread.
using BatchSource = std::function<Result<std::optional<RecordBatch>>()>;
// A stream of `schema`'s batches from `next`. Every batch must have exactly
// `schema`'s fields; a mismatch ends the stream with an error.
void ExportStream(Schema schema, BatchSource next, ArrowArrayStream* out, LogicalTypes logical = {});

// ---- import

// The flywheel schema of an Arrow struct type (a record batch's schema).
// Fields keep their Arrow nullability; temporal fields become their integer
// storage with a tag in *logical (when given). Errors name the field and its
// Arrow type ("column 'd': Arrow type decimal(12,2) is not supported ...").
Result<Schema> ImportSchema(const ArrowSchema& schema, LogicalTypes* logical = nullptr);

// The columns of an Arrow struct array of `schema` (as ImportSchema read it).
// Takes ownership of `*array` (it is marked released, and its release
// callback runs when no column refers to its buffers any more), also on
// error. The batch is validated (buffer sizes, offsets, lengths) before it is
// returned.
Result<RecordBatch> ImportBatch(ArrowArray* array, const ArrowSchema& schema);

// Reads a whole stream: `sink` gets each batch in order. Stops at the first
// error (the stream's own, an unsupported type, or the sink's). Releases the
// stream.
Status ImportStream(ArrowArrayStream* stream,
                    const std::function<Status(const Schema&, const LogicalTypes&)>& on_schema,
                    const std::function<Status(RecordBatch)>& sink);

// An imported batch adapted to `target` (a table's schema): every column must
// be a field of `target` with the same type, or a tensor with the same element
// type and count (a plain fixed_size_list becomes the target's shape); each
// column takes the target's field (id, nullability). Nulls in a field
// `target` does not allow, unknown columns and type mismatches are errors
// naming the column, both types and `what` (the table).
Result<RecordBatch> ConformImported(RecordBatch batch, const Schema& target, std::string_view what);

// Human-readable text of an Arrow format string ("large_string",
// "fixed_size_list<float>[16]", "timestamp[us, UTC]"), for error messages.
std::string ArrowTypeText(const ArrowSchema& schema);

}  // namespace flywheel::format
