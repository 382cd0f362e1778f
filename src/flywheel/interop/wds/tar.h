// A streaming, read-only tar reader for the WebDataset source (wds_reader.h).
// Private to src/flywheel/interop/wds; docs/ingest.md, "WebDataset".
//
// Formats: POSIX ustar (name + prefix), GNU (long names in 'L' entries, long
// link names in 'K', base-256 numbers, old sparse 'S' entries) and POSIX pax
// ('x' per-entry records path= and size=; 'g' global records are parsed and
// ignored). Every header's checksum is verified. The end of the archive is
// two zero blocks; a stream that simply stops on an entry boundary is also
// accepted, a stream that stops inside a header or an entry's data (padding
// included) is an error. Nothing is ever written to disk.
//
// The byte stream is read strictly forwards (ByteSource), so a gzip-
// compressed tar is read the same way as a plain one: OpenTarStream detects
// gzip from its magic (1f 8b) and inflates it, member after member.
//
// Thread-safety: one object is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "flywheel/base/status.h"
#include "flywheel/interop/wds/wds_reader.h"
#include "flywheel/io/file_system.h"

namespace flywheel::interop::internal_wds {

inline constexpr size_t kTarBlock = 512;
// Largest metadata entry ('x', 'g', 'L', 'K') accepted: they hold path names.
inline constexpr uint64_t kMaxTarMetadataSize = 1 << 20;

// A forward-only byte stream.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `n` bytes into `dst`; fewer only at the end of the stream.
  virtual Result<size_t> Read(void* dst, size_t n) = 0;
  // Skips up to `n` bytes; fewer only at the end of the stream.
  virtual Result<uint64_t> Skip(uint64_t n) = 0;
  // Bytes of the underlying file consumed so far (compressed bytes for gzip).
  virtual uint64_t input_bytes() const = 0;
  // Bytes left in the stream when known without reading them (plain files),
  // so that a header claiming more data than exists fails before allocating.
  virtual std::optional<uint64_t> remaining() const { return std::nullopt; }
};

// True when `file` starts with the gzip magic 1f 8b.
Result<bool> IsGzipFile(const io::RandomAccessFile& file);

// The tar stream of `file`: its bytes, or their gzip decompression when the
// file starts with the gzip magic (any number of concatenated members; zero
// bytes after a member are ignored, anything else is an error).
Result<std::unique_ptr<ByteSource>> OpenTarStream(std::shared_ptr<io::RandomAccessFile> file);

// Streams over bytes (tests); `data` must outlive the source.
std::unique_ptr<ByteSource> NewMemorySource(std::string_view data);

struct TarEntry {
  // 0-based position among the entries Next() returns (metadata entries
  // are not counted; they belong to the entry they describe).
  int64_t index = 0;
  // Byte offset of the entry's own header in the (uncompressed) tar stream.
  uint64_t offset = 0;
  // Full path: pax path=, else a GNU long name, else ustar prefix + "/" + name.
  std::string name;
  // Type flag; the historic '\0' for regular files is reported as '0'.
  char type = '0';
  // Link target of '1' and '2' entries (pax linkpath= or GNU 'K' when present).
  std::string link_name;
  // Bytes of data that follow the header (0 for header-only types: links,
  // devices, directories, FIFOs).
  uint64_t size = 0;
  // GNU sparse file (type 'S' or pax GNU.sparse.* records): its data is a
  // sparse map, not the file's bytes.
  bool sparse = false;
};

class TarReader {
 public:
  explicit TarReader(std::unique_ptr<ByteSource> stream) : stream_(std::move(stream)) {}

  // The next entry (metadata entries consumed), or nullptr at the end of the
  // archive. Skips whatever of the previous entry's data was not read. The
  // pointer is valid until the next call. Errors name the entry index and the
  // header's byte offset; after an error the reader must not be used.
  Result<const TarEntry*> Next();
  // Appends the current entry's data to `*dst`. REQUIRES: Next() returned an
  // entry and ReadData was not called for it yet.
  Status ReadData(std::string* dst);

  // Bytes of the underlying file consumed so far.
  uint64_t input_bytes() const { return stream_->input_bytes(); }
  // Bytes of the tar stream consumed so far.
  uint64_t offset() const { return pos_; }

 private:
  Status ReadExact(void* dst, size_t n, std::string_view what);
  Status SkipExact(uint64_t n, std::string_view what);
  Status SkipRest();
  std::string Where() const;  // "tar entry N at offset X"
  Status Error(std::string_view why) const;

  std::unique_ptr<ByteSource> stream_;
  uint64_t pos_ = 0;  // tar stream offset
  int64_t next_index_ = 0;
  // The entry index and header offset errors name.
  int64_t ctx_index_ = 0;
  uint64_t ctx_offset_ = 0;
  bool done_ = false;
  bool have_entry_ = false;
  uint64_t data_left_ = 0;  // unread data of the current entry
  uint64_t pad_left_ = 0;   // padding after it
  TarEntry entry_;
};

// A numeric header field: octal digits (leading spaces allowed, ended by
// NUL, space or the field's end) or GNU base-256 (first byte 0x80; 0xff,
// negative, is refused). Values above INT64_MAX are refused.
Result<uint64_t> ParseTarNumber(std::string_view field);

struct PaxRecords {
  std::optional<std::string> path;
  std::optional<std::string> link_path;
  std::optional<uint64_t> size;
  bool sparse = false;  // a GNU.sparse.* record was present
};
// Parses pax extended header records "<len> <key>=<value>\n".
Result<PaxRecords> ParsePaxRecords(std::string_view data);

// The WebDataset reader over an already opened file (fuzzing, tests):
// OpenWebDataset is this over the POSIX file at `path`.
Result<std::unique_ptr<WdsReader>> OpenWebDatasetFile(std::shared_ptr<io::RandomAccessFile> file,
                                                      const WdsReadOptions& options);

}  // namespace flywheel::interop::internal_wds
