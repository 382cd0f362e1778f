#include "flywheel/base/trace.h"
#include "flywheel/base/waits.h"
#include "flywheel/loader/loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <numeric>
#include <thread>

#include <sched.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/base/metrics.h"
#include "flywheel/base/rng.h"
#include "flywheel/base/thread_pool.h"
#include "flywheel/loader/internal/drop_rows.h"
#include "flywheel/loader/internal/loader_metrics.h"
#include "flywheel/loader/internal/slot_pool.h"
#include "flywheel/loader/mixture.h"
#include "flywheel/loader/page_source.h"
#include "flywheel/loader/partition.h"

namespace flywheel::loader {

using format::Column;
using format::DataType;
using internal_loader::DropRows;
using internal_loader::LoaderMetrics;
using internal_loader::Slot;
using internal_loader::SlotPool;

format::Column BatchColumn::View(int64_t rows, const std::shared_ptr<const void>& owner) const {
  if (nested != nullptr) return nested->length == rows ? *nested : nested->Slice(0, rows);
  format::Column c;
  c.type = type;
  c.length = rows;
  c.null_count = null_count;
  c.values = format::Buffer{values, values_size, owner};
  if (offsets != nullptr) {
    c.offsets = format::Buffer{reinterpret_cast<const uint8_t*>(offsets), static_cast<size_t>(rows + 1) * sizeof(int64_t),
                               owner};
  }
  if (validity != nullptr) c.validity = format::Buffer{validity, static_cast<size_t>((rows + 7) / 8), owner};
  return c;
}

const BatchColumn* Batch::column(std::string_view name) const {
  for (const auto& c : columns) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Status LoaderOptions::Validate() const {
  PartitionOptions p{batch_size, rank, world_size, drop_last};
  FW_RETURN_IF_ERROR_CTX(p.Validate(), "loader options");
  if (shuffle && shuffle_mode == ShuffleMode::kBlock) {
    if (block_rows < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader options: block_rows must be >= 0, got ", block_rows));
    }
    OrderOptions o{shuffle, shuffle_mode, block_rows == 0 ? 1 : block_rows, window_blocks};
    FW_RETURN_IF_ERROR_CTX(o.Validate(), "loader options");
  } else if (shuffle_mode != ShuffleMode::kRow && shuffle_mode != ShuffleMode::kBlock) {
    return absl::InvalidArgumentError("loader options: unknown shuffle_mode");
  }
  if (epoch < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("loader options: epoch must be >= 0, got ", epoch));
  if (num_threads < 1 || num_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader options: num_threads must be in [1, 1024], got ", num_threads));
  }
  if (prefetch_bytes < (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader options: prefetch_bytes must be >= 1 MiB, got ", prefetch_bytes));
  }
  if (samples_per_epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader options: samples_per_epoch must be >= 0, got ", samples_per_epoch));
  }
  if (consumer_spin_us < -1 || consumer_spin_us > 1'000'000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loader options: consumer_spin_us must be -1 (auto) or in [0, 1000000], got ",
        consumer_spin_us));
  }
  if (on_error != OnError::kFail && on_error != OnError::kSkip) {
    return absl::InvalidArgumentError("loader options: unknown on_error");
  }
  for (size_t i = 0; i < images.size(); ++i) {
    if (images[i].column.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("loader options: images[", i, "] has no column name"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (images[j].column == images[i].column) {
        return absl::InvalidArgumentError(
            absl::StrCat("loader options: images: column '", images[i].column, "' is listed twice"));
      }
    }
    FW_RETURN_IF_ERROR_CTX(images[i].options.Validate(), "loader options: images column '",
                           images[i].column, "'");
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (columns[i] == columns[j]) {
        return absl::InvalidArgumentError(
            absl::StrCat("loader options: column '", columns[i], "' is listed twice"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

int64_t NanosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Where the consumer (or the issuer) stands: the next global batch starts at
// `start` of `epoch`; `drawn` = mixture draws per table before it.
struct Cursor {
  int64_t epoch = 0;
  int64_t start = 0;
  std::vector<int64_t> drawn;
};

// One planned result of Next(): a batch or the end of an epoch.
struct Ticket {
  bool end_of_epoch = false;
  Cursor at;            // the global batch this ticket is cut from
  PositionRange range;  // this rank's positions in it
  Cursor next;          // the cursor after the ticket
  uint64_t generation = 0;
  std::shared_ptr<Slot> slot;
  // Set once by the worker, under the loader's mutex.
  bool done = false;
  Status status;
  // `done`, readable without the mutex (set just after it, still under it).
  std::atomic<bool> finished{false};
};

struct OutColumn {
  std::string name;
  DataType type;
  bool nullable = false;
  size_t width = 0;      // fixed-width bytes per row; 0 for variable-length
  size_t elem_size = 1;  // variable-length: bytes per element of values
  // An image column (index into LoaderOptions::images), or -1: gathered as
  // `type` (binary), handed out as `out_type` (out_width bytes per row).
  int image = -1;
  DataType out_type;
  size_t out_width = 0;
};

// The key of a row's random transforms: a pure function of where the row is
// in the data, not of when or by whom it is read.
uint64_t RowKey(uint64_t seed, int64_t epoch, int32_t table, int64_t index) {
  return Mix64(Mix64(Mix64(seed) ^ static_cast<uint64_t>(epoch)) ^ (static_cast<uint64_t>(table) << 48) ^
               static_cast<uint64_t>(index));
}

class LoaderImpl final : public Loader {
 public:
  ~LoaderImpl() override {
    Cancel();
    pool_.reset();  // finishes (quickly: cancelled) and joins the workers
    metrics_.reset();  // its collector reads stats(): gone before the members it reads
  }

  static Result<std::unique_ptr<Loader>> Make(
      std::vector<std::shared_ptr<const table::Table>> tables, const LoaderOptions& options);

  Result<std::shared_ptr<const Batch>> Next(absl::Duration timeout) override;
  LoaderState state() const override;
  Status Restore(const LoaderState& state) override;
  Status SetEpoch(int64_t epoch) override;
  void Cancel() override {
    cancelled_.store(true, std::memory_order_release);
    absl::MutexLock lock(&mu_);  // wakes waiters (their conditions read cancelled_)
  }
  LoaderStats stats() const override;
  const format::Schema& schema() const override { return schema_; }
  int64_t batches_per_epoch() const override { return BatchesPerEpoch(served_, part_); }
  int64_t epoch_size() const override { return epoch_size_; }

 private:
  LoaderImpl() = default;

  LoaderState Identity() const;
  void ResetLocked(Cursor at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IssueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunTicket(const std::shared_ptr<Ticket>& t);
  Status Fill(const Ticket& t, Slot* slot);
  // Where each row of column c is stored, in `sorted` (storage) order:
  // resolved once per batch and column for Prefetch and Gather.
  struct RowPlace {
    const table::ColumnSource* src;  // the shard column, or the fill (src->reader null)
    int table;
    int fragment;
    int page;       // shard rows only
    int64_t local;  // row within the page
  };
  Status Place(int c, const std::vector<int64_t>& sorted, const std::vector<int32_t>& tbl,
               const std::vector<table::RowAddress>& addr, std::vector<RowPlace>* places);
  Status Gather(int c, const std::vector<int64_t>& sorted, const std::vector<RowPlace>& places, Slot* slot);
  // Hands the pages Gather(c, ...) will read to the page source at once.
  Status Prefetch(const std::vector<RowPlace>& places);
  // "table <uri> version <v> fragment <id>", for errors about a page.
  std::string PageContext(int table, int fragment) const;
  Result<const table::ColumnSource*> Source(int t, int fragment, int c);
  // Decodes the batch's image columns in place of their bytes (and drops
  // failed rows under OnError::kSkip).
  Status TransformImages(const Ticket& t, Slot* slot);
  Result<std::unique_ptr<ImagePipeline>> AcquirePipeline(int image);
  void ReleasePipeline(int image, std::unique_ptr<ImagePipeline> p);
  bool Stale(const Ticket& t) const {
    return cancelled_.load(std::memory_order_acquire) ||
           t.generation != generation_.load(std::memory_order_acquire);
  }

  // Immutable after Make.
  std::vector<std::shared_ptr<const table::Table>> tables_;
  LoaderOptions options_;
  PartitionOptions part_;
  std::vector<OrderOptions> orders_;  // per table
  std::vector<int64_t> rows_;         // live rows per table
  std::optional<Mixture> mixture_;
  std::vector<double> weights_;  // as recorded in the state (mixtures)
  int64_t epoch_size_ = 0;
  int64_t served_ = 0;
  format::Schema schema_;
  std::vector<OutColumn> out_;
  size_t readahead_ = 1;
  int64_t spin_us_ = 0;  // LoaderOptions::consumer_spin_us, resolved
  std::unique_ptr<PageSource> pages_;
  std::shared_ptr<SlotPool> slots_;

  // Column sources, resolved on first use: sources_[t][fragment][c].
  absl::Mutex sources_mu_;
  std::vector<std::vector<std::vector<std::unique_ptr<table::ColumnSource>>>> sources_
      ABSL_GUARDED_BY(sources_mu_);

  std::atomic<bool> cancelled_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> assemble_nanos_{0};
  std::atomic<int64_t> transform_nanos_{0};
  std::atomic<int64_t> indexed_images_{0};
  // Idle image pipelines (TurboJPEG handles + scratch) per images entry.
  absl::Mutex pipes_mu_;
  std::vector<std::vector<std::unique_ptr<ImagePipeline>>> pipes_ ABSL_GUARDED_BY(pipes_mu_);

  mutable absl::Mutex mu_;
  Cursor consumer_ ABSL_GUARDED_BY(mu_);         // after the batches handed out
  Cursor issue_ ABSL_GUARDED_BY(mu_);            // the next ticket to plan
  bool issue_end_ ABSL_GUARDED_BY(mu_) = false;  // issue_ is at an epoch's end marker
  std::deque<std::shared_ptr<Ticket>> tickets_ ABSL_GUARDED_BY(mu_);
  LoaderStats stats_ ABSL_GUARDED_BY(mu_);
  // When the read-ahead last became full with nothing left to do (idle time).
  std::optional<std::chrono::steady_clock::time_point> idle_since_ ABSL_GUARDED_BY(mu_);
  // When Next() started waiting for the batch it waits for now (stats()
  // counts a wait in progress, so a stuck trainer shows before it ends).
  std::optional<std::chrono::steady_clock::time_point> consumer_waiting_since_ ABSL_GUARDED_BY(mu_);

  // Process-wide series (base/metrics.h), labelled with the first table's
  // uri; null until Make has finished.
  std::unique_ptr<LoaderMetrics> metrics_;

  std::unique_ptr<ThreadPool> pool_;  // last: destroyed (joined) first
};

Result<std::unique_ptr<Loader>> LoaderImpl::Make(
    std::vector<std::shared_ptr<const table::Table>> tables, const LoaderOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  if (tables.empty()) return absl::InvalidArgumentError("loader: no tables");
  for (const auto& t : tables) {
    if (!t) return absl::InvalidArgumentError("loader: a table handle is null");
  }
  const bool mix = tables.size() > 1;
  if (!mix && options.mixture_weights.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loader options: ", options.mixture_weights.size(), " mixture weights for one table"));
  }
  if (mix && !options.mixture_weights.empty() && options.mixture_weights.size() != tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader options: ", options.mixture_weights.size(), " mixture weights for ",
                     tables.size(), " tables"));
  }
  if (!mix && options.samples_per_epoch != 0) {
    return absl::InvalidArgumentError(
        "loader options: samples_per_epoch applies to mixtures of several tables only");
  }
  std::unique_ptr<LoaderImpl> l(new LoaderImpl());
  l->tables_ = std::move(tables);
  l->options_ = options;
  l->part_ =
      PartitionOptions{options.batch_size, options.rank, options.world_size, options.drop_last};

  // Output columns: the first table's (or the requested ones), present with
  // the same type in every table.
  const format::Schema& first = l->tables_[0]->schema();
  std::vector<std::string> names = options.columns;
  if (names.empty()) {
    for (const auto& f : first.fields) names.push_back(f.name);
  }
  if (names.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("loader: table ", l->tables_[0]->uri(), " has no columns"));
  for (const auto& name : names) {
    OutColumn oc;
    oc.name = name;
    for (size_t t = 0; t < l->tables_.size(); ++t) {
      const auto& tb = *l->tables_[t];
      const int i = tb.schema().FieldIndex(name);
      if (i < 0) {
        return absl::NotFoundError(absl::StrCat("loader: table ", tb.uri(), " version ",
                                                tb.version(), " has no column '", name,
                                                "' (columns: ", tb.schema().ToString(), ")"));
      }
      const format::Field& f = tb.schema().fields[i];
      if (t == 0) {
        oc.type = f.type;
      } else if (!(f.type == oc.type)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "loader: column '", name, "' is ", f.type.ToString(), " in table ", tb.uri(), " but ",
            oc.type.ToString(), " in table ", l->tables_[0]->uri()));
      }
      oc.nullable |= f.nullable;
    }
    if (oc.type.is_fixed_width()) {
      oc.width = oc.type.fixed_width();
    } else {
      oc.elem_size = oc.type.id == format::TypeId::kList ? format::ScalarSize(oc.type.elem) : 1;
    }
    l->schema_.fields.push_back(format::Field{oc.name, oc.type, oc.nullable, -1, ""});
    l->out_.push_back(std::move(oc));
  }

  // Image columns: gathered as bytes, handed out decoded.
  for (size_t k = 0; k < options.images.size(); ++k) {
    const ImageColumn& ic = options.images[k];
    size_t c = 0;
    while (c < l->out_.size() && l->out_[c].name != ic.column) ++c;
    if (c == l->out_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("loader options: images: column '", ic.column,
                                                     "' is not one of the columns loaded"));
    }
    OutColumn& oc = l->out_[c];
    if (oc.type.id != format::TypeId::kBinary) {
      return absl::InvalidArgumentError(absl::StrCat("loader options: images: column '", ic.column, "' is ",
                                                     oc.type.ToString(),
                                                     "; images are decoded from binary columns of JPEG bytes"));
    }
    const auto& io = ic.options;
    const format::TypeId px = io.dtype == PixelType::kFloat32 ? format::TypeId::kFloat32 : format::TypeId::kUInt8;
    oc.image = static_cast<int>(k);
    oc.out_type = io.layout == ImageLayout::kCHW ? DataType::Tensor(px, {3, io.height, io.width})
                                                 : DataType::Tensor(px, {io.height, io.width, 3});
    oc.out_width = io.OutputBytes();
    l->schema_.fields[c].type = oc.out_type;
    l->schema_.fields[c].nullable = false;
  }
  {
    absl::MutexLock lock(&l->pipes_mu_);
    l->pipes_.resize(options.images.size());
  }

  // Orders (block size resolved per table), mixture, epoch size.
  for (size_t t = 0; t < l->tables_.size(); ++t) {
    const auto& tb = *l->tables_[t];
    l->rows_.push_back(tb.num_rows());
    OrderOptions o{options.shuffle, options.shuffle_mode, 0, options.window_blocks};
    if (options.shuffle && options.shuffle_mode == ShuffleMode::kBlock) {
      o.block_rows = options.block_rows;
      if (o.block_rows == 0) {
        o.block_rows = 1024;
        if (!tb.manifest().fragments.empty()) {
          FW_ASSIGN_OR_RETURN_CTX(auto src, tb.OpenColumn(0, names[0]), "loader: table ", tb.uri());
          if (src.reader && !src.reader->pages(src.column).empty()) {
            o.block_rows = std::max<int64_t>(1, src.reader->pages(src.column)[0].num_rows);
          }
        }
      }
    } else {
      // No shuffle (the mode is then irrelevant) or row shuffle.
      if (!options.shuffle) o.mode = ShuffleMode::kRow;
      o.block_rows = 0;
      o.window_blocks = 0;
    }
    l->orders_.push_back(o);
  }
  if (mix) {
    l->weights_ = options.mixture_weights;
    if (l->weights_.empty()) {
      for (int64_t r : l->rows_) l->weights_.push_back(static_cast<double>(r));
    }
    for (size_t t = 0; t < l->tables_.size(); ++t) {
      if (l->rows_[t] == 0) {
        return absl::InvalidArgumentError(absl::StrCat("loader: table ", l->tables_[t]->uri(),
                                                       " version ", l->tables_[t]->version(),
                                                       " has no rows to mix"));
      }
    }
    FW_ASSIGN_OR_RETURN_CTX(auto m, Mixture::Create(l->weights_, options.seed),
                            "loader options: mixture_weights");
    l->mixture_ = std::move(m);
    l->epoch_size_ = options.samples_per_epoch;
    if (l->epoch_size_ == 0)
      l->epoch_size_ = std::accumulate(l->rows_.begin(), l->rows_.end(), int64_t{0});
  } else {
    l->epoch_size_ = l->rows_[0];
  }
  l->served_ = ServedPositions(l->epoch_size_, l->part_);

  // Memory: half of the budget for batches filled ahead, half for pages.
  int64_t slot_bytes = 0;
  for (const auto& oc : l->out_) {
    slot_bytes += static_cast<int64_t>(oc.out_width) * options.batch_size;
    if (oc.width) {
      slot_bytes += static_cast<int64_t>(oc.width) * options.batch_size;
    } else {
      // Average row size of the first table's first page, plus offsets.
      int64_t per_row = 16;
      const auto& tb = *l->tables_[0];
      if (!tb.manifest().fragments.empty()) {
        auto src = tb.OpenColumn(0, oc.name);
        if (src.ok() && src->reader && !src->reader->pages(src->column).empty()) {
          const auto& pi = src->reader->pages(src->column)[0];
          per_row = static_cast<int64_t>(pi.values_size) / std::max<int64_t>(1, pi.num_rows) + 8;
        }
      }
      slot_bytes += per_row * options.batch_size;
    }
  }
  slot_bytes = std::max<int64_t>(slot_bytes, 1);
  // Deeper than a few batches per thread only holds memory: the workers
  // cannot fill more at once, and a slow consumer leaves them idle anyway.
  const int64_t depth_cap = std::max(4, 4 * options.num_threads);
  l->readahead_ = static_cast<size_t>(
      std::clamp<int64_t>(options.prefetch_bytes / 2 / slot_bytes, 1, depth_cap));
  l->spin_us_ = options.consumer_spin_us;
  if (l->spin_us_ < 0) {
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    l->spin_us_ = cpus > options.num_threads ? 200 : 0;
  }
  PageSourceOptions page_options;
  page_options.cache_bytes = options.prefetch_bytes / 2;
  page_options.io_uring = options.use_io_uring;
  l->pages_ = NewPageSource(page_options);
  l->slots_ = std::make_shared<SlotPool>(l->out_.size());
  {
    absl::MutexLock lock(&l->sources_mu_);
    l->sources_.resize(l->tables_.size());
    for (size_t t = 0; t < l->tables_.size(); ++t) {
      l->sources_[t].resize(l->tables_[t]->manifest().fragments.size());
      for (auto& f : l->sources_[t]) f.resize(l->out_.size());
    }
  }
  l->metrics_ = std::make_unique<LoaderMetrics>(l->tables_[0]->uri(), [raw = l.get()] { return raw->stats(); });
  l->pool_ = std::make_unique<ThreadPool>(options.num_threads);
  Cursor start;
  start.epoch = options.epoch;
  if (mix) start.drawn.assign(l->tables_.size(), 0);
  {
    absl::MutexLock lock(&l->mu_);
    l->stats_.readahead_batches = static_cast<int64_t>(l->readahead_);
    l->ResetLocked(std::move(start));
  }
  return std::unique_ptr<Loader>(std::move(l));
}

void LoaderImpl::ResetLocked(Cursor at) {
  generation_.fetch_add(1, std::memory_order_acq_rel);
  tickets_.clear();  // in-flight workers notice the generation and stop early
  consumer_ = at;
  issue_ = std::move(at);
  issue_end_ = false;
  IssueLocked();
}

void LoaderImpl::IssueLocked() {
  if (cancelled_.load(std::memory_order_acquire)) return;
  const uint64_t gen = generation_.load(std::memory_order_acquire);
  bool issued = false;
  while (tickets_.size() < readahead_) {
    auto t = std::make_shared<Ticket>();
    t->generation = gen;
    t->at = issue_;
    if (issue_.start >= served_) {
      // End of this epoch: the next one starts at its position 0; mixture
      // streams carry on.
      t->end_of_epoch = true;
      t->done = true;
      t->next = Cursor{issue_.epoch + 1, 0, issue_.drawn};
    } else {
      t->range = RankBatch(served_, issue_.start, part_);
      t->next = issue_;
      t->next.start = NextGlobalStart(served_, issue_.start, part_);
      if (mixture_)
        mixture_->Count(issue_.epoch, issue_.start, t->next.start, t->next.drawn.data());
      t->slot = slots_->Acquire();
      pool_->Schedule([this, t] { RunTicket(t); });
      issued = true;
    }
    issue_ = t->next;
    tickets_.push_back(std::move(t));
  }
  if (issued && idle_since_) {
    stats_.idle_seconds += static_cast<double>(NanosSince(*idle_since_)) * 1e-9;
    idle_since_.reset();
  }
}

void LoaderImpl::RunTicket(const std::shared_ptr<Ticket>& t) {
  obs::NoteProgress();
  Status s;
  {
    // The span ends before the batch is published below, so a consumer that
    // takes the last batch and stops tracing finds every assemble span.
    FW_TRACE_SPAN("loader", "assemble_batch");
    if (!Stale(*t)) {
      const auto t0 = std::chrono::steady_clock::now();
      s = Fill(*t, t->slot.get());
      // Page fetches are inside this span; stats() subtracts them.
      assemble_nanos_.fetch_add(NanosSince(t0), std::memory_order_relaxed);
    }
  }
  absl::MutexLock lock(&mu_);
  t->status = std::move(s);
  t->done = true;
  t->finished.store(true, std::memory_order_release);
  // Everything issued is done and the read-ahead is full: the pipeline waits
  // for the consumer from now on.
  if (t->generation == generation_.load() && tickets_.size() >= readahead_ &&
      std::all_of(tickets_.begin(), tickets_.end(), [](const auto& x) { return x->done; })) {
    idle_since_ = std::chrono::steady_clock::now();
  }
}

Result<const table::ColumnSource*> LoaderImpl::Source(int t, int fragment, int c) {
  {
    absl::MutexLock lock(&sources_mu_);
    const auto& p = sources_[t][fragment][c];
    if (p) return p.get();
  }
  const auto& tb = *tables_[t];
  FW_ASSIGN_OR_RETURN_CTX(table::ColumnSource src, tb.OpenColumn(fragment, out_[c].name), "table ",
                          tb.uri(), " version ", tb.version(), " fragment ",
                          tb.manifest().fragments[fragment].id);
  absl::MutexLock lock(&sources_mu_);
  auto& p = sources_[t][fragment][c];
  if (!p) p = std::make_unique<table::ColumnSource>(std::move(src));
  return p.get();
}

// sorted = the positions [0, n) ordered by (table, fragment, row). The
// usual case packs each address into one integer key next to its position,
// so the sort compares plain integers instead of chasing three arrays.
void SortByStorage(const std::vector<int32_t>& tables, const std::vector<table::RowAddress>& addr,
                   std::vector<int64_t>* sorted) {
  const size_t n = addr.size();
  bool packable = n <= (size_t{1} << 32);
  for (size_t i = 0; i < n && packable; ++i) {
    packable = tables[i] >= 0 && tables[i] < (1 << 12) && addr[i].fragment >= 0 &&
               addr[i].fragment < (1 << 20) && addr[i].row >= 0 && addr[i].row < (int64_t{1} << 32);
  }
  if (packable) {
    std::vector<std::pair<uint64_t, uint32_t>> keyed(n);
    for (size_t i = 0; i < n; ++i) {
      keyed[i] = {static_cast<uint64_t>(tables[i]) << 52 |
                      static_cast<uint64_t>(addr[i].fragment) << 32 |
                      static_cast<uint64_t>(addr[i].row),
                  static_cast<uint32_t>(i)};
    }
    std::sort(keyed.begin(), keyed.end());
    for (size_t i = 0; i < n; ++i) (*sorted)[i] = keyed[i].second;
    return;
  }
  std::iota(sorted->begin(), sorted->end(), 0);
  std::sort(sorted->begin(), sorted->end(), [&](int64_t x, int64_t y) {
    return std::tie(tables[x], addr[x].fragment, addr[x].row) <
           std::tie(tables[y], addr[y].fragment, addr[y].row);
  });
}

Status LoaderImpl::Fill(const Ticket& t, Slot* slot) {
  const int64_t n = t.range.size();
  Batch& b = slot->batch;
  b.epoch = t.at.epoch;
  b.position = t.range.begin;
  b.num_rows = n;
  b.indices.resize(n);
  b.tables.assign(n, 0);
  // 1. Which row of which table each position serves.
  if (!mixture_) {
    FW_ASSIGN_OR_RETURN(auto order,
                        SampleOrder::Create(rows_[0], options_.seed, t.at.epoch, orders_[0]));
    order.Fill(t.range.begin, t.range.end, b.indices.data());
  } else {
    mixture_->Fill(t.at.epoch, t.range.begin, t.range.end, b.tables.data());
    std::vector<int64_t> drawn = t.at.drawn;
    mixture_->Count(t.at.epoch, t.at.start, t.range.begin, drawn.data());
    std::vector<std::optional<SampleOrder>> orders(tables_.size());
    std::vector<int64_t> order_epoch(tables_.size(), -1);
    for (int64_t i = 0; i < n; ++i) {
      const int tb = b.tables[i];
      const int64_t k = drawn[tb]++;
      const int64_t e = k / rows_[tb];
      if (order_epoch[tb] != e) {
        FW_ASSIGN_OR_RETURN(
            auto o, SampleOrder::Create(rows_[tb], StreamSeed(options_.seed, tb), e, orders_[tb]));
        orders[tb] = std::move(o);
        order_epoch[tb] = e;
      }
      b.indices[i] = orders[tb]->At(k % rows_[tb]);
    }
  }
  // 2. Where each row is stored.
  std::vector<table::RowAddress> addr(n);
  if (!mixture_) {
    FW_RETURN_IF_ERROR_CTX(tables_[0]->Locate(b.indices.data(), n, addr.data()), "loader");
  } else {
    std::vector<int64_t> idx;
    std::vector<table::RowAddress> part;
    for (size_t tb = 0; tb < tables_.size(); ++tb) {
      idx.clear();
      for (int64_t i = 0; i < n; ++i) {
        if (b.tables[i] == static_cast<int32_t>(tb)) idx.push_back(b.indices[i]);
      }
      if (idx.empty()) continue;
      part.resize(idx.size());
      FW_RETURN_IF_ERROR_CTX(tables_[tb]->Locate(idx.data(), idx.size(), part.data()), "loader");
      size_t j = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (b.tables[i] == static_cast<int32_t>(tb)) addr[i] = part[j++];
      }
    }
  }
  // 3. Visit rows in storage order so each page is fetched once per column.
  std::vector<int64_t> sorted(n);
  SortByStorage(b.tables, addr, &sorted);
  b.columns.resize(out_.size());
  slot->held.clear();  // left by a batch that stopped between gather and transform
  std::vector<RowPlace> places;
  for (size_t c = 0; c < out_.size(); ++c) {
    if (Stale(t)) return absl::CancelledError("superseded");
    FW_RETURN_IF_ERROR(Place(static_cast<int>(c), sorted, b.tables, addr, &places));
    if (pages_->prefetches()) FW_RETURN_IF_ERROR(Prefetch(places));
    FW_RETURN_IF_ERROR(Gather(static_cast<int>(c), sorted, places, slot));
  }
  slot->skipped = 0;
  if (!options_.images.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = Stale(t) ? Status(absl::CancelledError("superseded")) : TransformImages(t, slot);
    slot->held.clear();  // the pages the image bytes were read from
    transform_nanos_.fetch_add(NanosSince(t0), std::memory_order_relaxed);
    FW_RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<ImagePipeline>> LoaderImpl::AcquirePipeline(int image) {
  {
    absl::MutexLock lock(&pipes_mu_);
    auto& free = pipes_[image];
    if (!free.empty()) {
      auto p = std::move(free.back());
      free.pop_back();
      return p;
    }
  }
  return ImagePipeline::Create(options_.images[image].options);
}

void LoaderImpl::ReleasePipeline(int image, std::unique_ptr<ImagePipeline> p) {
  absl::MutexLock lock(&pipes_mu_);
  pipes_[image].push_back(std::move(p));
}

Status LoaderImpl::TransformImages(const Ticket& t, Slot* slot) {
  Batch& b = slot->batch;
  const int64_t n = b.num_rows;
  std::vector<uint8_t> drop;
  int64_t indexed = 0;
  for (size_t c = 0; c < out_.size(); ++c) {
    const OutColumn& oc = out_[c];
    if (oc.image < 0) continue;
    BatchColumn& bc = b.columns[c];
    FW_ASSIGN_OR_RETURN(std::unique_ptr<ImagePipeline> pipe, AcquirePipeline(oc.image));
    const size_t w = oc.out_width;
    uint8_t* out = slot->images[c].Reserve(std::max<size_t>(1, static_cast<size_t>(n) * w));
    Status failed;
    for (int64_t i = 0; i < n && failed.ok(); ++i) {
      if (!drop.empty() && drop[i]) continue;
      const bool valid = bc.validity == nullptr || ((bc.validity[i >> 3] >> (i & 7)) & 1);
      Status s;
      if (!valid) {
        s = absl::InvalidArgumentError("the image is null");
      } else {
        const auto len = static_cast<size_t>(bc.offsets[i + 1] - bc.offsets[i]);
        s = pipe->Run(std::span<const uint8_t>(slot->image_src[c][i], len),
                      RowKey(options_.seed, t.at.epoch, b.tables[i], b.indices[i]),
                      std::span<uint8_t>(out + static_cast<size_t>(i) * w, w));
      }
      if (s.ok()) {
        indexed += pipe->last().indexed;
        continue;
      }
      if (options_.on_error == OnError::kSkip) {
        if (drop.empty()) drop.assign(static_cast<size_t>(n), 0);
        drop[i] = 1;
        std::memset(out + static_cast<size_t>(i) * w, 0, w);
        continue;
      }
      const auto& tab = *tables_[b.tables[i]];
      failed = Status(s.code(), absl::StrCat("table ", tab.uri(), " version ", tab.version(), " row ",
                                             b.indices[i], " column '", oc.name, "': ", s.message(),
                                             " (on_error=skip leaves such rows out)"));
    }
    ReleasePipeline(oc.image, std::move(pipe));
    slot->image_src[c].clear();
    FW_RETURN_IF_ERROR(failed);
    bc.type = oc.out_type;
    bc.nullable = false;
    bc.values = out;
    bc.values_size = static_cast<size_t>(n) * w;
    bc.offsets = nullptr;
    bc.validity = nullptr;
    bc.null_count = 0;
  }
  indexed_images_.fetch_add(indexed, std::memory_order_relaxed);
  if (!drop.empty()) {
    const int64_t before = b.num_rows;
    DropRows(b, drop);
    slot->skipped = before - b.num_rows;
  }
  return absl::OkStatus();
}

std::string LoaderImpl::PageContext(int table, int fragment) const {
  const auto& tab = *tables_[table];
  return absl::StrCat("table ", tab.uri(), " version ", tab.version(), " fragment ",
                      tab.manifest().fragments[fragment].id);
}

Status LoaderImpl::Place(int c, const std::vector<int64_t>& sorted, const std::vector<int32_t>& tbl,
                         const std::vector<table::RowAddress>& addr, std::vector<RowPlace>* places) {
  places->resize(sorted.size());
  int cur_t = -1, cur_f = -1;
  const table::ColumnSource* src = nullptr;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int64_t pos = sorted[i];
    const int tb = tbl[pos];
    const table::RowAddress& a = addr[pos];
    if (tb != cur_t || a.fragment != cur_f) {
      FW_ASSIGN_OR_RETURN(src, Source(tb, a.fragment, c));
      cur_t = tb;
      cur_f = a.fragment;
    }
    RowPlace& rp = (*places)[i];
    rp = RowPlace{src, tb, a.fragment, -1, 0};
    if (src->reader) {
      rp.page = src->reader->FindPage(src->column, a.row);
      rp.local = a.row - src->reader->pages(src->column)[rp.page].first_row;
    }
  }
  return absl::OkStatus();
}

Status LoaderImpl::Prefetch(const std::vector<RowPlace>& places) {
  // Each page once; `first` remembers a row of each for the error context.
  std::vector<PageRef> refs;
  std::vector<size_t> first;
  const RowPlace* prev = nullptr;
  for (size_t i = 0; i < places.size(); ++i) {
    const RowPlace& rp = places[i];
    if (!rp.src->reader) continue;
    if (prev && prev->src == rp.src && prev->page == rp.page) continue;
    prev = &rp;
    refs.push_back(PageRef{rp.src->reader.get(), rp.src->column, rp.page});
    first.push_back(i);
  }
  size_t failed = 0;
  Status s = pages_->Prefetch(refs, &failed);
  if (s.ok()) return s;
  const RowPlace& bad = places[first[failed]];
  return Annotate(s, PageContext(bad.table, bad.fragment));
}

Status LoaderImpl::Gather(int c, const std::vector<int64_t>& sorted, const std::vector<RowPlace>& places,
                          Slot* slot) {
  const OutColumn& oc = out_[c];
  const int64_t n = static_cast<int64_t>(sorted.size());
  BatchColumn& bc = slot->batch.columns[c];
  bc.name = oc.name;
  bc.type = oc.type;
  bc.nullable = oc.nullable;
  bc.null_count = 0;
  bc.offsets = nullptr;
  bc.validity = nullptr;
  uint8_t* validity = nullptr;
  if (oc.nullable) {
    validity = slot->validity[c].Reserve(static_cast<size_t>((n + 7) / 8) + 1);
    std::memset(validity, 0xff, static_cast<size_t>((n + 7) / 8) + 1);
  }
  auto set_null = [&](int64_t pos) {
    if (validity) validity[pos >> 3] &= static_cast<uint8_t>(~(1u << (pos & 7)));
    bc.null_count++;
  };
  // Walks rows in storage order, calling row(pos, page column, local row)
  // with the page holding each row (or the fill column and row 0).
  auto walk = [&](auto&& row) -> Status {
    const RowPlace* cur = nullptr;
    Column page;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = sorted[i];
      const RowPlace& rp = places[i];
      if (!rp.src->reader) {
        row(pos, rp.src->fill, int64_t{0});
        continue;
      }
      if (!cur || cur->src != rp.src || cur->page != rp.page) {
        FW_ASSIGN_OR_RETURN_CTX(page, pages_->Page(*rp.src->reader, rp.src->column, rp.page),
                                PageContext(rp.table, rp.fragment));
        cur = &rp;
      }
      row(pos, page, rp.local);
    }
    return absl::OkStatus();
  };
  bc.nested = nullptr;
  if (oc.type.is_nested()) {
    // Each row's slice of its page, in batch order, concatenated into new
    // buffers (children included).
    std::vector<Column> rows(static_cast<size_t>(n));
    FW_RETURN_IF_ERROR(walk([&](int64_t pos, const Column& col, int64_t local) {
      rows[static_cast<size_t>(pos)] = format::WidenColumn(col.Slice(local, 1), oc.type);
    }));
    Column all = n == 0 ? format::MakeNullColumn(oc.type, 0, false) : format::ConcatColumns(rows);
    all.type = oc.type;
    bc.null_count = all.null_count;
    bc.values = nullptr;
    bc.values_size = 0;
    bc.nested = std::make_shared<const Column>(std::move(all));
    return absl::OkStatus();
  }
  if (oc.width) {
    const size_t w = oc.width;
    uint8_t* out = slot->values[c].Reserve(std::max<size_t>(1, static_cast<size_t>(n) * w));
    FW_RETURN_IF_ERROR(walk([&](int64_t pos, const Column& col, int64_t local) {
      std::memcpy(out + static_cast<size_t>(pos) * w,
                  col.values.data + static_cast<size_t>(local) * w, w);
      if (!col.IsValid(local)) set_null(pos);
    }));
    bc.values = out;
    bc.values_size = static_cast<size_t>(n) * w;
  } else {
    // Pass 1: lengths (and the pages, held until the copy).
    const size_t es = oc.elem_size;
    int64_t* offsets =
        reinterpret_cast<int64_t*>(slot->offsets[c].Reserve(static_cast<size_t>(n + 1) * 8));
    // Image columns keep the pointers and pages for TransformImages
    // instead of copying the bytes.
    const bool by_reference = oc.image >= 0;
    std::vector<const uint8_t*> local_src;
    std::vector<const uint8_t*>& src_ptr = by_reference ? slot->image_src[c] : local_src;
    src_ptr.assign(static_cast<size_t>(n), nullptr);
    std::vector<Column> local_held;
    std::vector<Column>& held = by_reference ? slot->held : local_held;
    const uint8_t* last_values = nullptr;
    FW_RETURN_IF_ERROR(walk([&](int64_t pos, const Column& col, int64_t local) {
      const int64_t* o = col.offsets_data();
      const int64_t len = col.length == 0 ? 0 : o[local + 1] - o[local];
      src_ptr[pos] = col.values.data + static_cast<size_t>(o[local]) * es;
      offsets[pos + 1] = len;
      if (col.values.data != last_values) {
        held.push_back(col);  // keep the page alive until the copy below
        last_values = col.values.data;
      }
      if (!col.IsValid(local)) set_null(pos);
    }));
    offsets[0] = 0;
    for (int64_t i = 0; i < n; ++i) offsets[i + 1] += offsets[i];
    const size_t bytes = static_cast<size_t>(offsets[n]) * es;
    uint8_t* out = nullptr;  // by reference: TransformImages reads src_ptr
    if (!by_reference) {
      out = slot->values[c].Reserve(std::max<size_t>(1, bytes));
      for (int64_t i = 0; i < n; ++i) {
        const size_t len = static_cast<size_t>(offsets[i + 1] - offsets[i]) * es;
        if (len > 0) std::memcpy(out + static_cast<size_t>(offsets[i]) * es, src_ptr[i], len);
      }
    }
    bc.values = out;
    bc.values_size = bytes;
    bc.offsets = offsets;
  }
  if (validity && bc.null_count > 0) bc.validity = validity;
  return absl::OkStatus();
}

Result<std::shared_ptr<const Batch>> LoaderImpl::Next(absl::Duration timeout) {
  FW_TRACE_SPAN("loader", "next");
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_acquire)) return absl::CancelledError("loader: cancelled");
  IssueLocked();
  std::shared_ptr<Ticket> t = tickets_.front();
  const auto t0 = std::chrono::steady_clock::now();
  auto ready = [this, &t] { return t->done || cancelled_.load(std::memory_order_acquire); };
  if (!ready()) {
    consumer_waiting_since_ = t0;
    // Listed by hang diagnosis (SIGUSR1, the watchdog) while it waits.
    obs::BlockedWait blocked("loader", "next() waiting for its next batch",
                             "the batch is being read and assembled by the loader's worker threads; a long wait "
                             "means slow I/O, slow transforms, or a stuck read");
    // Poll briefly, yielding the CPU, before sleeping on the mutex: a
    // sleeping consumer costs the worker that finishes its batch a wake-up
    // (an inter-processor interrupt; tens of microseconds on a virtual
    // machine whose other CPU has halted), once per batch when the loader
    // is the slower side.
    const int64_t spin_nanos = std::min<int64_t>(spin_us_ * 1000, absl::ToInt64Nanoseconds(timeout));
    if (spin_nanos > 0) {
      mu_.Unlock();
      while (!t->finished.load(std::memory_order_acquire) &&
             !cancelled_.load(std::memory_order_acquire) && NanosSince(t0) < spin_nanos) {
        sched_yield();
      }
      mu_.Lock();
      // Another thread reset the loader meanwhile: wait for the new front.
      if (tickets_.empty() || tickets_.front() != t) {
        IssueLocked();
        t = tickets_.front();
      }
    }
    if (!ready()) {
      mu_.AwaitWithTimeout(absl::Condition(&ready),
                           timeout - absl::Nanoseconds(NanosSince(t0)));
    }
    const double waited = static_cast<double>(NanosSince(t0)) * 1e-9;
    stats_.consumer_wait_seconds += waited;
    consumer_waiting_since_.reset();
  }
  if (cancelled_.load(std::memory_order_acquire)) return absl::CancelledError("loader: cancelled");
  if (!t->done) {
    return absl::DeadlineExceededError(
        absl::StrCat("loader: no batch within ", absl::FormatDuration(timeout), " (epoch ",
                     t->at.epoch, " position ", t->range.begin, ")"));
  }
  tickets_.pop_front();
  if (!t->status.ok()) {
    // Keep the position: the next call reads this batch again.
    Status s = t->status;
    ResetLocked(consumer_);
    return s;
  }
  consumer_ = t->next;
  IssueLocked();
  if (t->end_of_epoch) return std::shared_ptr<const Batch>();
  stats_.batches++;
  stats_.rows += t->slot->batch.num_rows;
  stats_.skipped_rows += t->slot->skipped;
  int64_t bytes = 0;
  for (const auto& c : t->slot->batch.columns) bytes += static_cast<int64_t>(c.values_size);
  stats_.bytes += bytes;
  metrics_->OnBatch(t->slot->batch.num_rows, bytes, t->slot->skipped);
  const Batch* b = &t->slot->batch;
  return std::shared_ptr<const Batch>(std::move(t->slot), b);
}

LoaderState LoaderImpl::Identity() const {
  LoaderState s;
  s.seed = options_.seed;
  s.shuffle = options_.shuffle;
  s.shuffle_mode = options_.shuffle ? options_.shuffle_mode : ShuffleMode::kRow;
  s.window_blocks = orders_[0].window_blocks;
  for (size_t t = 0; t < tables_.size(); ++t) {
    s.tables.push_back(
        TableState{tables_[t]->uri(), tables_[t]->version(), rows_[t], orders_[t].block_rows});
  }
  if (mixture_) s.mixture = MixtureState{weights_, std::vector<int64_t>(tables_.size(), 0)};
  return s;
}

LoaderState LoaderImpl::state() const {
  LoaderState s = Identity();
  absl::MutexLock lock(&mu_);
  s.epoch = consumer_.epoch;
  s.consumed = std::min(consumer_.start, epoch_size_);
  if (s.mixture) s.mixture->drawn = consumer_.drawn;
  return s;
}

Status LoaderImpl::Restore(const LoaderState& state) {
  FW_RETURN_IF_ERROR(state.Validate());
  FW_RETURN_IF_ERROR(CheckResumable(state, Identity()));
  if (state.consumed > epoch_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("loader state: field 'consumed' is ", state.consumed,
                     ", beyond this loader's epoch of ", epoch_size_, " positions"));
  }
  Cursor at;
  at.epoch = state.epoch;
  at.start = state.consumed;
  if (state.mixture) at.drawn = state.mixture->drawn;
  absl::MutexLock lock(&mu_);
  ResetLocked(std::move(at));
  return absl::OkStatus();
}

Status LoaderImpl::SetEpoch(int64_t epoch) {
  if (epoch < 0)
    return absl::InvalidArgumentError(absl::StrCat("loader: epoch must be >= 0, got ", epoch));
  absl::MutexLock lock(&mu_);
  Cursor at = consumer_;
  at.epoch = epoch;
  at.start = 0;
  ResetLocked(std::move(at));
  return absl::OkStatus();
}

LoaderStats LoaderImpl::stats() const {
  LoaderStats s;
  {
    absl::MutexLock lock(&mu_);
    s = stats_;
    if (idle_since_) s.idle_seconds += static_cast<double>(NanosSince(*idle_since_)) * 1e-9;  // idle now
    if (consumer_waiting_since_) {
      s.consumer_wait_seconds += static_cast<double>(NanosSince(*consumer_waiting_since_)) * 1e-9;
    }
  }
  const PageSourceStats p = pages_->stats();
  s.pages_fetched = p.fetched;
  s.page_cache_hits = p.hits;
  s.page_views = p.views;
  s.uring_pages = p.batched;
  s.uring_batches = p.batches;
  s.uring_unavailable = p.uring_unavailable > 0;
  s.page_bytes_fetched = p.bytes_fetched;
  s.io_seconds = static_cast<double>(p.io_nanos) * 1e-9;
  s.decode_seconds = static_cast<double>(p.decode_nanos) * 1e-9;
  const double fill = static_cast<double>(assemble_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  s.transform_seconds = static_cast<double>(transform_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  s.indexed_images = indexed_images_.load(std::memory_order_relaxed);
  s.assemble_seconds = std::max(0.0, fill - s.io_seconds - s.decode_seconds - s.transform_seconds);
  return s;
}

}  // namespace

namespace {

// A loader whose batches go through LoaderOptions::batch_transform.
class TransformedLoader final : public Loader {
 public:
  TransformedLoader(std::unique_ptr<Loader> inner, std::shared_ptr<const BatchTransform> transform)
      : inner_(std::move(inner)), transform_(std::move(transform)) {}

  Result<std::shared_ptr<const Batch>> Next(absl::Duration timeout) override {
    FW_ASSIGN_OR_RETURN(std::shared_ptr<const Batch> b, inner_->Next(timeout));
    if (b == nullptr) return b;
    return transform_->Apply(std::move(b));
  }
  LoaderState state() const override { return inner_->state(); }
  Status Restore(const LoaderState& state) override { return inner_->Restore(state); }
  Status SetEpoch(int64_t epoch) override { return inner_->SetEpoch(epoch); }
  void Cancel() override { inner_->Cancel(); }
  LoaderStats stats() const override { return inner_->stats(); }
  const format::Schema& schema() const override { return inner_->schema(); }
  int64_t batches_per_epoch() const override { return inner_->batches_per_epoch(); }
  int64_t epoch_size() const override { return inner_->epoch_size(); }

 private:
  std::unique_ptr<Loader> inner_;
  std::shared_ptr<const BatchTransform> transform_;
};

Result<std::unique_ptr<Loader>> MakeLoader(std::vector<std::shared_ptr<const table::Table>> tables,
                                           const LoaderOptions& options) {
  if (options.batch_transform != nullptr && !tables.empty()) {
    // Checked before any read-ahead starts: a refused column reads nothing.
    std::vector<std::string> columns = options.columns;
    if (columns.empty()) {
      for (const auto& f : tables.front()->schema().fields) columns.push_back(f.name);
    }
    FW_RETURN_IF_ERROR(options.batch_transform->Check(columns));
  }
  FW_ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader, LoaderImpl::Make(std::move(tables), options));
  if (options.batch_transform == nullptr) return loader;
  return std::unique_ptr<Loader>(new TransformedLoader(std::move(loader), options.batch_transform));
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::Open(const std::vector<TableRef>& refs,
                                             const LoaderOptions& options,
                                             const table::TableOptions& table_options) {
  FW_RETURN_IF_ERROR(options.Validate());
  if (refs.empty()) return absl::InvalidArgumentError("loader: no tables");
  std::vector<std::shared_ptr<const table::Table>> tables;
  for (const auto& r : refs) {
    if (r.version && r.tag) {
      return absl::InvalidArgumentError(
          absl::StrCat("loader: table ", r.uri, ": give a version or a tag, not both"));
    }
    table::OpenOptions o;
    o.version = r.version;
    o.tag = r.tag;
    FW_ASSIGN_OR_RETURN_CTX(auto t, table::Table::Open(r.uri, o, table_options),
                            "loader: opening table ", r.uri);
    tables.push_back(std::move(t));
  }
  return MakeLoader(std::move(tables), options);
}

Result<std::unique_ptr<Loader>> Loader::Create(
    std::vector<std::shared_ptr<const table::Table>> tables, const LoaderOptions& options) {
  return MakeLoader(std::move(tables), options);
}

}  // namespace flywheel::loader
