// The training data loader: deterministic, sharded by rank, resumable and
// elastic batches of one table or a weighted mixture of tables.
//
// Position p of epoch e serves a row chosen by a pure function of
// (seed, e, p) (order.h; mixture.h for several tables); global batches are
// cut from that order and split between ranks by position (partition.h); the
// loader's state is the position (state.h), so it resumes at any world size
// or batch size. Because the future order is known, worker threads gather the
// rows of upcoming batches ahead of the consumer, page by page, into
// pre-allocated loader-owned buffers; batches come out in order whatever the
// thread count or timing. docs/loader.md describes the whole design.
//
// Thread-safety: Next, state, Restore and SetEpoch are meant for one consumer
// thread but are serialized internally; stats and Cancel may be called from
// any thread. The destructor cancels read-ahead and joins the workers; batches
// already handed out stay valid until released.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/types.h"
#include "flywheel/io/file_system.h"
#include "flywheel/loader/batch_transform.h"
#include "flywheel/loader/order.h"
#include "flywheel/loader/state.h"
#include "flywheel/loader/transforms/image.h"
#include "flywheel/table/table.h"

namespace flywheel::loader {

// A table to read: its uri and which version (at most one of version, tag;
// neither = the latest).
struct TableRef {
  std::string uri;
  std::optional<int64_t> version;
  std::optional<std::string> tag;
};

// A column of encoded JPEG bytes (binary) that the workers decode and
// transform (transforms/image.h) while they fill a batch: in batches it is a
// fixed-width image column, uint8 or float32, [height, width, 3] (kHWC) or
// [3, height, width] (kCHW). Row i's crop and flip are keyed by (seed,
// epoch, table, live index), so they do not depend on the thread count, the
// world size or where the loader resumed.
struct ImageColumn {
  std::string column;
  ImageOptions options;
};

// What a row that a transform cannot process (an undecodable image, a null
// image) does to its batch.
enum class OnError : uint8_t {
  // Next returns the error (DataLoss / InvalidArgument) naming the table,
  // version, row and column; the position stays, as for a corrupt page.
  kFail = 0,
  // The row is left out of its batch (which is then shorter) and counted in
  // LoaderStats::skipped_rows; the epoch's accounting is unchanged.
  kSkip = 1,
};

struct LoaderOptions {
  // Columns to load, in this order; empty = every column of the first table.
  // With several tables each must have every column with the same type.
  std::vector<std::string> columns;
  // Rows per rank per batch; required, >= 1.
  int64_t batch_size = 0;
  // false: rows in table order (the identity order).
  bool shuffle = true;
  // kRow: every row placed independently. kBlock: I/O-aware block shuffle.
  ShuffleMode shuffle_mode = ShuffleMode::kRow;
  // Block shuffle: rows per block; 0 (default) = the rows of the first page
  // of the first column of each table (a page's worth).
  int64_t block_rows = 0;
  // Block shuffle: blocks per window (default 16), >= 1.
  int64_t window_blocks = 16;
  // Seed of the order (and of the mixture draws).
  uint64_t seed = 0;
  // Epoch to start at (>= 0); each epoch has its own order.
  int64_t epoch = 0;
  // This process's rank in [0, world_size) and the number of ranks (>= 1).
  int rank = 0;
  int world_size = 1;
  // true: each epoch ends at its last full global batch (partition.h).
  bool drop_last = false;
  // Worker threads gathering batches ahead (>= 1). Results never depend on it.
  int num_threads = 2;
  // Memory the read-ahead may use, in bytes (>= 1 MiB; default 256 MiB):
  // half for batches filled ahead of the consumer (at least one, at most
  // max(4, 4 * num_threads)), half for the cache of decoded pages. Batches
  // the caller holds are not counted.
  int64_t prefetch_bytes = int64_t{256} << 20;
  // Several tables: one weight (> 0) per table; empty = proportional to the
  // tables' live rows. Must be empty or {any} for one table.
  std::vector<double> mixture_weights;
  // Several tables: mixture positions per epoch; 0 (default) = the sum of the
  // tables' live rows. Must be 0 for one table.
  int64_t samples_per_epoch = 0;
  // Binary columns decoded as JPEG images (each must be one of `columns`).
  std::vector<ImageColumn> images;
  // Rows a transform fails on.
  OnError on_error = OnError::kFail;
  // Read the pages a batch needs that are neither cached nor mapped views
  // (compressed pages, files not mapped) in one io_uring batch per column
  // before copying rows (docs/loader.md, "Read pipeline"). Where io_uring is
  // unavailable (old kernel, seccomp, built without liburing) the loader
  // reads them with pread instead, logging it once. false: always pread.
  bool use_io_uring = true;
  // Next() polls (yielding the CPU) for up to this long before sleeping when
  // its batch is not ready, so the worker that finishes it need not wake a
  // sleeping thread (docs/loader.md, "Waiting"). 0: sleep at once. -1
  // (default): 200 when num_threads leaves a CPU free for the consumer, else
  // 0 (polling would take CPU time from the workers).
  int64_t consumer_spin_us = -1;
  // Applied to every batch before Next returns it, and checked against the
  // columns at open (batch_transform.h): the catalog's read policy uses it.
  // Null (default): batches as read.
  std::shared_ptr<const BatchTransform> batch_transform;

  Status Validate() const;
};

// One column of a batch, in loader-owned memory valid while the Batch is held.
struct BatchColumn {
  std::string name;
  format::DataType type;
  bool nullable = false;
  // Fixed-width types: num_rows * type.fixed_width() bytes, row-major, i.e.
  // an array of shape [num_rows, ...type.shape]. Variable-length types: the
  // rows' data back to back (bytes for string/binary, elements of type.elem
  // for lists). 64-byte aligned.
  const uint8_t* values = nullptr;
  size_t values_size = 0;  // bytes
  // Variable-length types: num_rows + 1 offsets into values, offsets[0] == 0,
  // in bytes (string/binary) or elements (lists). Null for fixed-width types.
  const int64_t* offsets = nullptr;
  // Bit i (LSB first) is 1 when row i is valid; null when no row is null.
  const uint8_t* validity = nullptr;
  int64_t null_count = 0;
  // Nested types (struct, map, lists of anything but non-null scalars):
  // the whole column, children included, gathered into its own buffers;
  // values, offsets and validity above are then unused (null).
  std::shared_ptr<const format::Column> nested;

  // This column of a `rows`-row batch as a format::Column over the same
  // memory, whose buffers keep `owner` (the batch) alive.
  format::Column View(int64_t rows, const std::shared_ptr<const void>& owner) const;
};

struct Batch {
  int64_t epoch = 0;
  // Position of the first row in the epoch's global order.
  int64_t position = 0;
  int64_t num_rows = 0;              // batch_size, or fewer (even 0) in an epoch's tail
  std::vector<BatchColumn> columns;  // in LoaderOptions::columns order
  // Per row: the live-row index in its table (as Table::Take takes it) and
  // which table (index into the loader's tables; all 0 with one table).
  std::vector<int64_t> indices;
  std::vector<int32_t> tables;
  // What a BatchTransform's batch keeps alive (the batch it rewrote, the
  // buffers it made); null for batches as read.
  std::shared_ptr<const void> keep_alive;

  const BatchColumn* column(std::string_view name) const;
};

// Where the time goes; all times are totals over worker threads (seconds).
struct LoaderStats {
  int64_t batches = 0;  // handed to the consumer
  int64_t rows = 0;
  int64_t skipped_rows = 0;        // left out by OnError::kSkip
  double transform_seconds = 0;    // decoding and transforming images
  // Images decoded through an entropy index (ImageOptions::index_cache_mb):
  // only the blocks around their crop were Huffman-decoded.
  int64_t indexed_images = 0;
  int64_t bytes = 0;          // bytes of column data handed out
  int64_t pages_fetched = 0;  // pages decoded
  int64_t page_cache_hits = 0;
  int64_t page_views = 0;          // uncompressed pages of mapped shards, read in place
  int64_t page_bytes_fetched = 0;  // uncompressed bytes of pages decoded
  double io_seconds = 0;           // fetching uncompressed pages (map/read, checksum)
  double decode_seconds = 0;       // fetching compressed pages (read, decompress, checksum)
  double assemble_seconds = 0;  // locating rows and copying them into batches (excl. the two above)
  double consumer_wait_seconds = 0;  // Next() waiting for a batch not yet ready
  double idle_seconds = 0;           // read-ahead full: waiting for the consumer
  int64_t readahead_batches = 0;     // batches filled ahead (from prefetch_bytes)
  int64_t uring_pages = 0;           // pages read in io_uring batches (of pages_fetched)
  int64_t uring_batches = 0;         // io_uring batches submitted
  bool uring_unavailable = false;    // io_uring could not be used: reads went through pread
};

class Loader {
 public:
  // Opens the tables (each at its version or tag) and starts reading ahead.
  static Result<std::unique_ptr<Loader>> Open(const std::vector<TableRef>& tables,
                                              const LoaderOptions& options,
                                              const table::TableOptions& table_options = {});
  // The same over already open table handles (snapshots).
  static Result<std::unique_ptr<Loader>> Create(
      std::vector<std::shared_ptr<const table::Table>> tables, const LoaderOptions& options);
  virtual ~Loader() = default;

  // This rank's next batch, or nullptr at the end of the epoch, after which
  // the loader is at the start of the next epoch. Waits at most `timeout`
  // (DeadlineExceeded), returns Cancelled after Cancel(). A read error is
  // returned in its batch's turn; the position stays, so Next retries it.
  virtual Result<std::shared_ptr<const Batch>> Next(
      absl::Duration timeout = absl::InfiniteDuration()) = 0;

  // The state after the batches handed out so far (the same on every rank
  // that has taken the same number of batches).
  virtual LoaderState state() const = 0;
  // Resumes at `state`'s epoch and position; it must come from a loader over
  // the same tables (uri, version), seed and order settings. World size and
  // batch size may differ.
  virtual Status Restore(const LoaderState& state) = 0;
  // Moves to the start of `epoch` (>= 0).
  virtual Status SetEpoch(int64_t epoch) = 0;
  // Makes pending and future Next calls return Cancelled; idempotent.
  virtual void Cancel() = 0;

  virtual LoaderStats stats() const = 0;
  // The columns batches hold (names, types, nullability).
  virtual const format::Schema& schema() const = 0;
  // Batches this rank yields per epoch (the same on every rank).
  virtual int64_t batches_per_epoch() const = 0;
  // Positions per epoch: the table's live rows, or samples_per_epoch for mixtures.
  virtual int64_t epoch_size() const = 0;
};

}  // namespace flywheel::loader
