#include "flywheel/replay/service/insert_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/checksum.h"
#include "flywheel/base/logging.h"
#include "flywheel/format/codec.h"
#include "flywheel/format/internal/coding.h"
#include "flywheel/io/file_system.h"

namespace flywheel::replay {
namespace {

using internal_format::Decoder;
using internal_format::PutBytes;
using internal_format::PutFixed64;
using internal_format::PutVarint;

constexpr char kMagic[] = "FWINSLG1";
constexpr size_t kMagicSize = 8;
constexpr size_t kRecordHeader = 12;  // u32 length + u64 checksum
// A record larger than this is damage, not data (items and chunks are
// bounded by the server's message size, 64 MiB by default).
constexpr uint32_t kMaxRecord = uint32_t{1} << 31;

Status Errno(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat("insert log: ", what, " ", path, ": ", std::strerror(errno)));
}

std::string SegmentPath(const std::string& dir, int64_t n) { return absl::StrCat(dir, "/segment-", n, ".log"); }

// Numbers of the files named <prefix><n><suffix> in `dir`, ascending.
std::vector<int64_t> Numbered(const std::string& dir, std::string_view prefix, std::string_view suffix) {
  std::vector<int64_t> out;
  auto entries = io::PosixFileSystem()->List(dir);
  if (!entries.ok()) return out;
  for (const io::FileInfo& e : *entries) {
    std::string_view name = e.name;
    if (name.size() <= prefix.size() + suffix.size() || name.substr(0, prefix.size()) != prefix ||
        name.substr(name.size() - suffix.size()) != suffix) {
      continue;
    }
    int64_t n;
    if (absl::SimpleAtoi(AsAbsl(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size())), &n) &&
        n >= 0) {
      out.push_back(n);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Appends one record to `out`: `payload` writes its bytes straight after a
// 12-byte header that is filled in afterwards (no copy of the payload).
template <typename Payload>
void AppendRecord(std::string* out, Payload&& payload) {
  const size_t at = out->size();
  out->resize(at + kRecordHeader);
  payload(out);
  const uint32_t len = static_cast<uint32_t>(out->size() - at - kRecordHeader);
  const uint64_t sum = Checksum64(out->data() + at + kRecordHeader, len);
  std::memcpy(out->data() + at, &len, 4);
  std::memcpy(out->data() + at + 4, &sum, 8);
}

void AppendChunkRecord(std::string* out, const Chunk& c) {
  AppendRecord(out, [&](std::string* p) {
    p->push_back('C');
    PutVarint(p, c.key());
    PutBytes(p, c.step_type().ToString());
    PutVarint(p, static_cast<uint64_t>(c.num_steps()));
    PutBytes(p, format::CodecName(c.codec()));
    PutBytes(p, c.compressed());
  });
}

void AppendItemRecord(std::string* out, const std::string& table, const Item& item) {
  AppendRecord(out, [&](std::string* p) {
    p->push_back('I');
    PutBytes(p, table);
    PutVarint(p, item.key);
    uint64_t bits;
    std::memcpy(&bits, &item.priority, 8);
    PutFixed64(p, bits);
    PutVarint(p, item.columns.size());
    for (const auto& col : item.columns) {
      PutBytes(p, col.name);
      PutVarint(p, static_cast<uint64_t>(col.offset));
      PutVarint(p, static_cast<uint64_t>(col.length));
      PutVarint(p, col.chunks.size());
      for (const auto& c : col.chunks) PutVarint(p, c->key());
    }
  });
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("writing", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

Result<InsertLogSync> ParseInsertLogSync(std::string_view text) {
  if (text == "none") return InsertLogSync::kNone;
  if (text == "interval") return InsertLogSync::kInterval;
  if (text == "always") return InsertLogSync::kAlways;
  return absl::InvalidArgumentError(
      absl::StrCat("insert log sync '", AsAbsl(text), "': expected none, interval or always"));
}

InsertLog::InsertLog(std::string dir, InsertLogSync sync, absl::Duration interval)
    : dir_(std::move(dir)), sync_(sync), interval_(interval) {}

Result<std::unique_ptr<InsertLog>> InsertLog::Open(const std::string& dir, InsertLogSync sync,
                                                   absl::Duration sync_interval) {
  if (sync == InsertLogSync::kInterval && sync_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("insert log: the sync interval must be positive");
  }
  FW_RETURN_IF_ERROR(io::PosixFileSystem()->CreateDirs(dir));
  std::unique_ptr<InsertLog> log(new InsertLog(dir, sync, sync_interval));
  const std::vector<int64_t> have = Numbered(dir, "segment-", ".log");
  {
    absl::MutexLock l(&log->mu_);
    FW_RETURN_IF_ERROR(log->OpenSegmentLocked(have.empty() ? 0 : have.back() + 1));
  }
  if (sync == InsertLogSync::kInterval) log->syncer_ = std::thread([p = log.get()] { p->SyncLoop(); });
  return log;
}

InsertLog::~InsertLog() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (syncer_.joinable()) syncer_.join();
  absl::MutexLock l(&mu_);
  if (fd_ >= 0) {
    if (sync_ != InsertLogSync::kNone) ::fdatasync(fd_);
    ::close(fd_);
  }
}

Status InsertLog::OpenSegmentLocked(int64_t n) {
  const std::string path = SegmentPath(dir_, n);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("creating", path);
  if (Status s = WriteAll(fd, std::string(kMagic, kMagicSize), path); !s.ok()) {
    ::close(fd);
    return s;
  }
  if (fd_ >= 0) {
    if (sync_ != InsertLogSync::kNone && ::fdatasync(fd_) != 0) {
      FW_LOG(WARNING) << "insert log: fdatasync failed";
    }
    ::close(fd_);
  }
  fd_ = fd;
  segment_ = n;
  logged_chunks_.clear();
  dirty_ = true;
  return absl::OkStatus();
}

Status InsertLog::Append(const std::string& table, const Item& item) {
  absl::MutexLock l(&mu_);
  if (fd_ < 0) return absl::FailedPreconditionError("insert log: closed");
  FW_RETURN_IF_ERROR(broken_);
  const size_t before = pending_.size();
  for (const auto& col : item.columns) {
    for (const auto& c : col.chunks) {
      if (logged_chunks_.insert(c->key()).second) AppendChunkRecord(&pending_, *c);
    }
  }
  AppendItemRecord(&pending_, table, item);
  bytes_appended_ += static_cast<int64_t>(pending_.size() - before);
  const uint64_t mine = ++queued_seq_;
  while (written_seq_ < mine && broken_.ok()) {
    if (writing_) {
      // Another appender is writing: ours goes in its next round.
      mu_.Await(absl::Condition(+[](bool* w) { return !*w; }, &writing_));
      continue;
    }
    // Lead: write everything queued so far, outside the lock.
    writing_ = true;
    std::string batch;
    batch.swap(pending_);
    const uint64_t upto = queued_seq_;
    const int fd = fd_;
    const std::string path = SegmentPath(dir_, segment_);
    mu_.Unlock();
    Status s = WriteAll(fd, batch, path);
    if (s.ok() && sync_ == InsertLogSync::kAlways && ::fdatasync(fd) != 0) s = Errno("syncing", path);
    mu_.Lock();
    writing_ = false;
    if (!s.ok()) {
      broken_ = s;
      break;
    }
    written_seq_ = upto;
    dirty_ = true;
  }
  FW_RETURN_IF_ERROR(broken_);
  items_appended_++;
  return absl::OkStatus();
}

Result<int64_t> InsertLog::Rotate() {
  absl::MutexLock l(&mu_);
  // Every queued record goes to the segment being closed: wait for the
  // leader, then write what is left (the segment must hold every item
  // acknowledged before this call).
  mu_.Await(absl::Condition(+[](bool* w) { return !*w; }, &writing_));
  FW_RETURN_IF_ERROR(broken_);
  if (!pending_.empty()) {
    Status s = WriteAll(fd_, pending_, SegmentPath(dir_, segment_));
    if (!s.ok()) {
      broken_ = s;
      return s;
    }
    pending_.clear();
    written_seq_ = queued_seq_;
  }
  const int64_t closed = segment_;
  FW_RETURN_IF_ERROR(OpenSegmentLocked(segment_ + 1));
  return closed;
}

Status InsertLog::Covered(int64_t checkpoint_id, int64_t segment) {
  const std::string marker = absl::StrCat(dir_, "/covered-", checkpoint_id);
  FW_RETURN_IF_ERROR(io::PosixFileSystem()->Put(marker, absl::StrCat(segment, "\n")));
  for (int64_t n : Numbered(dir_, "segment-", ".log")) {
    if (n <= segment) ::unlink(SegmentPath(dir_, n).c_str());
  }
  for (int64_t id : Numbered(dir_, "covered-", "")) {
    if (id < checkpoint_id) ::unlink(absl::StrCat(dir_, "/covered-", id).c_str());
  }
  return absl::OkStatus();
}

void InsertLog::SyncLoop() {
  mu_.Lock();
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_);
    if (!dirty_ || fd_ < 0) continue;
    // Sync a duplicate outside the lock: appends go on meanwhile, and a
    // rotation may close fd_ without waiting for us.
    const int fd = ::dup(fd_);
    dirty_ = false;
    mu_.Unlock();
    if (fd >= 0) {
      ::fdatasync(fd);
      ::close(fd);
    }
    mu_.Lock();
  }
  mu_.Unlock();
}

Status InsertLog::ReplaySegment(std::string_view data, const std::string& path, bool last, InsertLogReplay* out_p,
                                const std::function<Status(const std::string& table, Item item)>& fn,
                                bool verify_checksums) {
  InsertLogReplay& out = *out_p;
  if (data.size() < kMagicSize) {
    out.torn_bytes += static_cast<int64_t>(data.size());
    return absl::OkStatus();  // created, then killed before its header was written
  }
  if (std::memcmp(data.data(), kMagic, kMagicSize) != 0) {
    return absl::DataLossError(absl::StrCat("insert log: ", path, " is not an insert log segment"));
  }
  absl::flat_hash_map<uint64_t, ChunkRef> chunks;
  size_t pos = kMagicSize;
  while (pos < data.size()) {
    if (data.size() - pos < kRecordHeader) break;
    uint32_t len = 0;
    uint64_t sum = 0;
    std::memcpy(&len, data.data() + pos, 4);
    std::memcpy(&sum, data.data() + pos + 4, 8);
    if (len == 0 || len > kMaxRecord || len > data.size() - pos - kRecordHeader) break;
    const std::string_view payload(data.data() + pos + kRecordHeader, len);
    if (verify_checksums && Checksum64(payload) != sum) break;
    pos += kRecordHeader + len;
    Decoder d(reinterpret_cast<const uint8_t*>(payload.data()) + 1, payload.size() - 1,
              absl::StrCat("insert log ", path, " record at byte ", pos - kRecordHeader - len));
    if (payload[0] == 'C') {
      uint64_t key = 0, steps = 0;
      std::string type_text, codec_text, stored;
      FW_RETURN_IF_ERROR(d.Varint(&key));
      FW_RETURN_IF_ERROR(d.Bytes(&type_text));
      FW_RETURN_IF_ERROR(d.Varint(&steps));
      FW_RETURN_IF_ERROR(d.Bytes(&codec_text));
      FW_RETURN_IF_ERROR(d.Bytes(&stored));
      FW_ASSIGN_OR_RETURN(format::DataType type, format::DataType::Parse(type_text));
      FW_ASSIGN_OR_RETURN(format::Codec codec, format::ParseCodec(codec_text));
      if (steps > static_cast<uint64_t>(INT64_MAX)) return d.Error("step count out of range");
      FW_ASSIGN_OR_RETURN(ChunkRef c, Chunk::FromCompressed(key, type, static_cast<int64_t>(steps), codec,
                                                            std::move(stored)));
      chunks[key] = std::move(c);
      ++out.chunks;
    } else if (payload[0] == 'I') {
      std::string table;
      Item item;
      uint64_t bits = 0, ncols = 0;
      FW_RETURN_IF_ERROR(d.Bytes(&table));
      FW_RETURN_IF_ERROR(d.Varint(&item.key));
      FW_RETURN_IF_ERROR(d.Fixed64(&bits));
      std::memcpy(&item.priority, &bits, 8);
      FW_RETURN_IF_ERROR(d.Bounded(&ncols, len, "column count"));
      for (uint64_t c = 0; c < ncols; ++c) {
        TrajectoryColumn col;
        uint64_t offset = 0, length = 0, nchunks = 0;
        FW_RETURN_IF_ERROR(d.Bytes(&col.name));
        FW_RETURN_IF_ERROR(d.Varint(&offset));
        FW_RETURN_IF_ERROR(d.Varint(&length));
        FW_RETURN_IF_ERROR(d.Bounded(&nchunks, len, "chunk count"));
        col.offset = static_cast<int64_t>(offset);
        col.length = static_cast<int64_t>(length);
        for (uint64_t k = 0; k < nchunks; ++k) {
          uint64_t key = 0;
          FW_RETURN_IF_ERROR(d.Varint(&key));
          auto it = chunks.find(key);
          if (it == chunks.end()) return d.Error(absl::StrCat("item ", item.key, " names chunk ", key, " not logged before it"));
          col.chunks.push_back(it->second);
        }
        item.columns.push_back(std::move(col));
      }
      ++out.items;
      FW_RETURN_IF_ERROR(fn(table, std::move(item)));
    } else {
      return d.Error("unknown record type");
    }
  }
  if (pos < data.size()) {
    // A torn record ends the segment: a crash cut it short (or the bytes
    // after it are damaged; nothing after a bad record is trusted).
    out.torn_bytes += static_cast<int64_t>(data.size() - pos);
    if (!last) {
      FW_LOG(WARNING) << "insert log: " << path << ": " << data.size() - pos
                      << " bytes after the last good record, in a segment that is not the last";
    }
  }
  return absl::OkStatus();
}

Result<InsertLogReplay> InsertLog::Replay(const std::string& dir, int64_t checkpoint_id,
                                          const std::function<Status(const std::string& table, Item item)>& fn) {
  InsertLogReplay out;
  int64_t after = -1;  // segments <= after are in the checkpoint
  if (checkpoint_id >= 0) {
    auto text = io::PosixFileSystem()->ReadFile(absl::StrCat(dir, "/covered-", checkpoint_id));
    if (text.ok()) {
      std::string_view t = *text;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
      if (!absl::SimpleAtoi(AsAbsl(t), &after)) {
        return absl::DataLossError(absl::StrCat("insert log: ", dir, "/covered-", checkpoint_id, " is damaged"));
      }
    }
    // No marker: the checkpoint predates the log (or the log was turned on
    // since); every segment is replayed and items it already holds are skipped.
  }
  const std::vector<int64_t> segments = Numbered(dir, "segment-", ".log");
  for (size_t si = 0; si < segments.size(); ++si) {
    const int64_t n = segments[si];
    if (n <= after) continue;
    const std::string path = SegmentPath(dir, n);
    Result<std::string> read = io::PosixFileSystem()->ReadFile(path);
    if (!read.ok()) return read.status();
    const std::string& data = *read;
    ++out.segments;
    FW_RETURN_IF_ERROR(ReplaySegment(data, path, si + 1 == segments.size(), &out, fn));
  }
  return out;
}

}  // namespace flywheel::replay
