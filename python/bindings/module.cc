// flywheel._core: the private extension module under the `flywheel` package.
// One Register call per subsystem file (CONVENTIONS.md, "Python bindings");
// the public API is the pure-Python package in python/flywheel/.
#include <pybind11/pybind11.h>

namespace flywheel::python {
void RegisterStatus(pybind11::module_& m);
void RegisterTypes(pybind11::module_& m);
void RegisterArrays(pybind11::module_& m);
void RegisterArrow(pybind11::module_& m);
void RegisterTable(pybind11::module_& m);
void RegisterReplay(pybind11::module_& m);
void RegisterReplayService(pybind11::module_& m);
void RegisterEnvs(pybind11::module_& m);
void RegisterRl(pybind11::module_& m);
void RegisterLoader(pybind11::module_& m);
void RegisterInterop(pybind11::module_& m);
void RegisterCatalog(pybind11::module_& m);
void RegisterObs(pybind11::module_& m);
void RegisterLlm(pybind11::module_& m);
}  // namespace flywheel::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "flywheel C++ core (private; use the flywheel package)";
  flywheel::python::RegisterStatus(m);  // first: the others raise through it
  flywheel::python::RegisterTypes(m);
  flywheel::python::RegisterArrays(m);
  flywheel::python::RegisterArrow(m);
  flywheel::python::RegisterTable(m);
  flywheel::python::RegisterReplay(m);
  flywheel::python::RegisterReplayService(m);  // after RegisterReplay: uses its ReplayTable
  flywheel::python::RegisterEnvs(m);
  flywheel::python::RegisterRl(m);
  flywheel::python::RegisterLoader(m);
  flywheel::python::RegisterInterop(m);
  flywheel::python::RegisterCatalog(m);
  flywheel::python::RegisterObs(m);
  flywheel::python::RegisterLlm(m);
}
