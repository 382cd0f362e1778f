// flywheel._core bindings for tracing (python/flywheel/trace.py is the
// public layer).
#include <pybind11/pybind11.h>

#include <mutex>
#include <set>
#include <string>

#include "flywheel/base/trace.h"
#include "flywheel/base/waits.h"
#include "status.h"

namespace py = pybind11;

namespace flywheel::python {

void RegisterObs(py::module_& m) {
  m.def("trace_start", [](const std::string& path, int64_t max_events) {
    ThrowIfError(obs::StartTracing(path, max_events));
  });
  m.def("trace_stop", [] {
    py::gil_scoped_release r;
    ThrowIfError(obs::StopTracing());
  });
  m.def("trace_flush", [] {
    py::gil_scoped_release r;
    ThrowIfError(obs::FlushTrace());
  });
  m.def("trace_enabled", &obs::TracingEnabled);
  m.def("trace_now_us", &obs::internal_trace::NowUs);
  // Python spans: category and name are interned for the trace's lifetime.
  m.def("trace_record", [](const std::string& category, const std::string& name, int64_t start_us, int64_t end_us,
                           const std::string& args) {
    static std::mutex mu;
    static auto* interned = new std::set<std::string>();
    const char* c;
    const char* n;
    {
      std::lock_guard<std::mutex> lock(mu);
      c = interned->insert(category).first->c_str();
      n = interned->insert(name).first->c_str();
    }
    obs::internal_trace::Record(c, n, start_us, end_us, args.empty() ? nullptr : &args);
  });
  m.def("dump_waits", &obs::DumpWaits);
  m.def("install_hang_diagnostics", [](double watchdog_seconds) {
    obs::HangDiagnosticsOptions o;
    o.watchdog_seconds = watchdog_seconds;
    obs::InstallHangDiagnostics(o);
  });
  m.def("trace_counts", [] { return py::make_tuple(obs::TraceEventsRecorded(), obs::TraceEventsDropped()); });
}

}  // namespace flywheel::python
