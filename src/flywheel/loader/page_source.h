// Where the loader gets decoded shard pages.
//
// The read pipeline asks a PageSource for each (reader, column, page) it
// needs. The source decodes through the ShardReader (mmap views for
// uncompressed pages of mapped files; read + checksum + decompress otherwise)
// and keeps recently used decoded pages in a byte-bounded LRU cache, so a
// decompressed page serves every row it holds in the read-ahead window.
//
// With io_uring on, the pipeline first hands the source the pages a ticket
// will need (Prefetch): the ones neither cached nor served as views are read
// in one batch of io_uring reads (liburing, one ring per calling thread),
// then checksummed, decompressed and cached, so the Page() calls that follow
// hit the cache (docs/loader.md, "Read pipeline").
//
// Thread-safety: Page(), Prefetch() and stats() may be called concurrently.
// A page one thread's Prefetch is reading is read by no other thread: other
// Prefetch calls skip it and Page() waits for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/shard.h"

namespace flywheel::loader {

struct PageSourceStats {
  int64_t fetched = 0;        // pages read and decoded (cache misses)
  int64_t hits = 0;           // pages served from the cache
  int64_t bytes_fetched = 0;  // uncompressed bytes of the pages decoded
  // Reading stored pages: pread, io_uring batches (submit to the last
  // completion), and views of mapped uncompressed pages (with their one
  // checksum on first use).
  int64_t io_nanos = 0;
  // Checksums, decompression and structure checks of the pages read.
  int64_t decode_nanos = 0;
  int64_t views = 0;          // uncompressed pages of mapped files: served as views, not cached
  int64_t batched = 0;        // pages read through io_uring (a subset of fetched)
  int64_t batches = 0;        // io_uring batches (Prefetch calls that read something)
  // Prefetch calls that wanted io_uring but found it unavailable on the
  // calling thread (io_uring_queue_init failed: old kernel, seccomp, built
  // without liburing) and left the reads to Page(), by pread.
  int64_t uring_unavailable = 0;
};

// A page the pipeline is about to read.
struct PageRef {
  const format::ShardReader* reader = nullptr;
  int column = 0;
  int page = 0;
};

class PageSource {
 public:
  virtual ~PageSource() = default;
  // The decoded page `page` of shard column `column`; its buffers stay valid
  // while the returned Column is held. Errors name the file, column and page.
  virtual Result<format::Column> Page(const format::ShardReader& reader, int column, int page) = 0;
  // Reads ahead pages that Page() calls will soon ask for, all at once. Pages
  // already cached, served as views, or larger than the cache are skipped;
  // so are pages past half the cache's bytes in one call (reading more would
  // evict the call's own pages before they are used). Returns on error the
  // first page that failed (read error, short read, checksum mismatch,
  // corrupt data), naming the file, column and page, with `*failed` (when
  // not null) set to its index in `pages`. The default does nothing.
  virtual Status Prefetch(std::span<const PageRef> pages, size_t* failed) {
    (void)pages;
    (void)failed;
    return absl::OkStatus();
  }
  // Whether Prefetch does anything (callers skip building the list if not).
  virtual bool prefetches() const { return false; }
  virtual PageSourceStats stats() const = 0;
};

struct PageSourceOptions {
  // Bound of the decoded-page cache in uncompressed bytes (0 = no cache, and
  // then nothing to prefetch into).
  int64_t cache_bytes = 0;
  // Prefetch through io_uring; false = pages are read one at a time by
  // pread in Page(). When io_uring is unavailable the source falls back to
  // pread (counted in PageSourceStats::uring_unavailable, logged once).
  bool io_uring = false;
  // Submission queue entries of each thread's ring; larger batches keep at
  // most this many reads in flight. In [1, 4096]; default 64.
  unsigned ring_entries = 64;
  // Tests only: behave as if io_uring_queue_init failed.
  bool simulate_uring_unavailable = false;
};

std::unique_ptr<PageSource> NewPageSource(const PageSourceOptions& options);
// The pread source with an LRU cache of at most `cache_bytes` uncompressed
// bytes (0 = no cache).
std::unique_ptr<PageSource> NewCachingPageSource(int64_t cache_bytes);
// Whether this build has liburing and the kernel lets this process set up a
// ring (probed once).
bool IoUringAvailable();

}  // namespace flywheel::loader
