// Shard files: flywheel's columnar file format for training data.
//
// A shard holds the rows of one table fragment. Each column is stored as
// independently decodable pages (~256 KiB by default) with a codec and a
// checksum; a footer holds the schema and a page index, so reading row i
// touches one page per requested column. Uncompressed pages are served as
// zero-copy views of the memory-mapped file. Byte layout and compatibility
// rules: docs/format/shard.md.
//
// Thread-safety: a ShardWriter is used by one thread. A ShardReader is
// immutable after Open and safe for concurrent use.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/codec.h"
#include "flywheel/format/column.h"
#include "flywheel/format/types.h"
#include "flywheel/io/file_system.h"

namespace flywheel::format {

inline constexpr uint16_t kShardFormatVersion = 1;
// Feature flags a file may require (trailer); readers refuse unknown ones.
// Nested columns (struct, map, lists of anything but non-null scalars):
// set in files whose schema has one (docs/format/shard.md, section 8).
inline constexpr uint16_t kShardFeatureNested = 0x1;
inline constexpr uint16_t kShardKnownFeatures = kShardFeatureNested;

struct ShardWriterOptions {
  // Target uncompressed bytes per page. A page holds at least one row.
  // Default 256 KiB; must be in [1 KiB, 64 MiB].
  size_t page_size = 256 << 10;
  // Codec for every page. kNone (default) lets readers map pages zero-copy.
  Codec codec = Codec::kNone;
  // zstd level (1..19) when codec is kZstd. Default 3.
  int zstd_level = 3;
  // Free-form key/value pairs stored in the footer.
  std::map<std::string, std::string> metadata;

  Status Validate() const;
};

struct ShardInfo {
  std::string path;
  int64_t num_rows = 0;
  uint64_t size_bytes = 0;
};

class ShardWriter {
 public:
  static Result<std::unique_ptr<ShardWriter>> Open(io::FileSystem* fs, const std::string& path,
                                                   const Schema& schema,
                                                   const ShardWriterOptions& options = {});
  virtual ~ShardWriter() = default;
  // Appends the rows of `batch`. REQUIRES: batch.schema == the writer's schema
  // (names, types); checked.
  virtual Status Write(const RecordBatch& batch) = 0;
  // Writes the footer and makes the file durable. REQUIRES: called once.
  virtual Result<ShardInfo> Finish() = 0;
  virtual int64_t num_rows() const = 0;
};

// One entry of the page index.
struct PageInfo {
  int64_t first_row = 0;
  int64_t num_rows = 0;
  uint64_t offset = 0;          // file offset of the stored page
  uint64_t stored_size = 0;     // bytes in the file (compressed size)
  uint64_t values_size = 0;     // uncompressed section sizes
  uint64_t offsets_size = 0;
  uint64_t validity_size = 0;
  Codec codec = Codec::kNone;
  int64_t null_count = 0;
  uint64_t checksum = 0;        // XXH3-64 of the stored bytes

  uint64_t uncompressed_size() const;
};

struct ShardReaderOptions {
  // Map the file to serve uncompressed pages zero-copy.
  bool mmap = true;
  // Verify page checksums (each mapped page once; copied pages every read).
  bool verify_checksums = true;
};

class ShardReader {
 public:
  static Result<std::shared_ptr<ShardReader>> Open(io::FileSystem* fs, const std::string& path,
                                                   const ShardReaderOptions& options = {});
  static Result<std::shared_ptr<ShardReader>> Open(std::shared_ptr<io::RandomAccessFile> file,
                                                   const ShardReaderOptions& options = {});
  ~ShardReader();

  const Schema& schema() const { return schema_; }
  int64_t num_rows() const { return num_rows_; }
  const std::string& path() const;
  uint64_t file_size() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<PageInfo>& pages(int column) const { return pages_[column]; }

  // Index of the page of `column` holding `row`. REQUIRES: 0 <= row < num_rows.
  int FindPage(int column, int64_t row) const;
  // The whole decoded page; zero-copy for uncompressed mapped pages.
  Result<Column> ReadPage(int column, int page) const;
  // For callers that read stored pages themselves (the loader's io_uring
  // page source): the file's descriptor, valid while this reader lives, or
  // -1 when the file is not a POSIX file. A page's bytes are
  // pages(column)[page].stored_size bytes at its .offset.
  int fd() const;
  // The stored (compressed) bytes of a page, read into an 8-byte aligned
  // buffer. Errors name the file, column and page.
  Result<Buffer> ReadStoredPage(int column, int page) const;
  // Decodes a page from its stored bytes, read by the caller: verifies the
  // checksum (when the options say so), decompresses and checks the page's
  // structure, as ReadPage does. REQUIRES: stored.data is 8-byte aligned;
  // stored.owner keeps it alive (the result may alias it when the page is
  // uncompressed). A size other than the page's stored_size is DataLoss.
  // Errors name the file, column and page.
  Result<Column> DecodePage(int column, int page, Buffer stored) const;
  // True when the file is memory-mapped: ReadPage of an uncompressed page
  // is then a view (no copy, checksum verified on first use only).
  bool mapped() const;
  // Rows [start, start+length) of a column; zero-copy when they lie in one
  // uncompressed mapped page.
  Result<Column> Read(int column, int64_t start, int64_t length) const;
  // Rows at `rows` (any order, repeats allowed) gathered into a new column.
  Result<Column> Take(int column, const int64_t* rows, size_t n) const;
  // The gather under Take for fixed-width columns: row rows[i] is copied to
  // out_values + pos(i) * width and its validity bit to bit pos(i) of
  // out_validity (cleared for nulls, set otherwise; may be null when
  // has_nulls(column) is false), where pos(i) = positions ? positions[i] : i.
  // Returns the number of nulls gathered. REQUIRES: fixed-width column.
  Result<int64_t> GatherFixed(int column, const int64_t* rows, const int64_t* positions, size_t n,
                              uint8_t* out_values, uint8_t* out_validity) const;
  bool has_nulls(int column) const { return has_nulls_[column]; }

 private:
  ShardReader() = default;
  Status ParseFooter();
  Status CheckPage(int column, int page, const uint8_t* body, uint64_t size) const;
  Status CheckPageIndex(int column, int page) const;
  std::string PageName(int column, int page) const;
  Result<Column> PageColumn(int column, int page, const Buffer& body) const;

  std::shared_ptr<io::RandomAccessFile> file_;
  ShardReaderOptions options_;
  Schema schema_;
  int64_t num_rows_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<std::vector<PageInfo>> pages_;
  std::vector<std::vector<int64_t>> page_starts_;
  // Rows per page when every page but the last holds the same number (the
  // writer's fixed-width case): FindPage is then a division. 0 otherwise.
  std::vector<int64_t> uniform_rows_;
  std::vector<uint8_t> has_nulls_;
  // One flag per page of mapped uncompressed data: checked once.
  std::vector<std::unique_ptr<std::atomic<uint8_t>[]>> verified_;
};

}  // namespace flywheel::format
