// flywheel._core replay classes (ReplayTable, ReplayWriter and the rate
// limiter helpers) for the Python layer in python/flywheel/replay.py, over the
// in-process core in src/flywheel/replay/ (table.h, writer.h), and the pieces
// replay_service.cc shares (replay.h).
//
// GIL: every call that can wait (insert, sample, create_item) or take the
// table's lock runs with the GIL released; Python objects are converted
// before and after, under the GIL. Nothing stored in a replay table refers to
// a Python object, so no C++ code takes the GIL while holding a table lock.
//
// Interrupts: a C++ wait holds no GIL, so Python cannot deliver Ctrl-C into
// it. On the main thread (the only one Python delivers signals to) a blocking
// call therefore waits in slices of kSlice, re-taking the GIL between slices
// to run signal handlers (KeyboardInterrupt), and logs the table's Explain()
// every watchdog period itself (the table's own watchdog restarts with each
// slice). Other threads make one C++ call with the whole timeout. Slicing
// never changes what a call does: a timed-out wait changes no table state,
// and a batch that must wait for all n items is all or nothing in the table
// (ReplayTable::SampleBatch), so a slice that times out took no items.
//
// Thread-safety: ReplayTable is thread-safe (replay::ReplayTable is). ReplayWriter
// serialises its C++ calls with a mutex taken only after the GIL is released
// (TrajectoryWriter is single-threaded); its own bookkeeping is guarded by the
// GIL. A writer is meant for one thread; sharing one is safe but interleaves
// steps.
#include "replay.h"

#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "arrays.h"
#include "flywheel/base/logging.h"
#include "flywheel/format/codec.h"
#include "flywheel/replay/rate_limiter.h"
#include "flywheel/replay/selectors/interface.h"
#include "flywheel/replay/table.h"
#include "flywheel/replay/writer.h"
#include "status.h"

namespace flywheel::python {
namespace py = pybind11;

using replay::ItemKey;
using replay::RateLimiterOptions;
using replay::SampledItem;

namespace {

unsigned long main_thread_ident = 0;  // threading.main_thread().ident

}  // namespace

absl::Duration ToDuration(std::optional<double> seconds, const char* what) {
  if (!seconds) return absl::InfiniteDuration();
  if (std::isnan(*seconds) || *seconds < 0) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat(what, " must be None or a number of seconds >= 0, got ", *seconds)));
  }
  if (std::isinf(*seconds)) return absl::InfiniteDuration();
  return absl::Seconds(*seconds);
}

bool OnMainThread() { return PyThread_get_thread_ident() == main_thread_ident; }

// ------------------------------------------------------------------ BlockingCall

BlockingCall::BlockingCall(std::string what, std::string target, absl::Duration timeout,
                           absl::Duration watchdog, std::function<std::string()> explain)
    : what_(std::move(what)),
      target_(std::move(target)),
      timeout_(timeout),
      sliced_(OnMainThread()),
      start_(absl::Now()),
      deadline_(timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : start_ + timeout),
      next_warning_(watchdog > absl::ZeroDuration() ? start_ + watchdog : absl::InfiniteFuture()),
      watchdog_(watchdog),
      explain_(std::move(explain)) {}

BlockingCall::BlockingCall(const replay::ReplayTable& table, const char* what, absl::Duration timeout,
                           absl::Duration watchdog)
    : BlockingCall(what, absl::StrCat("table '", table.name(), "'"), timeout, watchdog,
                   [&table] { return table.Explain(); }) {}

absl::Duration BlockingCall::NextWait() const {
  if (!sliced_) return timeout_;
  if (deadline_ == absl::InfiniteFuture()) return kSlice;
  return std::max(std::min(kSlice, deadline_ - absl::Now()), absl::ZeroDuration());
}

absl::Duration BlockingCall::Left() const {
  if (deadline_ == absl::InfiniteFuture()) return absl::InfiniteDuration();
  return std::max(deadline_ - absl::Now(), absl::ZeroDuration());
}

Status BlockingCall::TimedOut() const {
  std::string explain;
  {
    py::gil_scoped_release nogil;
    explain = explain_();
  }
  return absl::DeadlineExceededError(absl::StrCat(what_, " ", target_, " timed out after ",
                                                  absl::FormatDuration(timeout_), ":\n", explain));
}

Status BlockingCall::Retry(const Status& s) {
  if (s.ok()) {  // a sliced call that is not complete yet
    if (sliced_ && PyErr_CheckSignals() != 0) throw py::error_already_set();
    return s;
  }
  if (!sliced_ || !absl::IsDeadlineExceeded(s)) return s;
  const absl::Time now = absl::Now();
  if (now >= deadline_) return TimedOut();
  if (now >= next_warning_) {
    py::gil_scoped_release nogil;
    FW_LOG(WARNING) << what_ << " " << target_ << " blocked for "
                    << absl::FormatDuration(now - start_) << ":\n"
                    << explain_();
    next_warning_ = now + watchdog_;
  }
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  return absl::OkStatus();
}

namespace {

// (samples_per_insert, min_size_to_sample, min_diff, max_diff)
using LimiterTuple = std::tuple<double, int64_t, double, double>;
// (kind, priority_exponent, seed); kind is uniform, prioritized, fifo, lifo,
// min_heap or max_heap.
using SelectorSpec = std::tuple<std::string, double, uint64_t>;

LimiterTuple ToTuple(const RateLimiterOptions& o) {
  return {o.samples_per_insert, o.min_size_to_sample, o.min_diff, o.max_diff};
}

RateLimiterOptions FromTuple(const LimiterTuple& t) {
  RateLimiterOptions o;
  std::tie(o.samples_per_insert, o.min_size_to_sample, o.min_diff, o.max_diff) = t;
  return o;
}

std::unique_ptr<replay::ItemSelector> MakeSelector(const SelectorSpec& spec, const char* role) {
  const auto& [kind, exponent, seed] = spec;
  if (kind == "uniform") return replay::NewUniformSelector(seed);
  if (kind == "prioritized") {
    if (!std::isfinite(exponent) || exponent < 0) {
      throw StatusError(absl::InvalidArgumentError(
          absl::StrCat(role, ": priority_exponent must be finite and >= 0, got ", exponent)));
    }
    return replay::NewPrioritizedSelector(exponent, seed);
  }
  if (kind == "fifo") return replay::NewFifoSelector();
  if (kind == "lifo") return replay::NewLifoSelector();
  if (kind == "min_heap") return replay::NewMinHeapSelector();
  if (kind == "max_heap") return replay::NewMaxHeapSelector();
  throw StatusError(
      absl::InvalidArgumentError(absl::StrCat(role, ": unknown selector '", kind, "'")));
}

[[noreturn]] void BatchError(const std::string& column, const std::string& msg) {
  throw py::value_error(absl::StrCat(
      "column '", column, "': ", msg,
      "; items sampled together must agree per column (sample them with batch_size=1). "
      "The items of this batch count as sampled."));
}

}  // namespace

// Each item's trajectory is decoded straight into its row of the batch
// array, without the GIL.
py::dict SampleToPython(std::vector<SampledItem> items) {
  if (items.empty()) throw StatusError(absl::InternalError("sample: no items to convert"));
  const size_t n = items.size();
  const auto& first = items.front().item->columns;
  // index[i][j]: position in item i's columns of first[j].
  std::vector<std::vector<size_t>> index(n, std::vector<size_t>(first.size()));
  for (size_t j = 0; j < first.size(); ++j) index[0][j] = j;
  for (size_t i = 1; i < n; ++i) {
    const auto& cols = items[i].item->columns;
    for (const auto& c : cols) {
      if (std::none_of(first.begin(), first.end(),
                       [&](const auto& f) { return f.name == c.name; })) {
        BatchError(c.name,
                   absl::StrCat("item ", i, " (key ", items[i].item->key, ") has it, item 0 (key ",
                                items[0].item->key, ") does not"));
      }
    }
    for (size_t j = 0; j < first.size(); ++j) {
      auto it = std::find_if(cols.begin(), cols.end(),
                             [&](const auto& c) { return c.name == first[j].name; });
      if (it == cols.end()) {
        BatchError(first[j].name,
                   absl::StrCat("item 0 (key ", items[0].item->key, ") has it, item ", i, " (key ",
                                items[i].item->key, ") does not"));
      }
      if (it->length != first[j].length) {
        BatchError(first[j].name,
                   absl::StrCat("item 0 (key ", items[0].item->key, ") has ", first[j].length,
                                " steps, item ", i, " (key ", items[i].item->key, ") has ",
                                it->length, "; items in one batch must have equal lengths"));
      }
      if (!(it->step_type() == first[j].step_type())) {
        BatchError(first[j].name,
                   absl::StrCat("item 0 holds ", first[j].step_type().ToString(), ", item ", i,
                                " holds ", it->step_type().ToString()));
      }
      index[i][j] = static_cast<size_t>(it - cols.begin());
    }
  }

  py::dict data;
  std::vector<uint8_t*> dst(first.size());
  std::vector<size_t> row_bytes(first.size());
  for (size_t j = 0; j < first.size(); ++j) {
    const auto& type = first[j].step_type();
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n),
                                   static_cast<py::ssize_t>(first[j].length)};
    for (int64_t d : type.shape) shape.push_back(static_cast<py::ssize_t>(d));
    py::array a(DTypeOf(type.id), shape);
    dst[j] = static_cast<uint8_t*>(a.mutable_data());
    row_bytes[j] = type.fixed_width() * static_cast<size_t>(first[j].length);
    data[py::str(first[j].name)] = std::move(a);  // the dict keeps it alive below
  }
  py::array_t<uint64_t> keys(static_cast<py::ssize_t>(n));
  py::array_t<double> priorities(static_cast<py::ssize_t>(n));
  py::array_t<double> probabilities(static_cast<py::ssize_t>(n));
  py::array_t<int64_t> table_size(static_cast<py::ssize_t>(n));
  py::array_t<int32_t> times_sampled(static_cast<py::ssize_t>(n));
  for (size_t i = 0; i < n; ++i) {
    keys.mutable_at(i) = items[i].item->key;
    priorities.mutable_at(i) = items[i].priority;
    probabilities.mutable_at(i) = items[i].probability;
    table_size.mutable_at(i) = items[i].table_size;
    times_sampled.mutable_at(i) = items[i].times_sampled;
  }
  {
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) {
      const auto& cols = items[i].item->columns;
      for (size_t j = 0; j < first.size(); ++j) {
        const auto& col = cols[index[i][j]];
        ThrowIfError(Annotate(
            col.Decode(dst[j] + i * row_bytes[j]),
            absl::StrCat("decoding column '", col.name, "' of item ", items[i].item->key)));
      }
    }
    items.clear();  // drop the chunk references without the GIL
  }
  py::dict out;
  out["data"] = std::move(data);
  out["keys"] = std::move(keys);
  out["priorities"] = std::move(priorities);
  out["probabilities"] = std::move(probabilities);
  out["table_size"] = std::move(table_size);
  out["times_sampled"] = std::move(times_sampled);
  return out;
}

namespace {

class PyReplayTable {
 public:
  PyReplayTable(std::shared_ptr<replay::ReplayTable> t, absl::Duration watchdog)
      : t_(std::move(t)), watchdog_(watchdog) {}

  static std::shared_ptr<PyReplayTable> Create(
      const std::string& name, const SelectorSpec& sampler, const SelectorSpec& remover,
      int64_t max_size, int32_t max_times_sampled, const LimiterTuple& limiter,
      const std::optional<std::vector<std::pair<std::string, std::string>>>& signature,
      double watchdog_s) {
    replay::ReplayTableOptions o;
    o.name = name;
    o.sampler = MakeSelector(sampler, "sampler");
    o.remover = MakeSelector(remover, "remover");
    o.max_size = max_size;
    o.max_times_sampled = max_times_sampled;
    o.rate_limiter = FromTuple(limiter);
    if (signature) {
      replay::Signature sig;
      for (const auto& [col, text] : *signature) {
        auto type = format::DataType::Parse(text);
        if (!type.ok()) {
          throw StatusError(Annotate(
              type.status(), absl::StrCat("table '", name, "' signature: column '", col, "'")));
        }
        sig.columns.emplace_back(col, *type);
      }
      o.signature = std::move(sig);
    }
    o.watchdog = ToDuration(watchdog_s, "watchdog");
    if (o.watchdog == absl::InfiniteDuration()) o.watchdog = absl::ZeroDuration();
    const absl::Duration watchdog = o.watchdog;
    auto t = ValueOrThrow(replay::ReplayTable::Create(std::move(o)));
    return std::make_shared<PyReplayTable>(std::move(t), watchdog);
  }

  replay::ReplayTable& table() const { return *t_; }
  const std::shared_ptr<replay::ReplayTable>& shared() const { return t_; }
  absl::Duration watchdog() const { return watchdog_; }
  const std::string& name() const { return t_->name(); }

  py::dict Sample(int64_t n, std::optional<double> timeout_s, bool flexible) const {
    const absl::Duration timeout = ToDuration(timeout_s);
    BlockingCall call(*t_, "sample from", timeout, watchdog_);
    std::vector<SampledItem> items;
    for (;;) {
      Status s;
      {
        py::gil_scoped_release nogil;
        // Sliced or not, the same call: a full batch is all or nothing in the
        // table, so a slice that times out took nothing (see the file comment).
        auto r = t_->SampleBatch(n, flexible, call.NextWait());
        if (r.ok()) items = std::move(r).value();
        s = r.status();
      }
      if (s.ok()) break;
      ThrowIfError(call.Retry(s));
    }
    return SampleToPython(std::move(items));
  }

  // [(column, type text)] or None.
  std::optional<std::vector<std::pair<std::string, std::string>>> Signature() const {
    const auto& sig = t_->signature();
    if (!sig) return std::nullopt;
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [col, type] : sig->columns) out.emplace_back(col, type.ToString());
    return out;
  }

  int64_t MutatePriorities(const std::vector<std::pair<ItemKey, double>>& updates,
                           const std::vector<ItemKey>& deletes) {
    py::gil_scoped_release nogil;
    return ValueOrThrow(t_->MutatePriorities(updates, deletes));
  }

  void Reset() {
    py::gil_scoped_release nogil;
    t_->Reset();
  }
  void Close() {
    py::gil_scoped_release nogil;
    t_->Close();
  }
  std::string Explain() const {
    py::gil_scoped_release nogil;
    return t_->Explain();
  }
  int64_t Size() const {
    py::gil_scoped_release nogil;
    return t_->Info().size;
  }

  py::dict Info() const {
    replay::TableInfo i;
    {
      py::gil_scoped_release nogil;
      i = t_->Info();
    }
    return TableInfoToPython(i);
  }

 private:
  std::shared_ptr<replay::ReplayTable> t_;
  absl::Duration watchdog_;
};

class PyReplayWriter {
 public:
  PyReplayWriter(std::map<std::string, std::shared_ptr<PyReplayTable>> tables, int64_t chunk_length,
                 const std::string& codec, int64_t max_history)
      : tables_(std::move(tables)) {
    replay::ReplayWriterOptions o;
    o.chunk_length = chunk_length;
    o.codec = ValueOrThrow(format::ParseCodec(codec));
    o.max_history = max_history;
    ThrowIfError(o.Validate());
    std::map<std::string, replay::ReplayTable*> raw;
    for (const auto& [name, t] : tables_) {
      if (!t) throw py::type_error(absl::StrCat("writer: table '", name, "' is None"));
      raw.emplace(name, &t->table());
    }
    w_ = std::make_unique<replay::TrajectoryWriter>(std::move(raw), o);
  }

  void DefineColumn(const std::string& column, const std::string& type_text) {
    steps_.Define(column, type_text);
  }

  void Append(const py::dict& step) {
    StepColumns::Step prepared = steps_.Prepare(step);
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      ThrowIfError(w_->Append(prepared.values));
    }
    steps_.Appended(prepared);
  }

  void Extend(const py::dict& columns) {
    StepColumns::Block b = steps_.PrepareBlock(columns);
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      ThrowIfError(StepColumns::AppendEach(b, [&](const std::vector<replay::StepValue>& v) { return w_->Append(v); }));
    }
    steps_.AppendedBlock(b);
  }

  ItemKey CreateItem(const std::string& table, double priority,
                     const std::vector<std::pair<std::string, int64_t>>& trajectory,
                     std::optional<double> timeout_s) {
    auto t = tables_.find(table);
    if (t == tables_.end()) {
      std::string names;
      for (const auto& [n, unused] : tables_)
        absl::StrAppend(&names, names.empty() ? "" : ", ", "'", n, "'");
      throw py::key_error(
          absl::StrCat("create_item: the writer has no table '", table, "' (it has ", names, ")"));
    }
    steps_.CheckTrajectory(trajectory);
    const absl::Duration timeout = ToDuration(timeout_s);
    BlockingCall call(t->second->table(), "insert into", timeout, t->second->watchdog());
    for (;;) {
      Result<ItemKey> r = absl::UnknownError("unset");
      {
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mu_);
        // A timed-out CreateItem inserted nothing (its chunks are kept), so
        // retrying it is the same call.
        r = w_->CreateItem(table, priority, trajectory, call.NextWait());
      }
      if (r.ok()) return *r;
      ThrowIfError(call.Retry(r.status()));
    }
  }

  void EndEpisode() {
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      ThrowIfError(w_->EndEpisode());
    }
    steps_.EndEpisode();
  }

  int64_t EpisodeSteps() const { return steps_.episode_steps(); }

 private:
  // Keep the tables alive: TrajectoryWriter holds raw pointers.
  const std::map<std::string, std::shared_ptr<PyReplayTable>> tables_;
  // Guards w_; taken only with the GIL released, so a thread blocked in
  // create_item never holds up the interpreter.
  std::mutex mu_;
  std::unique_ptr<replay::TrajectoryWriter> w_;
  // The binding's own bookkeeping is guarded by the GIL.
  StepColumns steps_;
};

}  // namespace

// ------------------------------------------------------------------ StepColumns

void StepColumns::Define(const std::string& column, const std::string& type_text) {
  auto type = format::DataType::Parse(type_text);
  if (!type.ok()) throw StatusError(Annotate(type.status(), absl::StrCat("column '", column, "'")));
  if (!type->is_fixed_width()) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "column '", column, "': a step must be a fixed-width type, got ", type->ToString())));
  }
  auto [it, inserted] = types_.emplace(column, *type);
  if (!inserted && !(it->second == *type)) {
    throw StatusError(absl::InvalidArgumentError(absl::StrCat(
        "column '", column, "' holds ", it->second.ToString(), ", not ", type->ToString())));
  }
}

StepColumns::Step StepColumns::Prepare(const py::dict& step) const {
  if (step.empty()) throw py::value_error("append: a step needs at least one column");
  Step out;
  out.values.reserve(step.size());
  out.keep.reserve(step.size());
  for (auto [key, value] : step) {
    std::string name = py::cast<std::string>(key);
    auto t = types_.find(name);
    if (t == types_.end())
      throw py::key_error(absl::StrCat("append: column '", name, "' has no type yet"));
    const format::DataType& type = t->second;
    if (!py::isinstance<py::array>(value)) {
      throw py::type_error(absl::StrCat("append: column '", name, "': expected a numpy array"));
    }
    auto a = py::reinterpret_borrow<py::array>(value);
    if (!a.dtype().equal(DTypeOf(type.id)) || !(a.flags() & py::array::c_style) ||
        static_cast<size_t>(a.nbytes()) != type.fixed_width()) {
      throw py::type_error(absl::StrCat("append: column '", name,
                                        "': expected a C-contiguous array of ", type.ToString()));
    }
    out.values.push_back(replay::StepValue{name, type, a.data()});
    out.keep.push_back(std::move(a));
    out.names.insert(std::move(name));
  }
  // The C++ writers only notice a column missing from a step at the column's
  // next value (and never one missing for good), so check here: the first
  // step of an episode fixes its columns.
  if (episode_steps_ > 0 && out.names != episode_columns_) {
    for (const auto& c : episode_columns_) {
      if (!out.names.count(c)) {
        throw py::value_error(absl::StrCat("append: column '", c,
                                           "' is missing; every step of an episode ",
                                           "needs the columns of its first step"));
      }
    }
    for (const auto& c : out.names) {
      if (!episode_columns_.count(c)) {
        throw py::value_error(
            absl::StrCat("append: column '", c,
                         "' is new; columns can only be added at the first step of an "
                         "episode (call end_episode() first)"));
      }
    }
  }
  return out;
}

StepColumns::Block StepColumns::PrepareBlock(const py::dict& columns) const {
  if (columns.empty()) throw py::value_error("extend: needs at least one column");
  Block b;
  py::dict row0;
  for (auto [key, value] : columns) {
    std::string name = py::cast<std::string>(key);
    auto t = types_.find(name);
    if (t == types_.end())
      throw py::key_error(absl::StrCat("extend: column '", name, "' has no type yet"));
    if (!py::isinstance<py::array>(value))
      throw py::type_error(absl::StrCat("extend: column '", name, "': expected a numpy array"));
    auto a = py::reinterpret_borrow<py::array>(value);
    const size_t width = t->second.fixed_width();
    if (!a.dtype().equal(DTypeOf(t->second.id)) || !(a.flags() & py::array::c_style) || a.ndim() < 1 ||
        a.shape(0) == 0 || static_cast<size_t>(a.nbytes()) != width * static_cast<size_t>(a.shape(0))) {
      throw py::type_error(absl::StrCat("extend: column '", name, "': expected a C-contiguous array of ",
                                        "(steps, ...) ", t->second.ToString(), " values"));
    }
    if (b.n != 0 && a.shape(0) != b.n) {
      throw py::value_error(absl::StrCat("extend: column '", name, "' has ", a.shape(0),
                                         " steps; the other columns have ", b.n));
    }
    b.n = a.shape(0);
    b.width.push_back(width);
    // Row 0 as a one-step view, checked by Prepare (types, episode columns).
    row0[key] = a[py::make_tuple(py::int_(0), py::ellipsis())];  // a 0-d view for scalars
  }
  b.first = Prepare(row0);
  // Prepare walks the dict in the same order; keep the whole arrays alive.
  b.first.keep.clear();
  for (auto [key, value] : columns) b.first.keep.push_back(py::reinterpret_borrow<py::array>(value));
  return b;
}

void StepColumns::AppendedBlock(Block& b) {
  Appended(b.first);
  episode_steps_ += b.n - 1;
}

void StepColumns::Appended(Step& step) {
  if (episode_steps_ == 0) episode_columns_ = std::move(step.names);
  episode_steps_++;
}

void StepColumns::CheckTrajectory(
    const std::vector<std::pair<std::string, int64_t>>& trajectory) const {
  for (const auto& [col, unused] : trajectory) {
    if (!episode_columns_.count(col)) {
      throw py::key_error(
          absl::StrCat("create_item: column '", col, "' has no steps in this episode"));
    }
  }
}

void StepColumns::EndEpisode() {
  episode_columns_.clear();
  episode_steps_ = 0;
}

py::dict TableInfoToPython(const replay::TableInfo& i) {
  py::dict d;
  d["name"] = i.name;
  d["size"] = i.size;
  d["max_size"] = i.max_size;
  d["max_times_sampled"] = i.max_times_sampled;
  d["inserts"] = i.limiter.inserts;
  d["deletes"] = i.limiter.deletes;
  d["samples"] = i.limiter.samples;
  d["blocked_inserts"] = i.blocked_inserts;
  d["blocked_samples"] = i.blocked_samples;
  d["sampler"] = i.sampler;
  d["remover"] = i.remover;
  d["num_evicted"] = i.num_episodes_evicted;
  d["num_deleted"] = i.num_deleted;
  d["rate_limiter"] = ToTuple(i.limiter_options);
  return d;
}

// ------------------------------------------------- _core.ReplayTable <-> Table

std::shared_ptr<replay::ReplayTable> SharedTable(py::handle core_table) {
  if (!py::isinstance<PyReplayTable>(core_table)) {
    throw py::type_error(absl::StrCat("expected a _core.ReplayTable, got ",
                                      py::str(py::type::of(core_table)).cast<std::string>()));
  }
  return core_table.cast<PyReplayTable&>().shared();
}

py::object WrapTable(std::shared_ptr<replay::ReplayTable> table, absl::Duration watchdog) {
  return py::cast(std::make_shared<PyReplayTable>(std::move(table), watchdog));
}

void RegisterReplay(py::module_& m) {
  main_thread_ident =
      py::cast<unsigned long>(py::module_::import("threading").attr("main_thread")().attr("ident"));

  m.def(
      "rate_limiter_preset",
      [](const std::string& kind, double a, int64_t b, double c) -> LimiterTuple {
        if (kind == "min_size") return ToTuple(RateLimiterOptions::MinSize(b));
        if (kind == "sample_to_insert_ratio")
          return ToTuple(RateLimiterOptions::SampleToInsertRatio(a, b, c));
        if (kind == "queue") return ToTuple(RateLimiterOptions::Queue(b));
        if (kind == "stack") return ToTuple(RateLimiterOptions::Stack(b));
        throw py::value_error(absl::StrCat("unknown rate limiter preset '", kind, "'"));
      },
      py::arg("kind"), py::arg("spi") = 1.0, py::arg("n") = 1, py::arg("error_buffer") = 0.0,
      "(samples_per_insert, min_size_to_sample, min_diff, max_diff) of a C++ preset:\n"
      "min_size(n), sample_to_insert_ratio(spi, n, error_buffer), queue(n), stack(n).");
  m.def(
      "rate_limiter_validate", [](const LimiterTuple& t) { ThrowIfError(FromTuple(t).Validate()); },
      py::arg("options"),
      "Raises ValueError naming the field when the rate limiter options are invalid\n"
      "or can deadlock (RateLimiterOptions::Validate).");

  py::class_<PyReplayTable, std::shared_ptr<PyReplayTable>>(
      m, "ReplayTable", "An in-process replay table; see flywheel.replay.Table.")
      .def(py::init(&PyReplayTable::Create), py::arg("name"), py::arg("sampler"),
           py::arg("remover"), py::arg("max_size"), py::arg("max_times_sampled"),
           py::arg("rate_limiter"), py::arg("signature"), py::arg("watchdog"))
      .def_property_readonly("name", &PyReplayTable::name)
      .def_property_readonly("signature", &PyReplayTable::Signature,
                             "[(column, type text)], or None without a signature")
      .def("sample", &PyReplayTable::Sample, py::arg("batch_size"), py::arg("timeout"),
           py::arg("flexible"))
      .def("mutate_priorities", &PyReplayTable::MutatePriorities, py::arg("updates"),
           py::arg("deletes"))
      .def("reset", &PyReplayTable::Reset)
      .def("close", &PyReplayTable::Close)
      .def("explain", &PyReplayTable::Explain)
      .def("size", &PyReplayTable::Size)
      .def("info", &PyReplayTable::Info);

  py::class_<PyReplayWriter>(m, "ReplayWriter",
                             "An in-process trajectory writer; see flywheel.replay.Writer.")
      .def(py::init<std::map<std::string, std::shared_ptr<PyReplayTable>>, int64_t,
                    const std::string&, int64_t>(),
           py::arg("tables"), py::arg("chunk_length"), py::arg("codec"), py::arg("max_history"))
      .def("define_column", &PyReplayWriter::DefineColumn, py::arg("column"), py::arg("type"))
      .def("append", &PyReplayWriter::Append, py::arg("step"))
      .def("extend", &PyReplayWriter::Extend, py::arg("columns"))
      .def("create_item", &PyReplayWriter::CreateItem, py::arg("table"), py::arg("priority"),
           py::arg("trajectory"), py::arg("timeout"))
      .def("end_episode", &PyReplayWriter::EndEpisode)
      .def_property_readonly("episode_steps", &PyReplayWriter::EpisodeSteps);
}

}  // namespace flywheel::python
