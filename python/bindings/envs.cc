// flywheel._core.EnvPool: the C++ EnvPool (src/flywheel/envs/env_pool.h) for
// the Python layer in python/flywheel/envs.py.
//
// Results cross as numpy views of the pool's buffers, never copies: for each
// buffer the arrays (obs, reward, terminated, truncated, env_id, final_obs,
// has_final_obs) are built once, with a capsule holding the buffers' owner
// as their base, and every reset/recv/step returns the arrays of the buffer
// it filled. The pool overwrites a buffer's rows only after the second
// recv/step following the one that returned it (env_pool.h, "Buffers").
//
// GIL: released around every C++ call that steps or waits (step, recv,
// reset); send only copies actions and keeps it. Actions are converted
// (dtype, shape) with the GIL before the call.
//
// Interrupts: a wait holds no GIL, so Python cannot deliver Ctrl-C into it;
// recv/step therefore wait in slices of kSlice and run Python's signal
// handlers between slices (a slice that times out loses nothing: the pool's
// Recv returns DeadlineExceeded and the next call continues).
//
// Thread-safety: one std::mutex, taken after the GIL is released,
// serialises the pool's driving calls (EnvPool is driven by one thread at a
// time); the cached arrays are only touched with the GIL.
#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flywheel/envs/env_pool.h"
#include "flywheel/envs/registry.h"
#include "status.h"

namespace flywheel::python {
namespace py = pybind11;

namespace {

using envs::Batch;
using envs::BufferView;
using envs::DType;
using envs::EnvPool;
using envs::EnvPoolOptions;
using envs::Space;

// How long one slice of a wait runs before Python's signal handlers run.
constexpr absl::Duration kEnvSlice = absl::Milliseconds(100);

py::dtype NumpyDType(DType t) { return py::dtype(std::string(envs::DTypeName(t))); }

std::string ShapeText(const py::array& a) {
  std::vector<std::string> dims;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) dims.push_back(std::to_string(a.shape(i)));
  return absl::StrCat("(", absl::StrJoin(dims, ", "), a.ndim() == 1 ? ",)" : ")");
}

std::string DTypeText(const py::array& a) { return py::str(static_cast<py::handle>(a.dtype())); }

py::dict SpaceToPython(const Space& s) {
  py::dict d;
  if (s.is_discrete()) {
    d["kind"] = "discrete";
    d["n"] = s.n;
    d["start"] = s.start;
    return d;
  }
  d["kind"] = "box";
  std::vector<py::ssize_t> shape(s.shape.begin(), s.shape.end());
  py::array_t<double> low(shape), high(shape);
  std::copy(s.low.begin(), s.low.end(), low.mutable_data());
  std::copy(s.high.begin(), s.high.end(), high.mutable_data());
  d["low"] = low;
  d["high"] = high;
  d["shape"] = py::tuple(py::cast(shape));
  d["dtype"] = std::string(envs::DTypeName(s.dtype));
  return d;
}

class PyEnvPool {
 public:
  PyEnvPool(const std::string& env_id, int num_envs, int batch_size, int num_threads, uint64_t seed,
            const std::string& autoreset_mode, std::vector<int64_t> max_episode_steps,
            const std::vector<envs::EnvKwargs>& kwargs, double spin_us) {
    EnvPoolOptions o;
    o.num_envs = num_envs;
    o.batch_size = batch_size;
    o.num_threads = num_threads;
    o.seed = seed;
    o.autoreset_mode = ValueOrThrow(envs::ParseAutoresetMode(autoreset_mode));
    o.max_episode_steps = std::move(max_episode_steps);
    if (!(spin_us >= 0) || !std::isfinite(spin_us)) {
      throw StatusError(
          absl::InvalidArgumentError(absl::StrCat("spin_us must be >= 0, got ", spin_us)));
    }
    o.spin = absl::Microseconds(spin_us);
    Result<std::unique_ptr<EnvPool>> pool;
    {
      py::gil_scoped_release nogil;  // building many envs can take a moment
      pool = EnvPool::Make(env_id, std::move(o), kwargs);
    }
    pool_ = ValueOrThrow(std::move(pool));
    env_id_ = env_id;
    obs_space_ = SpaceToPython(pool_->observation_space());
    action_space_ = SpaceToPython(pool_->action_space());
    BuildArrays();
  }

  const std::string& env_id() const { return env_id_; }
  int num_envs() const { return pool_->num_envs(); }
  int batch_size() const { return pool_->batch_size(); }
  int num_threads() const { return pool_->num_threads(); }
  int state_size() const { return pool_->state_size(); }
  std::string autoreset_mode() const {
    return std::string(envs::AutoresetModeName(pool_->autoreset_mode()));
  }
  std::vector<int64_t> max_episode_steps() const {
    std::vector<int64_t> v(pool_->num_envs());
    for (int i = 0; i < pool_->num_envs(); ++i) v[i] = pool_->max_episode_steps(i);
    return v;
  }
  py::dict observation_space() const { return obs_space_; }
  py::dict action_space() const { return action_space_; }
  bool closed() const { return closed_; }
  int64_t pending() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    return pool_->pending();
  }

  // -> (obs, env_id): every env, in env order.
  py::tuple Reset(const std::optional<std::vector<uint64_t>>& seeds,
                  const std::optional<py::array>& states) {
    std::vector<double> flat;
    if (states) {
      auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(*states);
      if (!a)
        throw py::type_error("reset: options['state'] must be convertible to a float64 array");
      const py::ssize_t s = pool_->state_size();
      const bool one = a.ndim() == 1 && a.shape(0) == s;
      const bool per_env = a.ndim() == 2 && a.shape(0) == pool_->num_envs() && a.shape(1) == s;
      if (!one && !per_env) {
        throw py::value_error(absl::StrCat("reset: options['state'] has shape ", ShapeText(a),
                                           "; need (", s, ",) for every env or (",
                                           pool_->num_envs(), ", ", s, ") one per env"));
      }
      flat.assign(a.data(), a.data() + a.size());
    }
    std::vector<uint64_t> seed_list = seeds.value_or(std::vector<uint64_t>{});
    Result<Batch> r;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      r = pool_->Reset(seed_list, flat);
    }
    const Batch b = ValueOrThrow(std::move(r));
    const py::tuple& a = arrays_[b.buffer];
    return py::make_tuple(a[0], a[4]);
  }

  void Send(py::handle actions, py::handle env_ids) {
    std::vector<int32_t> ids = EnvIds(env_ids);
    py::array a =
        Actions(actions, ids.empty() ? static_cast<size_t>(pool_->num_envs()) : ids.size());
    Status s;
    {
      // No GIL release: Send copies a few bytes per env and never waits.
      std::lock_guard<std::mutex> lock(mu_);
      s = pool_->Send(a.data(), ids);
    }
    ThrowIfError(s);
  }

  py::tuple Recv(std::optional<double> timeout) { return Wait(timeout, nullptr, {}); }

  py::tuple Step(py::handle actions, py::handle env_ids, std::optional<double> timeout) {
    std::vector<int32_t> ids = EnvIds(env_ids);
    py::array a =
        Actions(actions, ids.empty() ? static_cast<size_t>(pool_->num_envs()) : ids.size());
    return Wait(timeout, a.data(), ids);
  }

  void Close() {
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      pool_->Close();
    }
    closed_ = true;
  }

 private:
  // For each buffer: (obs, reward, terminated, truncated, env_id, final_obs, has_final_obs),
  // the last two None without SAME_STEP autoreset.
  void BuildArrays() {
    auto holder = new std::shared_ptr<const void>(pool_->memory());
    py::capsule owner(holder, [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); });
    const Space& os = pool_->observation_space();
    const py::dtype obs_dtype = NumpyDType(os.dtype);
    for (int i = 0; i <= pool_->num_buffers(); ++i) {
      const BufferView v = pool_->buffer(i);
      std::vector<py::ssize_t> obs_shape = {v.rows};
      obs_shape.insert(obs_shape.end(), os.shape.begin(), os.shape.end());
      const std::vector<py::ssize_t> rows = {v.rows};
      py::object final_obs = py::none(), has_final = py::none();
      if (v.final_obs != nullptr) {
        final_obs = py::array(obs_dtype, obs_shape, {}, v.final_obs, owner);
        has_final = py::array(py::dtype("bool"), rows, {}, v.has_final_obs, owner);
      }
      // env_id is read-only: in sync mode the pool writes it once, not per step.
      py::array env_id(py::dtype("int32"), rows, {}, v.env_id, owner);
      env_id.attr("setflags")(py::arg("write") = false);
      arrays_.push_back(py::make_tuple(py::array(obs_dtype, obs_shape, {}, v.obs, owner),
                                       py::array(py::dtype("float64"), rows, {}, v.reward, owner),
                                       py::array(py::dtype("bool"), rows, {}, v.terminated, owner),
                                       py::array(py::dtype("bool"), rows, {}, v.truncated, owner),
                                       env_id, final_obs, has_final));
    }
  }

  // None -> {} (every env); else a 1-d integer array of ids in [0, num_envs).
  std::vector<int32_t> EnvIds(py::handle obj) const {
    if (obj.is_none()) return {};
    py::array a = py::array::ensure(obj);
    if (!a || (a.dtype().kind() != 'i' && a.dtype().kind() != 'u')) {
      throw py::type_error(
          absl::StrCat("env_ids must be integers, got ",
                       a ? DTypeText(a) : std::string(py::str(py::type::handle_of(obj).attr("__name__")))));
    }
    if (a.ndim() != 1) {
      throw py::value_error(
          absl::StrCat("env_ids must be 1-dimensional, got shape ", ShapeText(a)));
    }
    auto ids64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    std::vector<int32_t> ids(ids64.size());
    for (py::ssize_t k = 0; k < ids64.size(); ++k) {
      const int64_t e = ids64.data()[k];
      if (e < 0 || e >= pool_->num_envs()) {
        throw py::value_error(absl::StrCat("env_ids[", k, "] = ", e, " is out of range [0, ",
                                           pool_->num_envs(), ")"));
      }
      ids[k] = static_cast<int32_t>(e);
    }
    if (ids.empty()) throw py::value_error("env_ids is empty");
    return ids;
  }

  // The actions as a C-contiguous array of the pool's action dtype with
  // `count` rows: integers for Discrete (any integer dtype), numbers for Box
  // (converted to float32).
  py::array Actions(py::handle obj, size_t count) const {
    const Space& s = pool_->action_space();
    py::array a = py::array::ensure(obj);
    if (!a) throw py::type_error("actions must be convertible to a numpy array");
    const char kind = a.dtype().kind();
    std::vector<py::ssize_t> want = {static_cast<py::ssize_t>(count)};
    want.insert(want.end(), s.shape.begin(), s.shape.end());
    if (s.is_discrete()) {
      if (kind != 'i' && kind != 'u') {
        throw py::type_error(absl::StrCat("actions for ", s.ToString(),
                                          " must be integers, got dtype ", DTypeText(a)));
      }
    } else if (kind != 'f' && kind != 'i' && kind != 'u') {
      throw py::type_error(
          absl::StrCat("actions for ", s.ToString(), " must be numbers, got dtype ", DTypeText(a)));
    }
    bool shape_ok = a.ndim() == static_cast<py::ssize_t>(want.size());
    for (size_t d = 0; shape_ok && d < want.size(); ++d) shape_ok = a.shape(d) == want[d];
    if (!shape_ok) {
      std::vector<std::string> dims;
      for (auto d : want) dims.push_back(std::to_string(d));
      throw py::value_error(absl::StrCat("actions have shape ", ShapeText(a), "; need (",
                                         absl::StrJoin(dims, ", "), want.size() == 1 ? ",)" : ")",
                                         ": ", count, " env", count == 1 ? "" : "s", " x ",
                                         s.ToString()));
    }
    if (s.is_discrete())
      return py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  }

  // Send (when `actions` is set) and then receive, in slices (file comment).
  py::tuple Wait(std::optional<double> timeout, const void* actions,
                 const std::vector<int32_t>& ids) {
    absl::Duration total = absl::InfiniteDuration();
    if (timeout) {
      if (std::isnan(*timeout) || *timeout < 0) {
        throw StatusError(absl::InvalidArgumentError(
            absl::StrCat("timeout must be None or a number of seconds >= 0, got ", *timeout)));
      }
      if (!std::isinf(*timeout)) total = absl::Seconds(*timeout);
    }
    const absl::Time deadline =
        total == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + total;
    Result<Batch> r;
    int64_t pending = 0;
    for (bool first = true;; first = false) {
      {
        py::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mu_);
        Status sent;
        if (first && actions != nullptr) sent = pool_->Send(actions, ids);
        if (!sent.ok()) {
          r = sent;
        } else {
          const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
          r = pool_->Recv(std::min(kEnvSlice, left));
        }
        pending = pool_->pending();
      }
      if (r.ok() || !absl::IsDeadlineExceeded(r.status())) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (absl::Now() >= deadline) {
        throw StatusError(absl::DeadlineExceededError(
            absl::StrCat("recv timed out after ", absl::FormatDuration(total), " (", pending,
                         " steps pending, batch_size ", pool_->batch_size(), ")")));
      }
    }
    const Batch b = ValueOrThrow(std::move(r));
    return arrays_[b.buffer];
  }

  std::string env_id_;
  std::unique_ptr<EnvPool> pool_;
  std::mutex mu_;
  py::dict obs_space_, action_space_;
  std::vector<py::tuple> arrays_;  // per buffer; see BuildArrays
  bool closed_ = false;
};

}  // namespace

void RegisterEnvs(py::module_& m) {
  m.def(
      "env_specs",
      [] {
        std::vector<std::tuple<std::string, int64_t, std::string>> out;
        for (const auto& spec : envs::RegisteredEnvs())
          out.emplace_back(spec.id, spec.max_episode_steps, spec.kwargs);
        return out;
      },
      "[(env id, registered max_episode_steps, constructor arguments with defaults)] of the "
      "built-in envs.");

  py::class_<PyEnvPool>(m, "EnvPool", "A C++ EnvPool; see flywheel.envs.make.")
      .def(py::init<const std::string&, int, int, int, uint64_t, const std::string&,
                    std::vector<int64_t>, const std::vector<envs::EnvKwargs>&, double>(),
           py::arg("env_id"), py::arg("num_envs"), py::arg("batch_size"), py::arg("num_threads"),
           py::arg("seed"), py::arg("autoreset_mode"), py::arg("max_episode_steps"),
           py::arg("kwargs"), py::arg("spin_us"))
      .def_property_readonly("env_id", &PyEnvPool::env_id)
      .def_property_readonly("num_envs", &PyEnvPool::num_envs)
      .def_property_readonly("batch_size", &PyEnvPool::batch_size)
      .def_property_readonly("num_threads", &PyEnvPool::num_threads)
      .def_property_readonly("state_size", &PyEnvPool::state_size)
      .def_property_readonly("autoreset_mode", &PyEnvPool::autoreset_mode)
      .def_property_readonly("max_episode_steps", &PyEnvPool::max_episode_steps)
      .def_property_readonly("observation_space", &PyEnvPool::observation_space)
      .def_property_readonly("action_space", &PyEnvPool::action_space)
      .def_property_readonly("closed", &PyEnvPool::closed)
      .def_property_readonly("pending", &PyEnvPool::pending)
      .def("reset", &PyEnvPool::Reset, py::arg("seeds"), py::arg("states"),
           "-> (obs, env_id) of every env, in env order (views, valid until the next reset).")
      .def("send", &PyEnvPool::Send, py::arg("actions"), py::arg("env_ids"))
      .def("recv", &PyEnvPool::Recv, py::arg("timeout"),
           "-> (obs, reward, terminated, truncated, env_id, final_obs, has_final_obs); views.")
      .def("step", &PyEnvPool::Step, py::arg("actions"), py::arg("env_ids"), py::arg("timeout"),
           "send + recv; same result as recv.")
      .def("close", &PyEnvPool::Close);
}

}  // namespace flywheel::python
