// Storage abstraction for everything flywheel reads and writes.
//
// Paths are '/'-separated strings. The interface only uses operations an
// object store can also provide (whole-object put, put-if-absent, ranged
// reads, listing by prefix, delete), so an S3 implementation can sit behind
// it later; directories are a POSIX detail (CreateDirs is a no-op there).
//
// Publication rules (docs/format/table.md relies on them):
//  - PutIfAbsent is the only primitive commits use: it makes `path` exist with
//    exactly `data`, or fails with AlreadyExists, atomically with respect to
//    every other writer. POSIX: write a temp file, fsync, link() it to the
//    final name (never rename-over), unlink the temp.
//  - Put replaces a file atomically (temp + rename) without making it
//    durable; only for hints that readers never trust.
//  - NewWritable streams a new, uniquely named file (O_EXCL); it is durable
//    after Close() returns OK. Such files are invisible to readers until a
//    manifest names them.
//
// Thread-safety: FileSystem and RandomAccessFile are safe for concurrent use;
// a WritableFile is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::io {

struct FileInfo {
  std::string name;        // base name (List) or the path given (Stat)
  uint64_t size = 0;
  bool is_dir = false;
  int64_t mtime_ns = 0;    // last modification, ns since the Unix epoch
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  virtual const std::string& path() const = 0;
  virtual uint64_t size() const = 0;
  // Reads exactly `n` bytes at `offset` into `dst`. A range past the end is
  // OutOfRange naming the file and range.
  virtual Status ReadAt(uint64_t offset, size_t n, void* dst) const = 0;
  // The whole file as one mapped region when the file was opened with mmap
  // (valid while this object lives), else nullptr.
  virtual const uint8_t* mapped_data() const { return nullptr; }
  // The POSIX file descriptor for callers that submit their own reads
  // (io_uring), valid while this object lives; -1 when the file is not a
  // POSIX file (in-memory files).
  virtual int fd() const { return -1; }
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t n) = 0;
  Status Append(std::string_view s) { return Append(s.data(), s.size()); }
  // Bytes appended so far.
  virtual uint64_t position() const = 0;
  // Flushes and makes the file durable. REQUIRES: called once.
  virtual Status Close() = 0;
};

struct FileOpenOptions {
  // Map the file into memory so readers can take zero-copy views
  // (RandomAccessFile::mapped_data). Falls back to pread when mapping fails.
  bool mmap = true;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  virtual Result<std::shared_ptr<RandomAccessFile>> OpenRead(const std::string& path,
                                                            const FileOpenOptions& options = {}) = 0;
  // Reads a whole file.
  virtual Result<std::string> ReadFile(const std::string& path) = 0;
  // Creates a new file; AlreadyExists if the name is taken.
  virtual Result<std::unique_ptr<WritableFile>> NewWritable(const std::string& path) = 0;
  // Atomically creates `path` with `data`; AlreadyExists if it exists.
  virtual Status PutIfAbsent(const std::string& path, std::string_view data) = 0;
  // Atomically creates or replaces `path` (hints only; see above).
  virtual Status Put(const std::string& path, std::string_view data) = 0;
  // Atomically and durably replaces `path` (which may not exist): readers see
  // the old or the new bytes, never a mix, and the new bytes survive a crash
  // once this returns. Only erasure rewrites published files this way.
  virtual Status Replace(const std::string& path, std::string_view data) = 0;
  // Entries of a directory (not recursive), sorted by name. NotFound if absent.
  virtual Result<std::vector<FileInfo>> List(const std::string& dir) = 0;
  virtual Result<FileInfo> Stat(const std::string& path) = 0;
  // NotFound if absent.
  virtual Status Delete(const std::string& path) = 0;
  virtual Status CreateDirs(const std::string& dir) = 0;

  Result<bool> Exists(const std::string& path);
};

struct PosixOptions {
  // fsync files and their directories when publishing. Off only for scratch
  // data: a power loss may then lose the latest commits (never corrupt older ones).
  bool sync = true;
};

// The local file system. One shared instance per distinct options. Every
// path goes through LocalPath first: `file:///abs` names /abs, and a path with
// any other scheme (`s3://`, `gs://`, `hdfs://`...) is refused rather than
// becoming a local folder named `s3:`.
std::shared_ptr<FileSystem> PosixFileSystem(const PosixOptions& options = {});

// The local path a user-given location names: itself when it has no URI
// scheme, the decoded path of a `file:` URI (`file:///data/t`,
// `file://localhost/data/t`). InvalidArgument naming the location for a
// scheme flywheel does not serve, and for `file://` with another host.
Result<std::string> LocalPath(std::string_view location);

// A read-only file over bytes in memory (tests, fuzzing, decoded buffers).
std::shared_ptr<RandomAccessFile> NewMemoryFile(std::string path, std::string data);

// Joins two path pieces with exactly one '/'.
std::string JoinPath(std::string_view a, std::string_view b);

}  // namespace flywheel::io
