#include "flywheel/loader/page_source.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <list>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/base/logging.h"
#include "flywheel/base/rng.h"

#ifdef FLYWHEEL_HAVE_LIBURING
#include <liburing.h>
#endif

namespace flywheel::loader {
namespace {

int64_t NanosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

std::string PageName(const format::ShardReader& r, int column, int page) {
  return absl::StrCat("reading ", r.path(), " column '", r.schema().fields[column].name, "' page ",
                      page);
}

// One read of a batch: `size` bytes at `offset` of `fd` into `dst`.
// `result` receives the bytes read or -errno.
struct Read {
  int fd;
  uint64_t offset;
  uint32_t size;
  uint8_t* dst;
  int64_t result = 0;
};

#ifdef FLYWHEEL_HAVE_LIBURING
// An io_uring instance owned by one thread (a ring is not safe for concurrent
// submitters). Each ReadAll drains every read it submitted before returning,
// so nothing is in flight between calls and the destination buffers may be
// freed as soon as it returns.
class Ring {
 public:
  // The calling thread's ring, or nullptr when io_uring cannot be set up.
  // A ring inherited through fork() is not used: the child makes its own.
  static Ring* ForThisThread(unsigned entries) {
    thread_local std::unique_ptr<Ring> ring;
    thread_local pid_t failed_pid = 0;
    const pid_t pid = ::getpid();
    if (ring && ring->pid_ == pid) return ring.get();
    if (failed_pid == pid) return nullptr;
    ring.reset();
    auto r = std::unique_ptr<Ring>(new Ring);
    const int rc = io_uring_queue_init(entries, &r->ring_, 0);
    if (rc < 0) {
      failed_pid = pid;
      static std::once_flag logged;
      std::call_once(logged, [rc] {
        FW_LOG(WARNING) << "loader: io_uring unavailable (io_uring_queue_init: "
                        << absl::ErrnoToStatus(-rc, "").message()
                        << "); reading pages with pread";
      });
      return nullptr;
    }
    r->initialized_ = true;
    r->pid_ = pid;
    r->entries_ = entries;
    ring = std::move(r);
    return ring.get();
  }

  ~Ring() {
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  // Submits every read (at most `entries` in flight) and waits for all.
  // Per-read failures land in Read::result; the Status is a failure of the
  // ring itself, returned only once nothing is in flight.
  Status ReadAll(std::span<Read> reads) {
    size_t next = 0, inflight = 0;
    Status failed;
    while ((next < reads.size() && failed.ok()) || inflight > 0) {
      while (failed.ok() && next < reads.size() && inflight < entries_) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;
        Read& r = reads[next];
        io_uring_prep_read(sqe, r.fd, r.dst, r.size, r.offset);
        io_uring_sqe_set_data64(sqe, next);
        ++next;
        ++inflight;
      }
      int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // Nothing new went in; wait for what is in flight, then report.
        if (failed.ok()) failed = absl::ErrnoToStatus(-rc, "io_uring_submit");
        if (inflight == 0) break;
        io_uring_cqe* cqe = nullptr;
        do {
          rc = io_uring_wait_cqe(&ring_, &cqe);
        } while (rc == -EINTR);
        if (rc < 0) return failed;  // cannot happen with a live ring
      }
      io_uring_cqe* cqe = nullptr;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        reads[io_uring_cqe_get_data64(cqe)].result = cqe->res;
        ++seen;
      }
      io_uring_cq_advance(&ring_, seen);
      inflight -= seen;
    }
    return failed;
  }

 private:
  Ring() = default;
  io_uring ring_{};
  bool initialized_ = false;
  pid_t pid_ = 0;
  unsigned entries_ = 0;
};
#endif  // FLYWHEEL_HAVE_LIBURING

// Finishes a read the ring left short (rare for regular files) with pread.
int64_t FinishShortRead(const Read& r) {
  int64_t done = r.result;
  while (done < static_cast<int64_t>(r.size)) {
    const ssize_t n = ::pread(r.fd, r.dst + done, r.size - static_cast<size_t>(done),
                              static_cast<off_t>(r.offset + static_cast<uint64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += n;
  }
  return done;
}

struct Key {
  const format::ShardReader* reader;
  int column;
  int page;
  bool operator==(const Key& o) const {
    return reader == o.reader && column == o.column && page == o.page;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    return static_cast<size_t>(Mix64(reinterpret_cast<uintptr_t>(k.reader) ^
                                     (static_cast<uint64_t>(k.column) << 32) ^
                                     static_cast<uint32_t>(k.page)));
  }
};

class CachingPageSource final : public PageSource {
 public:
  explicit CachingPageSource(const PageSourceOptions& options)
      : capacity_(options.cache_bytes),
        uring_(options.io_uring && options.cache_bytes > 0),
        entries_(std::clamp(options.ring_entries, 1u, 4096u)),
        simulate_unavailable_(options.simulate_uring_unavailable) {}

  Result<format::Column> Page(const format::ShardReader& reader, int column, int page) override {
    const Key key{&reader, column, page};
    const auto& info = reader.pages(column)[page];
    if (info.codec == format::Codec::kNone && reader.mapped()) {
      // A view into the mapped file: nothing to cache, and no lock to take
      // (row shuffles touch a new page for nearly every row).
      const auto t0 = std::chrono::steady_clock::now();
      FW_ASSIGN_OR_RETURN(format::Column col, reader.ReadPage(column, page));
      io_nanos_.fetch_add(NanosSince(t0), std::memory_order_relaxed);
      views_.fetch_add(1, std::memory_order_relaxed);
      return col;
    }
    if (capacity_ > 0) {
      absl::MutexLock lock(&mu_);
      // Another thread's Prefetch is reading this page: wait for it rather
      // than decode it twice (if that read failed, read it here).
      if (inflight_.count(key)) {
        auto done = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return inflight_.count(key) == 0;
        };
        mu_.Await(absl::Condition(&done));
      }
      auto it = index_.find(key);
      if (it != index_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        hits_.fetch_add(1, std::memory_order_relaxed);
        return it->second->column;
      }
    }
    // Read and decode outside the lock; two threads missing the same page
    // both decode it (rare: batches are spread over pages) and the second
    // insert is dropped.
    auto t0 = std::chrono::steady_clock::now();
    FW_ASSIGN_OR_RETURN(format::Buffer stored, reader.ReadStoredPage(column, page));
    io_nanos_.fetch_add(NanosSince(t0), std::memory_order_relaxed);
    t0 = std::chrono::steady_clock::now();
    FW_ASSIGN_OR_RETURN(format::Column col, reader.DecodePage(column, page, std::move(stored)));
    decode_nanos_.fetch_add(NanosSince(t0), std::memory_order_relaxed);
    const int64_t bytes = static_cast<int64_t>(info.uncompressed_size());
    fetched_.fetch_add(1, std::memory_order_relaxed);
    bytes_fetched_.fetch_add(bytes, std::memory_order_relaxed);
    if (capacity_ > 0 && bytes <= capacity_) {
      absl::MutexLock lock(&mu_);
      InsertLocked(key, col, bytes);
    }
    return col;
  }

  bool prefetches() const override { return uring_; }

  Status Prefetch(std::span<const PageRef> pages, size_t* failed) override {
    (void)failed;
    if (!uring_ || pages.empty()) return absl::OkStatus();
#ifdef FLYWHEEL_HAVE_LIBURING
    Ring* ring = simulate_unavailable_ ? nullptr : Ring::ForThisThread(entries_);
#else
    void* ring = nullptr;
#endif
    if (ring == nullptr) {
      if (simulate_unavailable_) {
        static std::once_flag logged;
        std::call_once(logged, [] {
          FW_LOG(WARNING) << "loader: io_uring unavailable (simulated); reading pages with pread";
        });
      }
      uring_unavailable_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
#ifdef FLYWHEEL_HAVE_LIBURING
    // 1. What to read: not cached (cached ones move to the front so they
    // survive until the walk), not views, readable by fd, within budget.
    struct Pending {
      size_t ref;
      std::shared_ptr<uint64_t[]> buf;
    };
    std::vector<Pending> todo;
    std::vector<Read> reads;
    {
      int64_t budget = capacity_ / 2;
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < pages.size(); ++i) {
        const PageRef& p = pages[i];
        if (i > 0 && p.reader == pages[i - 1].reader && p.column == pages[i - 1].column &&
            p.page == pages[i - 1].page) {
          continue;
        }
        const auto& info = p.reader->pages(p.column)[p.page];
        if ((info.codec == format::Codec::kNone && p.reader->mapped()) || p.reader->fd() < 0) {
          continue;
        }
        const Key key{p.reader, p.column, p.page};
        auto it = index_.find(key);
        if (it != index_.end()) {
          lru_.splice(lru_.begin(), lru_, it->second);
          continue;
        }
        // Being read by another thread's Prefetch; Page() waits for it.
        if (inflight_.count(key)) continue;
        const auto bytes = static_cast<int64_t>(info.uncompressed_size());
        if (bytes > budget || info.stored_size > UINT32_MAX) continue;
        budget -= bytes;
        inflight_.insert(key);
        todo.push_back(Pending{i, nullptr});
      }
    }
    if (todo.empty()) return absl::OkStatus();
    // However this call ends, its claims are released (after the inserts
    // below), waking Page() calls waiting on them.
    struct Release {
      CachingPageSource* self;
      std::span<const PageRef> pages;
      const std::vector<Pending>& todo;
      ~Release() {
        absl::MutexLock lock(&self->mu_);
        for (const Pending& t : todo) {
          self->inflight_.erase(Key{pages[t.ref].reader, pages[t.ref].column, pages[t.ref].page});
        }
      }
    } release{this, pages, todo};
    reads.reserve(todo.size());
    for (Pending& t : todo) {
      const PageRef& p = pages[t.ref];
      const auto& info = p.reader->pages(p.column)[p.page];
      // 8-byte aligned, as DecodePage requires.
      t.buf.reset(new uint64_t[(info.stored_size + 7) / 8]);
      reads.push_back(Read{p.reader->fd(), info.offset, static_cast<uint32_t>(info.stored_size),
                           reinterpret_cast<uint8_t*>(t.buf.get())});
    }
    // 2. One batch of reads.
    auto t0 = std::chrono::steady_clock::now();
    const Status ring_status = ring->ReadAll(reads);
    if (!ring_status.ok()) {
      // The ring itself failed (not a read): leave the pages to Page().
      static std::once_flag logged;
      std::call_once(logged, [&] {
        FW_LOG(WARNING) << "loader: io_uring batch failed (" << ring_status.message()
                        << "); reading those pages with pread";
      });
      uring_unavailable_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    for (Read& r : reads) {
      if (r.result >= 0 && r.result < static_cast<int64_t>(r.size)) r.result = FinishShortRead(r);
    }
    io_nanos_.fetch_add(NanosSince(t0), std::memory_order_relaxed);
    batches_.fetch_add(1, std::memory_order_relaxed);
    // 3. Decode, then cache what decoded.
    std::vector<std::tuple<Key, format::Column, int64_t>> done;
    Status status;
    t0 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < todo.size() && status.ok(); ++k) {
      const PageRef& p = pages[todo[k].ref];
      const auto& info = p.reader->pages(p.column)[p.page];
      const Read& r = reads[k];
      if (r.result < 0) {
        status = absl::ErrnoToStatus(static_cast<int>(-r.result),
                                     absl::StrCat(PageName(*p.reader, p.column, p.page)));
      } else if (r.result < static_cast<int64_t>(r.size)) {
        status = absl::DataLossError(absl::StrCat(PageName(*p.reader, p.column, p.page),
                                                  ": short read, got ", r.result, " of ", r.size,
                                                  " bytes (file truncated?)"));
      } else {
        format::Buffer stored{reinterpret_cast<const uint8_t*>(todo[k].buf.get()), info.stored_size,
                              todo[k].buf};
        auto col = p.reader->DecodePage(p.column, p.page, std::move(stored));
        if (col.ok()) {
          done.emplace_back(Key{p.reader, p.column, p.page}, std::move(*col),
                            static_cast<int64_t>(info.uncompressed_size()));
          continue;
        }
        status = col.status();
      }
      if (failed) *failed = todo[k].ref;
    }
    decode_nanos_.fetch_add(NanosSince(t0), std::memory_order_relaxed);
    int64_t bytes = 0;
    for (const auto& d : done) bytes += std::get<2>(d);
    fetched_.fetch_add(static_cast<int64_t>(done.size()), std::memory_order_relaxed);
    batched_.fetch_add(static_cast<int64_t>(done.size()), std::memory_order_relaxed);
    bytes_fetched_.fetch_add(bytes, std::memory_order_relaxed);
    {
      absl::MutexLock lock(&mu_);
      for (auto& [key, col, b] : done) InsertLocked(key, std::move(col), b);
    }
    return status;
#else
    return absl::OkStatus();
#endif
  }

  PageSourceStats stats() const override {
    PageSourceStats s;
    s.fetched = fetched_.load(std::memory_order_relaxed);
    s.hits = hits_.load(std::memory_order_relaxed);
    s.bytes_fetched = bytes_fetched_.load(std::memory_order_relaxed);
    s.io_nanos = io_nanos_.load(std::memory_order_relaxed);
    s.decode_nanos = decode_nanos_.load(std::memory_order_relaxed);
    s.views = views_.load(std::memory_order_relaxed);
    s.batched = batched_.load(std::memory_order_relaxed);
    s.batches = batches_.load(std::memory_order_relaxed);
    s.uring_unavailable = uring_unavailable_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  struct Entry {
    Key key;
    format::Column column;
    int64_t bytes;
  };

  void InsertLocked(const Key& key, format::Column col, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (bytes > capacity_ || index_.find(key) != index_.end()) return;
    lru_.push_front(Entry{key, std::move(col), bytes});
    index_.emplace(key, lru_.begin());
    size_ += bytes;
    while (size_ > capacity_ && !lru_.empty()) {
      size_ -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
  }

  const int64_t capacity_;
  const bool uring_;
  const unsigned entries_;
  const bool simulate_unavailable_;
  absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_ ABSL_GUARDED_BY(mu_);
  // Pages a Prefetch call is reading.
  std::unordered_set<Key, KeyHash> inflight_ ABSL_GUARDED_BY(mu_);
  int64_t size_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> fetched_{0}, hits_{0}, bytes_fetched_{0}, io_nanos_{0}, decode_nanos_{0},
      views_{0}, batched_{0}, batches_{0}, uring_unavailable_{0};
};

}  // namespace

std::unique_ptr<PageSource> NewPageSource(const PageSourceOptions& options) {
  return std::make_unique<CachingPageSource>(options);
}

std::unique_ptr<PageSource> NewCachingPageSource(int64_t cache_bytes) {
  PageSourceOptions o;
  o.cache_bytes = cache_bytes;
  return NewPageSource(o);
}

bool IoUringAvailable() {
#ifdef FLYWHEEL_HAVE_LIBURING
  static const bool available = [] {
    io_uring ring;
    if (io_uring_queue_init(2, &ring, 0) < 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }();
  return available;
#else
  return false;
#endif
}

}  // namespace flywheel::loader
