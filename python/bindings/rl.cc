// flywheel._core.WeightClient for flywheel.rl.WeightClient
// (python/flywheel/rl/weights.py), over rl::WeightClient
// (src/flywheel/rl/service/weight_service.h).
//
// Tensors cross as numpy arrays: publish takes C-contiguous arrays of a
// fixed-width numeric dtype (copied once into the message); fetch returns
// fresh arrays that own their bytes. Both go in chunks (any size, resumed
// after a dropped connection; last_transfer reports the last one).
//
// GIL: released around every RPC. A long fetch from the main thread waits
// in slices (kSlice) so that Ctrl-C is seen.
//
// Thread-safety: WeightClient is thread-safe (the C++ class is).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "arrays.h"
#include "replay.h"
#include "status.h"

#if FLYWHEEL_HAVE_GRPC
#include "flywheel/rl/service/weight_service.h"
#endif

namespace flywheel::python {
namespace py = pybind11;

#if FLYWHEEL_HAVE_GRPC
namespace {

template <typename T>
T ValueOrRaise(Result<T> r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

// The flywheel element type of a numpy array, or TypeError naming the tensor.
format::TypeId ElementType(const std::string& name, const py::array& a) {
  const py::dtype dt = a.dtype();
  const char kind = dt.kind();
  const py::ssize_t size = dt.itemsize();
  if (kind == 'f' && size == 2) return format::TypeId::kFloat16;
  if (kind == 'f' && size == 4) return format::TypeId::kFloat32;
  if (kind == 'f' && size == 8) return format::TypeId::kFloat64;
  if (kind == 'i' && size == 4) return format::TypeId::kInt32;
  if (kind == 'i' && size == 8) return format::TypeId::kInt64;
  if (kind == 'u' && size == 1) return format::TypeId::kUInt8;
  if (kind == 'b') return format::TypeId::kBool;
  throw py::type_error(absl::StrCat("tensor '", name, "': dtype ", py::cast<std::string>(py::str(static_cast<const py::handle&>(dt))),
                                    " is not supported (float16, float32, float64, int32, int64, uint8, bool)"));
}

rl::Tensor FromArray(const std::string& name, const py::handle& value) {
  py::array a = py::array::ensure(value, py::array::c_style);
  if (!a) throw py::type_error(absl::StrCat("tensor '", name, "': expected an array, got ",
                                            py::cast<std::string>(py::type::of(value).attr("__name__"))));
  rl::Tensor t;
  t.name = name;
  std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  t.type = shape.empty() ? format::DataType::Scalar(ElementType(name, a))
                         : format::DataType::Tensor(ElementType(name, a), shape);
  t.data.assign(static_cast<const char*>(a.data()), static_cast<size_t>(a.nbytes()));
  return t;
}

py::array ToArray(const rl::Tensor& t) {
  std::vector<py::ssize_t> shape(t.type.shape.begin(), t.type.shape.end());
  py::array a(DTypeOf(t.type.id), shape);
  std::memcpy(a.mutable_data(), t.data.data(), t.data.size());
  return a;
}

class PyWeightClient {
 public:
  explicit PyWeightClient(const std::string& address) : client_(std::make_shared<rl::WeightClient>(address)) {}

  int64_t Publish(const std::string& model, const py::dict& tensors, int64_t version) {
    std::vector<rl::Tensor> ts;
    for (const auto& [k, v] : tensors) ts.push_back(FromArray(py::cast<std::string>(k), v));
    Result<int64_t> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;
      rl::TransferStats st;
      r = client_->PublishChunked(model, ts, version, {}, &st);
      Record(st);
    }
    return ValueOrRaise(std::move(r));
  }

  // None when nothing newer came within `wait`; else (version,
  // publish_time_ms, {name: array}).
  py::object Fetch(const std::string& model, int64_t newer_than, std::optional<double> wait_s) {
    const absl::Duration wait = ToDuration(wait_s, "wait");
    const absl::Time deadline = wait == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + wait;
    rl::WeightsRef w;
    for (;;) {
      const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
      // The server holds a fetch at most 60 s; the main thread checks
      // signals between slices.
      const absl::Duration slice = std::min(left, OnMainThread() ? kSlice : absl::Seconds(30));
      Result<rl::WeightsRef> r = absl::UnknownError("unset");
      {
        py::gil_scoped_release nogil;
        rl::TransferStats st;
        r = client_->FetchChunked(model, newer_than, slice, {}, &st);
        Record(st);
      }
      w = ValueOrRaise(std::move(r));
      if (w != nullptr || absl::Now() >= deadline) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    if (w == nullptr) return py::none();
    py::dict tensors;
    for (const rl::Tensor& t : w->tensors) tensors[py::str(t.name)] = ToArray(t);
    return py::make_tuple(w->version, w->publish_time_ms, tensors);
  }

  // The last publish or fetch: bytes, wire_bytes, seconds, chunks, resumes, restarts.
  py::dict LastTransfer() {
    std::lock_guard<std::mutex> l(mu_);
    py::dict d;
    d["bytes"] = last_.bytes;
    d["wire_bytes"] = last_.wire_bytes;
    d["seconds"] = last_.seconds;
    d["chunks"] = last_.chunks;
    d["resumes"] = last_.resumes;
    d["restarts"] = last_.restarts;
    return d;
  }

  std::vector<std::pair<std::string, int64_t>> List() {
    Result<std::vector<std::pair<std::string, int64_t>>> r = absl::UnknownError("unset");
    {
      py::gil_scoped_release nogil;
      r = client_->List();
    }
    return ValueOrRaise(std::move(r));
  }

 private:
  void Record(const rl::TransferStats& st) {
    std::lock_guard<std::mutex> l(mu_);
    last_ = st;
  }

  std::shared_ptr<rl::WeightClient> client_;
  std::mutex mu_;
  rl::TransferStats last_;
};

}  // namespace

void RegisterRl(py::module_& m) {
  py::class_<PyWeightClient>(m, "WeightClient", "Weight store client; see flywheel.rl.WeightClient.")
      .def(py::init<const std::string&>(), py::arg("address"))
      .def("publish", &PyWeightClient::Publish, py::arg("model"), py::arg("tensors"), py::arg("version"))
      .def("fetch", &PyWeightClient::Fetch, py::arg("model"), py::arg("newer_than"), py::arg("wait"))
      .def("last_transfer", &PyWeightClient::LastTransfer)
      .def("list", &PyWeightClient::List);
}

#else

void RegisterRl(py::module_&) {}

#endif

}  // namespace flywheel::python
