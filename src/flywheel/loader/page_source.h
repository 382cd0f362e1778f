// Where the loader gets decoded shard pages.
//
// The read pipeline asks a PageSource for each (reader, column, page) it
// needs; the default source decodes through ShardReader::ReadPage (mmap views
// for uncompressed pages, read + decompress otherwise) and keeps recently used
// pages in a byte-bounded LRU cache, so a decompressed page serves every row
// it holds in the read-ahead window. This interface is the seam for an
// io_uring source that submits the reads of a whole window at once
// (docs/loader.md, "Read pipeline").
//
// Thread-safety: Page() and stats() may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/shard.h"

namespace flywheel::loader {

struct PageSourceStats {
  int64_t fetched = 0;        // pages decoded (cache misses)
  int64_t hits = 0;           // pages served from the cache
  int64_t bytes_fetched = 0;  // uncompressed bytes of the pages decoded
  int64_t io_nanos = 0;       // fetching pages stored uncompressed (map/read + checksum)
  int64_t decode_nanos = 0;   // fetching compressed pages (read + decompress + checksum)
  int64_t views = 0;          // uncompressed pages of mapped files: served as views, not cached
};

class PageSource {
 public:
  virtual ~PageSource() = default;
  // The decoded page `page` of shard column `column`; its buffers stay valid
  // while the returned Column is held. Errors name the file, column and page.
  virtual Result<format::Column> Page(const format::ShardReader& reader, int column, int page) = 0;
  virtual PageSourceStats stats() const = 0;
};

// The default source: ReadPage plus an LRU cache of at most `cache_bytes`
// uncompressed bytes (0 = no cache).
std::unique_ptr<PageSource> NewCachingPageSource(int64_t cache_bytes);

}  // namespace flywheel::loader
