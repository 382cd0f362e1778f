// What the in-process replay bindings (replay.cc) share with the gRPC ones
// (replay_service.cc): timeouts, the sliced-wait machinery that keeps Ctrl-C
// working, the sample-to-numpy conversion, the writers' step checks, and
// the bridge between _core.ReplayTable objects and replay::ReplayTable.
//
// Thread-safety: as stated per item; everything that touches Python objects
// needs the GIL.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/format/types.h"
#include "flywheel/replay/table.h"
#include "flywheel/replay/writer.h"

namespace flywheel::python {

// How long a main-thread wait runs before Python signal handlers get a turn.
inline constexpr absl::Duration kSlice = absl::Milliseconds(100);

// Seconds (None = forever) as a Duration; ValueError when negative or NaN.
absl::Duration ToDuration(std::optional<double> seconds, const char* what = "timeout");

// Whether the calling thread is Python's main thread (the one signals go to).
bool OnMainThread();

// One blocking call, waited for in slices on the main thread (see the file
// comment of replay.cc). The caller loops:
//
//   BlockingCall call("sample from", "table 't'", timeout, watchdog, explain);
//   for (;;) {
//     Status s;
//     { py::gil_scoped_release nogil; s = <op with call.NextWait()>; }
//     if (<done>) break;          // s.ok() and nothing left to wait for
//     ThrowIfError(call.Retry(s)); // with the GIL
//   }
class BlockingCall {
 public:
  // `explain` (called without the GIL) describes why the target blocks; it
  // goes into the timeout message and the watchdog log lines. `watchdog`
  // 0 = no log lines.
  BlockingCall(std::string what, std::string target, absl::Duration timeout,
               absl::Duration watchdog, std::function<std::string()> explain);
  // For an in-process table: target "table '<name>'", explain Table::Explain().
  BlockingCall(const replay::ReplayTable& table, const char* what, absl::Duration timeout,
               absl::Duration watchdog);

  bool sliced() const { return sliced_; }
  absl::Time deadline() const { return deadline_; }

  // How long the next C++ call may wait. Needs no GIL.
  absl::Duration NextWait() const;
  // Time left until the caller's deadline (infinite without one): what a
  // call that is not the first of an unsliced sequence may wait.
  absl::Duration Left() const;

  // After a call returned `s` (not done): OK to wait again, else the error to
  // raise. Runs Python signal handlers (may throw error_already_set, e.g.
  // KeyboardInterrupt). REQUIRES: the GIL.
  Status Retry(const Status& s);

  // "<what> <target> timed out after <timeout>:\n<explain>". REQUIRES: the GIL
  // (released while explaining).
  Status TimedOut() const;

 private:
  const std::string what_;
  const std::string target_;
  const absl::Duration timeout_;
  const bool sliced_;
  const absl::Time start_;
  const absl::Time deadline_;
  absl::Time next_warning_;
  const absl::Duration watchdog_;
  const std::function<std::string()> explain_;
};

// The sampled items as the dict replay.py's Sample wraps: data (column ->
// ndarray (batch, time, *step_shape)), keys, priorities, probabilities,
// table_size, times_sampled. REQUIRES: items non-empty, the GIL.
pybind11::dict SampleToPython(std::vector<replay::SampledItem> items);

// Table::Info() as the dict Table.info() returns (see replay.py).
pybind11::dict TableInfoToPython(const replay::TableInfo& info);

// The replay::ReplayTable behind a _core.ReplayTable (TypeError for anything else).
std::shared_ptr<replay::ReplayTable> SharedTable(pybind11::handle core_table);
// A new _core.ReplayTable over `table` (e.g. one a server restored);
// `watchdog` as the ReplayTable constructor's.
pybind11::object WrapTable(std::shared_ptr<replay::ReplayTable> table, absl::Duration watchdog);

// A writer's column types and per-episode step checks, shared by the
// in-process and the remote writer bindings. Guarded by the GIL.
class StepColumns {
 public:
  // Fixes the per-step type of `column` (replay.py calls this before the
  // column's first append).
  void Define(const std::string& column, const std::string& type_text);

  // One step as the C++ writers take it. `keep` holds the arrays alive until
  // the C++ call returns; destroy it with the GIL.
  struct Step {
    std::vector<replay::StepValue> values;
    std::vector<pybind11::array> keep;
    std::set<std::string> names;
  };
  // Checks a step (column -> C-contiguous ndarray of the column's exact
  // dtype and step shape) against the types and the episode's columns.
  Step Prepare(const pybind11::dict& step) const;
  // After the C++ writer accepted `step`.
  void Appended(Step& step);

  // Many steps at once: column -> C-contiguous ndarray (n, *step shape) of
  // the column's exact dtype, n the same for every column and > 0. Checked
  // as Prepare checks one step; `AppendEach` hands the writer one step at a
  // time (pointers into the arrays) and returns the steps it appended.
  struct Block {
    Step first;                 // values point at row 0
    std::vector<size_t> width;  // bytes per step, per value
    int64_t n = 0;
  };
  Block PrepareBlock(const pybind11::dict& columns) const;
  template <typename AppendFn>
  static Status AppendEach(const Block& b, AppendFn&& append) {
    std::vector<replay::StepValue> values = b.first.values;
    for (int64_t i = 0; i < b.n; ++i) {
      for (size_t c = 0; c < values.size(); ++c)
        values[c].data = static_cast<const char*>(b.first.values[c].data) + i * b.width[c];
      Status s = append(values);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  void AppendedBlock(Block& b);
  // KeyError for a trajectory column with no steps this episode.
  void CheckTrajectory(const std::vector<std::pair<std::string, int64_t>>& trajectory) const;
  void EndEpisode();
  int64_t episode_steps() const { return episode_steps_; }

 private:
  std::map<std::string, format::DataType> types_;
  std::set<std::string> episode_columns_;
  int64_t episode_steps_ = 0;
};

}  // namespace flywheel::python
