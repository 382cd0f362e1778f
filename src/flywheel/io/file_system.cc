#include "flywheel/io/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace flywheel::io {
namespace {

Status ErrnoStatus(int err, std::string_view what, std::string_view path) {
  std::string msg = absl::StrCat(AsAbsl(what), " ", AsAbsl(path), ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR: return absl::NotFoundError(msg);
    case EEXIST: return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT: return absl::ResourceExhaustedError(msg);
    default: return absl::InternalError(msg);
  }
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string TempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(getpid())};
  const std::string dir = DirName(path);
  const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  return absl::StrCat(dir, "/.tmp.", base, ".", getpid(), ".", counter++, ".", rng() % 1000000007);
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "writing", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, "syncing directory", dir);
  return absl::OkStatus();
}

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size, void* map)
      : path_(std::move(path)), fd_(fd), size_(size), map_(map) {}
  ~PosixRandomAccessFile() override {
    if (map_ != nullptr) ::munmap(map_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  const uint8_t* mapped_data() const override { return static_cast<const uint8_t*>(map_); }
  int fd() const override { return fd_; }

  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    if (offset > size_ || n > size_ - offset) {
      return absl::OutOfRangeError(absl::StrCat("reading ", path_, ": range [", offset, ", ",
                                                offset + n, ") is past the end (size ", size_,
                                                ")"));
    }
    if (map_ != nullptr) {
      std::memcpy(dst, static_cast<const char*>(map_) + offset, n);
      return absl::OkStatus();
    }
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "reading", path_);
      }
      if (r == 0) return absl::DataLossError(absl::StrCat("reading ", path_, ": file shrank"));
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
  void* map_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, bool sync) : path_(std::move(path)), fd_(fd), sync_(sync) {
    buffer_.reserve(kBufferSize);
  }
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(const void* data, size_t n) override {
    pos_ += n;
    if (buffer_.size() + n <= kBufferSize) {
      buffer_.append(static_cast<const char*>(data), n);
      return absl::OkStatus();
    }
    FW_RETURN_IF_ERROR(Flush());
    if (n >= kBufferSize) return WriteAll(fd_, data, n, path_);
    buffer_.append(static_cast<const char*>(data), n);
    return absl::OkStatus();
  }
  uint64_t position() const override { return pos_; }
  Status Close() override {
    FW_RETURN_IF_ERROR(Flush());
    if (sync_ && ::fsync(fd_) != 0) return ErrnoStatus(errno, "syncing", path_);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoStatus(errno, "closing", path_);
    if (sync_) return SyncDir(DirName(path_));
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kBufferSize = 1 << 20;
  Status Flush() {
    if (buffer_.empty()) return absl::OkStatus();
    Status s = WriteAll(fd_, buffer_.data(), buffer_.size(), path_);
    buffer_.clear();
    return s;
  }
  std::string path_;
  int fd_;
  bool sync_;
  uint64_t pos_ = 0;
  std::string buffer_;
};

class PosixFs final : public FileSystem {
 public:
  explicit PosixFs(PosixOptions options) : options_(options) {}

  Result<std::shared_ptr<RandomAccessFile>> OpenRead(const std::string& path,
                                                    const FileOpenOptions& options) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "opening", path);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "stat", path);
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("opening ", path, ": is a directory"));
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    void* map = nullptr;
    if (options.mmap && size > 0) {
      map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) map = nullptr;
    }
    return std::shared_ptr<RandomAccessFile>(
        std::make_shared<PosixRandomAccessFile>(path, fd, size, map));
  }

  Result<std::string> ReadFile(const std::string& path) override {
    FW_ASSIGN_OR_RETURN(auto file, OpenRead(path, FileOpenOptions{.mmap = false}));
    std::string data(file->size(), '\0');
    FW_RETURN_IF_ERROR(file->ReadAt(0, data.size(), data.data()));
    return data;
  }

  Result<std::unique_ptr<WritableFile>> NewWritable(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "creating", path);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, options_.sync));
  }

  Status PutIfAbsent(const std::string& path, std::string_view data) override {
    FW_ASSIGN_OR_RETURN(std::string tmp, WriteTemp(path, data, options_.sync));
    const int rc = ::link(tmp.c_str(), path.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0) {
      if (err == EEXIST) return absl::AlreadyExistsError(absl::StrCat(path, " already exists"));
      return ErrnoStatus(err, "publishing", path);
    }
    if (options_.sync) return SyncDir(DirName(path));
    return absl::OkStatus();
  }

  Status Put(const std::string& path, std::string_view data) override {
    // Hints only: atomic but not made durable (readers never trust them).
    FW_ASSIGN_OR_RETURN(std::string tmp, WriteTemp(path, data, /*sync=*/false));
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return ErrnoStatus(err, "publishing", path);
    }
    return absl::OkStatus();
  }

  Status Replace(const std::string& path, std::string_view data) override {
    FW_ASSIGN_OR_RETURN(std::string tmp, WriteTemp(path, data, /*sync=*/true));
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return ErrnoStatus(err, "replacing", path);
    }
    return SyncDir(DirName(path));
  }

  Result<std::vector<FileInfo>> List(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus(errno, "listing", dir);
    std::vector<FileInfo> out;
    while (struct dirent* e = ::readdir(d)) {
      if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
      FileInfo info;
      info.name = e->d_name;
      struct stat st;
      const std::string full = JoinPath(dir, e->d_name);
      if (::stat(full.c_str(), &st) == 0) {
        info.size = static_cast<uint64_t>(st.st_size);
        info.is_dir = S_ISDIR(st.st_mode);
        info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      } else if (errno == ENOENT) {
        continue;  // deleted while listing
      }
      out.push_back(std::move(info));
    }
    ::closedir(d);
    std::sort(out.begin(), out.end(),
              [](const FileInfo& a, const FileInfo& b) { return a.name < b.name; });
    return out;
  }

  Result<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", path);
    FileInfo info;
    info.name = path;
    info.size = static_cast<uint64_t>(st.st_size);
    info.is_dir = S_ISDIR(st.st_mode);
    info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return info;
  }

  Status Delete(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) {
      if (errno == EISDIR || errno == EPERM) {
        if (::rmdir(path.c_str()) == 0) return absl::OkStatus();
      }
      return ErrnoStatus(errno, "deleting", path);
    }
    return absl::OkStatus();
  }

  Status CreateDirs(const std::string& dir) override {
    if (dir.empty()) return absl::OkStatus();
    std::string cur;
    size_t pos = 0;
    while (pos <= dir.size()) {
      size_t next = dir.find('/', pos);
      if (next == std::string::npos) next = dir.size();
      cur = dir.substr(0, next);
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoStatus(errno, "creating directory", cur);
      }
      pos = next + 1;
    }
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
    }
    return absl::OkStatus();
  }

 private:
  Result<std::string> WriteTemp(const std::string& path, std::string_view data, bool sync) {
    const std::string tmp = TempName(path);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "creating", tmp);
    Status s = WriteAll(fd, data.data(), data.size(), tmp);
    if (s.ok() && sync && ::fsync(fd) != 0) s = ErrnoStatus(errno, "syncing", tmp);
    if (::close(fd) != 0 && s.ok()) s = ErrnoStatus(errno, "closing", tmp);
    if (!s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
    return tmp;
  }

  PosixOptions options_;
};

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string path, std::string data) : path_(std::move(path)), data_(std::move(data)) {}
  const std::string& path() const override { return path_; }
  uint64_t size() const override { return data_.size(); }
  const uint8_t* mapped_data() const override {
    return reinterpret_cast<const uint8_t*>(data_.data());
  }
  Status ReadAt(uint64_t offset, size_t n, void* dst) const override {
    if (offset > data_.size() || n > data_.size() - offset) {
      return absl::OutOfRangeError(absl::StrCat("reading ", path_, ": range [", offset, ", ",
                                                offset + n, ") is past the end (size ",
                                                data_.size(), ")"));
    }
    if (n > 0) std::memcpy(dst, data_.data() + offset, n);  // dst may be null for n == 0
    return absl::OkStatus();
  }

 private:
  std::string path_;
  std::string data_;
};

}  // namespace

Result<bool> FileSystem::Exists(const std::string& path) {
  auto st = Stat(path);
  if (st.ok()) return true;
  if (absl::IsNotFound(st.status())) return false;
  return st.status();
}

namespace {

// PosixFs behind LocalPath: what every caller of PosixFileSystem() gets.
class LocalFs final : public FileSystem {
 public:
  explicit LocalFs(PosixOptions options) : fs_(options) {}

  Result<std::shared_ptr<RandomAccessFile>> OpenRead(const std::string& path, const FileOpenOptions& options) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.OpenRead(p, options);
  }
  Result<std::string> ReadFile(const std::string& path) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.ReadFile(p);
  }
  Result<std::unique_ptr<WritableFile>> NewWritable(const std::string& path) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.NewWritable(p);
  }
  Status PutIfAbsent(const std::string& path, std::string_view data) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.PutIfAbsent(p, data);
  }
  Status Put(const std::string& path, std::string_view data) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.Put(p, data);
  }
  Status Replace(const std::string& path, std::string_view data) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.Replace(p, data);
  }
  Result<std::vector<FileInfo>> List(const std::string& dir) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(dir));
    return fs_.List(p);
  }
  Result<FileInfo> Stat(const std::string& path) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.Stat(p);
  }
  Status Delete(const std::string& path) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(path));
    return fs_.Delete(p);
  }
  Status CreateDirs(const std::string& dir) override {
    FW_ASSIGN_OR_RETURN(const std::string p, LocalPath(dir));
    return fs_.CreateDirs(p);
  }

 private:
  PosixFs fs_;
};

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<std::string> LocalPath(std::string_view location) {
  // RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then "://".
  size_t i = 0;
  if (location.empty() || !std::isalpha(static_cast<unsigned char>(location[0]))) return std::string(location);
  while (i < location.size() && (std::isalnum(static_cast<unsigned char>(location[i])) || location[i] == '+' ||
                                 location[i] == '-' || location[i] == '.')) {
    ++i;
  }
  if (location.substr(i, 3) != "://") return std::string(location);
  std::string scheme(location.substr(0, i));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  if (scheme != "file") {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", AsAbsl(location), "': ", scheme,
        ":// locations are not supported (flywheel reads and writes local paths and file:// URIs); "
        "nothing was written"));
  }
  std::string_view rest = location.substr(i + 3);
  if (absl::StartsWith(AsAbsl(rest), "localhost/")) rest.remove_prefix(9);
  if (rest.empty() || rest[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("'", AsAbsl(location),
                                                   "': a file:// URI must name an absolute local path "
                                                   "(file:///path or file://localhost/path)"));
  }
  std::string path;
  for (size_t k = 0; k < rest.size(); ++k) {
    if (rest[k] == '%' && k + 2 < rest.size() && HexValue(rest[k + 1]) >= 0 && HexValue(rest[k + 2]) >= 0) {
      const char c = static_cast<char>(HexValue(rest[k + 1]) * 16 + HexValue(rest[k + 2]));
      if (c == '\0') {
        return absl::InvalidArgumentError(absl::StrCat("'", AsAbsl(location), "': %00 in a file:// URI"));
      }
      path.push_back(c);
      k += 2;
    } else {
      path.push_back(rest[k]);
    }
  }
  return path;
}

std::shared_ptr<FileSystem> PosixFileSystem(const PosixOptions& options) {
  static const std::shared_ptr<FileSystem> synced = std::make_shared<LocalFs>(PosixOptions{true});
  static const std::shared_ptr<FileSystem> unsynced = std::make_shared<LocalFs>(PosixOptions{false});
  return options.sync ? synced : unsynced;
}

std::shared_ptr<RandomAccessFile> NewMemoryFile(std::string path, std::string data) {
  return std::make_shared<MemoryFile>(std::move(path), std::move(data));
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  const bool a_slash = a.back() == '/';
  const bool b_slash = b.front() == '/';
  if (a_slash && b_slash) return absl::StrCat(AsAbsl(a), AsAbsl(b.substr(1)));
  if (a_slash || b_slash) return absl::StrCat(AsAbsl(a), AsAbsl(b));
  return absl::StrCat(AsAbsl(a), "/", AsAbsl(b));
}

}  // namespace flywheel::io
