// A directory of files as a source: rows {path, bytes}.
// docs/ingest.md, "Files".
//
// The directory is walked once at open (std::filesystem, symlinks neither
// followed nor listed, only regular files), the relative paths sorted
// bytewise; files are read batch by batch, each opened with O_NOFOLLOW and
// checked to still be a regular file, so memory is one batch of files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/utf8.h"
#include "flywheel/interop/wds/wds_reader.h"

namespace flywheel::interop {
namespace {

namespace fs = std::filesystem;

std::string Quote(std::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(AsAbsl(s)), "\"");
}

Status ErrnoError(int err, std::string_view what, std::string_view path) {
  const std::string msg = absl::StrCat(AsAbsl(what), " ", Quote(path), ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  if (err == ELOOP)
    return absl::InvalidArgumentError(absl::StrCat(msg, " (symlinks are not followed)"));
  return absl::InternalError(msg);
}

// Reads a file that must still be a regular file (not a symlink, FIFO, ...).
Result<std::string> ReadRegularFile(const std::string& path) {
  // O_NONBLOCK: a FIFO swapped in after the walk must not block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return ErrnoError(errno, "opening", path);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading ", Quote(path), ": no longer a regular file"));
  }
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  for (;;) {
    if (got == data.size()) data.resize(got + std::max<size_t>(got / 2, 4096));  // the file grew
    const ssize_t r = ::read(fd, data.data() + got, data.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "reading", path);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  data.resize(got);
  return data;
}

class FilesReader final : public RecordBatchReader {
 public:
  FilesReader(std::string dir, FilesReadOptions options, std::vector<std::string> paths)
      : dir_(std::move(dir)), options_(std::move(options)), paths_(std::move(paths)) {
    schema_.fields.push_back(format::Field{"path", format::DataType::String(), false, -1, ""});
    schema_.fields.push_back(format::Field{"bytes", format::DataType::Binary(), false, -1, ""});
  }

  const format::Schema& schema() const override { return schema_; }
  int64_t bytes_read() const override { return bytes_read_; }

  Result<std::optional<format::RecordBatch>> Next() override {
    if (next_ >= paths_.size()) return std::nullopt;
    const size_t end =
        next_ + static_cast<size_t>(std::min<int64_t>(options_.batch_rows,
                                                      static_cast<int64_t>(paths_.size() - next_)));
    std::string names;
    std::vector<int64_t> name_offsets{0};
    std::string bytes;
    std::vector<int64_t> byte_offsets{0};
    for (size_t i = next_; i < end; ++i) {
      FW_ASSIGN_OR_RETURN_CTX(std::string data, ReadRegularFile(FullPath(paths_[i])),
                              "reading files under ", Quote(dir_));
      bytes_read_ += static_cast<int64_t>(data.size());
      bytes.append(data);
      byte_offsets.push_back(static_cast<int64_t>(bytes.size()));
      names.append(paths_[i]);
      name_offsets.push_back(static_cast<int64_t>(names.size()));
    }
    const int64_t rows = static_cast<int64_t>(end - next_);
    next_ = end;
    format::RecordBatch batch;
    batch.schema = schema_;
    batch.num_rows = rows;
    format::Column path_col;
    path_col.type = format::DataType::String();
    path_col.length = rows;
    path_col.values = format::Buffer::FromString(std::move(names));
    path_col.offsets = format::Buffer::FromVector(std::move(name_offsets));
    format::Column bytes_col;
    bytes_col.type = format::DataType::Binary();
    bytes_col.length = rows;
    bytes_col.values = format::Buffer::FromString(std::move(bytes));
    bytes_col.offsets = format::Buffer::FromVector(std::move(byte_offsets));
    batch.columns.push_back(std::move(path_col));
    batch.columns.push_back(std::move(bytes_col));
    return batch;
  }

 private:
  std::string FullPath(const std::string& rel) const {
    return (!dir_.empty() && dir_.back() == '/') ? dir_ + rel : dir_ + "/" + rel;
  }

  std::string dir_;
  FilesReadOptions options_;
  std::vector<std::string> paths_;  // relative, sorted
  format::Schema schema_;
  size_t next_ = 0;
  int64_t bytes_read_ = 0;
};

bool Matches(const std::string& rel, const std::vector<std::string>& extensions) {
  if (extensions.empty()) return true;
  return std::any_of(extensions.begin(), extensions.end(), [&](const std::string& ext) {
    return rel.size() >= ext.size() && rel.compare(rel.size() - ext.size(), ext.size(), ext) == 0;
  });
}

}  // namespace

Result<std::unique_ptr<RecordBatchReader>> OpenFiles(const std::string& dir,
                                                     const FilesReadOptions& options) {
  if (options.batch_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("FilesReadOptions.batch_rows must be >= 1, got ", options.batch_rows));
  }
  for (const auto& ext : options.extensions) {
    if (ext.empty())
      return absl::InvalidArgumentError("FilesReadOptions.extensions has an empty entry");
  }
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st)) {
    if (!ec || ec == std::errc::no_such_file_or_directory) {
      return absl::NotFoundError(
          absl::StrCat("opening files under ", Quote(dir), ": no such directory"));
    }
    return ErrnoError(ec.value(), "opening files under", dir);
  }
  if (!fs::is_directory(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat("opening files under ", Quote(dir), ": not a directory"));
  }

  // Iterated paths are dir / ..., so the relative path is what follows dir.
  const fs::path root(dir);
  std::vector<std::string> paths;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return ErrnoError(ec.value(), "listing", dir);
  std::string last = dir;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    last = p.string();
    // symlink_status: a symlink is reported as itself and never followed
    // (directory_options::none does not descend into symlinked directories).
    const fs::file_status s = it->symlink_status(ec);
    if (ec) return ErrnoError(ec.value(), "stat", last);
    if (!fs::is_regular_file(s)) continue;
    std::string rel = p.lexically_relative(root).generic_string();
    if (rel.empty() || rel.rfind("../", 0) == 0) {
      return absl::InternalError(
          absl::StrCat("listing ", Quote(dir), ": cannot make ", Quote(last), " relative"));
    }
    if (!Matches(rel, options.extensions)) continue;
    if (!IsValidUtf8(rel)) {
      return absl::InvalidArgumentError(
          absl::StrCat("listing ", Quote(dir), ": file name ", Quote(rel), " is not valid UTF-8"));
    }
    paths.push_back(std::move(rel));
  }
  if (ec) return ErrnoError(ec.value(), absl::StrCat("listing ", Quote(dir), " after"), last);
  std::sort(paths.begin(), paths.end());
  return std::unique_ptr<RecordBatchReader>(
      std::make_unique<FilesReader>(dir, options, std::move(paths)));
}

}  // namespace flywheel::interop
