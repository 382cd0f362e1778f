// flywheel._core bindings for the catalog (python/flywheel/catalog.py is the
// public layer). Lineage graphs and sample sets cross as JSON text, parsed
// in Python; every call releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <tuple>
#include <vector>

#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/read_policy.h"
#include "flywheel/catalog/recorder.h"
#include "flywheel/table/table.h"
#include "status.h"

namespace py = pybind11;

namespace flywheel::python {
namespace {

using catalog::Catalog;
using catalog::Node;

class PyCatalog {
 public:
  PyCatalog(const std::string& spec, const std::string& principal, const std::string& warehouse,
            const std::string& openlineage_file, const std::string& openlineage_url) {
    catalog::CatalogOptions o;
    o.principal = principal;
    o.warehouse = warehouse;
    o.openlineage_file = openlineage_file;
    o.openlineage_url = openlineage_url;
    py::gil_scoped_release release;
    c_ = ValueOrThrow(Catalog::Open(spec, o));
  }

  Catalog& c() { return *c_; }

 private:
  std::unique_ptr<Catalog> c_;
};

py::tuple DatasetTuple(const catalog::DatasetInfo& d) { return py::make_tuple(d.name, d.ns, d.uri, d.created_ms); }

Node ParseNode(const std::string& text) { return ValueOrThrow(Node::Parse(text)); }

}  // namespace

void RegisterCatalog(py::module_& m) {
  // The column rules for one reader (catalog/read_policy.h): Table reads and
  // the Loader take it and apply it in C++.
  py::class_<catalog::ReadGuard, std::shared_ptr<catalog::ReadGuard>>(
      m, "ReadGuard", "The catalog's column rules for one reader (see docs/catalog.md).")
      .def_property_readonly("empty", &catalog::ReadGuard::empty)
      .def_property_readonly("principal", &catalog::ReadGuard::principal)
      .def_property_readonly("columns",
                             [](const catalog::ReadGuard& g) {
                               py::dict d;
                               for (const auto& c : g.columns()) {
                                 d[py::str(c.name)] = py::make_tuple(catalog::MaskModeName(c.mode), c.dataset, c.tags);
                               }
                               return d;
                             })
      .def(
          "check_read",
          [](const catalog::ReadGuard& g, const std::vector<std::string>& columns) {
            py::gil_scoped_release r;
            ThrowIfError(g.CheckRead(columns));
          },
          py::arg("columns"))
      .def(
          "check_export",
          [](const catalog::ReadGuard& g, const std::vector<std::string>& columns, const std::string& location) {
            py::gil_scoped_release r;
            ThrowIfError(g.CheckExport(columns, location));
          },
          py::arg("columns"), py::arg("location"))
      .def(
          "check_predicate",
          [](const catalog::ReadGuard& g, const std::string& column, const std::string& location,
             const std::string& action) {
            py::gil_scoped_release r;
            ThrowIfError(g.CheckPredicate(column, location, action));
          },
          py::arg("column"), py::arg("location"), py::arg("action"));

  py::class_<PyCatalog>(m, "Catalog", "A flywheel catalog (see flywheel.catalog.Catalog).")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&,
                    const std::string&>(),
           py::arg("spec"), py::arg("principal") = "", py::arg("warehouse") = "", py::arg("openlineage_file") = "",
           py::arg("openlineage_url") = "")
      .def_property_readonly("principal", [](PyCatalog& c) { return c.c().principal(); })
      .def_property_readonly("warehouse", [](PyCatalog& c) { return c.c().warehouse(); })
      .def_property_readonly("backend", [](PyCatalog& c) { return std::string(c.c().backend()); })
      .def("schema_version",
           [](PyCatalog& c) {
             py::gil_scoped_release r;
             return ValueOrThrow(c.c().SchemaVersion());
           })
      .def("register_dataset",
           [](PyCatalog& c, const std::string& name, const std::string& uri) {
             catalog::DatasetInfo d;
             {
               py::gil_scoped_release r;
               d = ValueOrThrow(c.c().RegisterDataset(name, uri));
             }
             return DatasetTuple(d);
           })
      .def("get_dataset",
           [](PyCatalog& c, const std::string& name) {
             catalog::DatasetInfo d;
             {
               py::gil_scoped_release r;
               d = ValueOrThrow(c.c().GetDataset(name));
             }
             return DatasetTuple(d);
           })
      .def("list_datasets",
           [](PyCatalog& c, const std::string& ns) {
             std::vector<catalog::DatasetInfo> ds;
             {
               py::gil_scoped_release r;
               ds = ValueOrThrow(c.c().ListDatasets(ns));
             }
             py::list out;
             for (const auto& d : ds) out.append(DatasetTuple(d));
             return out;
           },
           py::arg("namespace") = "")
      .def("resolve_argument",
           [](PyCatalog& c, const std::string& arg, bool for_create) {
             py::gil_scoped_release r;
             return ValueOrThrow(catalog::ResolveTableArgument(&c.c(), arg, for_create));
           })
      .def("mirror",
           [](PyCatalog& c, const std::string& uri, int64_t version) {
             py::gil_scoped_release r;
             table::OpenOptions o;
             o.version = version;
             auto t = ValueOrThrow(table::Table::Open(uri, o));
             return ValueOrThrow(catalog::MirrorVersion(c.c(), *t)).ToString();
           },
           "Registers the table (if new) and records its version; returns 'ns/t@v'.")
      .def(
          "record_operation",
          [](PyCatalog& c, const std::string& run_id, const std::string& job_type, const std::string& job,
             const std::vector<std::tuple<std::string, std::string, int64_t, std::string>>& inputs,
             const std::vector<std::tuple<std::string, std::string, int64_t, std::string>>& outputs,
             const std::string& params) {
            // Nodes: (text, uri, version, detail_json); a table when uri is set.
            auto nodes = [](const auto& in) {
              std::vector<catalog::OperationNode> out;
              for (const auto& [text, uri, version, detail] : in) out.push_back({uri, version, text, detail});
              return out;
            };
            py::gil_scoped_release r;
            return ValueOrThrow(catalog::RecordOperation(c.c(), run_id, job_type, job, nodes(inputs), nodes(outputs),
                                                         params));
          },
          py::arg("run_id"), py::arg("job_type"), py::arg("job"), py::arg("inputs"), py::arg("outputs"),
          py::arg("params") = "{}", "Records an operation as lineage (recorder.h RecordOperation); returns the run id.")
      .def(
          "record_table_write",
          [](PyCatalog& c, const std::string& run_id, const std::string& op, const std::string& uri, int64_t before,
             int64_t after) {
            py::gil_scoped_release r;
            ThrowIfError(catalog::RecordTableWrite(c.c(), run_id, op, uri, before, after));
          },
          py::arg("run_id"), py::arg("op"), py::arg("uri"), py::arg("before"), py::arg("after"),
          "Audits a commit and records it as lineage (recorder.h RecordTableWrite).")
      .def("start_run",
           [](PyCatalog& c, const std::string& job, const std::string& job_type, const std::string& params) {
             py::gil_scoped_release r;
             return ValueOrThrow(c.c().StartRun(job, job_type, params)).id;
           })
      .def_static("hash_file",
                  [](const std::string& path) {
                    py::gil_scoped_release r;
                    return ValueOrThrow(Catalog::HashFile(path));
                  })
      .def("add_edge",
           [](PyCatalog& c, const std::string& run_id, bool input, const std::string& node, const std::string& detail,
              const std::string& hash) {
             Node n = ParseNode(node);
             n.hash = hash;
             py::gil_scoped_release r;
             ThrowIfError(c.c().AddEdge(catalog::Edge{run_id, input, n, detail}));
           },
           py::arg("run_id"), py::arg("input"), py::arg("node"), py::arg("detail"), py::arg("hash") = "")
      .def("finish_run",
           [](PyCatalog& c, const std::string& run_id, const std::string& state, const std::string& error) {
             catalog::RunState s = catalog::RunState::kAbort;
             if (state == "COMPLETE") s = catalog::RunState::kComplete;
             else if (state == "FAIL") s = catalog::RunState::kFail;
             else if (state == "ABORT") s = catalog::RunState::kAbort;
             else ThrowIfError(absl::InvalidArgumentError("state must be COMPLETE, FAIL or ABORT"));
             py::gil_scoped_release r;
             ThrowIfError(c.c().FinishRun(run_id, s, error));
           },
           py::arg("run_id"), py::arg("state"), py::arg("error") = "")
      .def("get_run",
           [](PyCatalog& c, const std::string& run_id) {
             catalog::RunInfo run;
             std::vector<catalog::Edge> edges;
             {
               py::gil_scoped_release r;
               run = ValueOrThrow(c.c().GetRun(run_id));
               edges = ValueOrThrow(c.c().RunEdges(run_id));
             }
             catalog::LineageGraph g;
             catalog::LineageStep step{run, {}, {}, 0};
             for (auto& e : edges) (e.input ? step.inputs : step.outputs).push_back(e);
             g.steps.push_back(std::move(step));
             return catalog::LineageJson(g, true);
           })
      .def("log_artifact",
           [](PyCatalog& c, const std::string& run_id, const std::string& path, const std::string& samples) {
             py::gil_scoped_release r;
             Node n = ValueOrThrow(c.c().LogArtifact(run_id, path, samples));
             return std::make_pair(n.name, n.hash);
           })
      .def("upstream",
           [](PyCatalog& c, const std::string& node, int depth) {
             Node n = ParseNode(node);
             py::gil_scoped_release r;
             return catalog::LineageJson(ValueOrThrow(c.c().Upstream(n, depth)), true);
           })
      .def("downstream",
           [](PyCatalog& c, const std::string& node, int depth) {
             Node n = ParseNode(node);
             py::gil_scoped_release r;
             return catalog::LineageJson(ValueOrThrow(c.c().Downstream(n, depth)), false);
           })
      .def("samples",
           [](PyCatalog& c, const std::string& node) {
             Node n = ParseNode(node);
             py::gil_scoped_release r;
             return catalog::SampleSetJson(ValueOrThrow(c.c().Samples(n)));
           })
      // ---- governance
      .def("authorize_table",
           [](PyCatalog& c, const std::string& arg, const std::string& privilege, const std::string& action,
              bool create) {
             auto p = ValueOrThrow(catalog::ParsePrivilege(privilege));
             py::gil_scoped_release r;
             return ValueOrThrow(catalog::AuthorizeTable(&c.c(), arg, p, action, create));
           },
           py::arg("arg"), py::arg("privilege"), py::arg("action"), py::arg("create") = false)
      .def(
          "read_guard",
          [](PyCatalog& c, const std::vector<std::string>& uris) {
            std::shared_ptr<const catalog::ReadGuard> g;
            {
              py::gil_scoped_release r;
              g = ValueOrThrow(catalog::ReadGuard::For(&c.c(), uris));
            }
            return std::const_pointer_cast<catalog::ReadGuard>(g);
          },
          py::arg("uris"), py::keep_alive<0, 1>())
      .def("dataset_of",
           [](PyCatalog& c, const std::string& uri) {
             py::gil_scoped_release r;
             return ValueOrThrow(c.c().ResolveTable(uri)).name;
           })
      .def("grant",
           [](PyCatalog& c, const std::string& who, const std::string& object, const std::string& privilege) {
             auto p = ValueOrThrow(catalog::ParsePrivilege(privilege));
             py::gil_scoped_release r;
             ThrowIfError(c.c().Grant(who, object, p));
           })
      .def("revoke",
           [](PyCatalog& c, const std::string& who, const std::string& object, const std::string& privilege) {
             auto p = ValueOrThrow(catalog::ParsePrivilege(privilege));
             py::gil_scoped_release r;
             ThrowIfError(c.c().Revoke(who, object, p));
           })
      .def("grants",
           [](PyCatalog& c, const std::string& object) {
             std::vector<catalog::GrantInfo> g;
             {
               py::gil_scoped_release r;
               g = ValueOrThrow(c.c().Grants(object));
             }
             py::list out;
             for (const auto& x : g) {
               out.append(py::make_tuple(x.principal, x.object, catalog::PrivilegeName(x.privilege), x.granted_by,
                                         x.granted_ms));
             }
             return out;
           },
           py::arg("object") = "")
      .def("has_privilege",
           [](PyCatalog& c, const std::string& who, const std::string& object, const std::string& privilege) {
             auto p = ValueOrThrow(catalog::ParsePrivilege(privilege));
             py::gil_scoped_release r;
             return ValueOrThrow(c.c().HasPrivilege(who, object, p));
           })
      .def("set_admin",
           [](PyCatalog& c, const std::string& who, bool admin) {
             py::gil_scoped_release r;
             ThrowIfError(c.c().SetAdmin(who, admin));
           })
      .def("set_clearances",
           [](PyCatalog& c, const std::string& who, const std::vector<std::string>& tags) {
             py::gil_scoped_release r;
             ThrowIfError(c.c().SetClearances(who, tags));
           })
      .def("principal_info",
           [](PyCatalog& c, const std::string& who) {
             catalog::PrincipalInfo p;
             {
               py::gil_scoped_release r;
               p = ValueOrThrow(c.c().GetPrincipal(who));
             }
             return py::make_tuple(p.name, p.admin, p.clearances);
           })
      .def("tag_column",
           [](PyCatalog& c, const std::string& ds, const std::string& col, const std::string& tag, bool remove) {
             py::gil_scoped_release r;
             ThrowIfError(remove ? c.c().UntagColumn(ds, col, tag) : c.c().TagColumn(ds, col, tag));
           },
           py::arg("dataset"), py::arg("column"), py::arg("tag"), py::arg("remove") = false)
      .def("column_tags",
           [](PyCatalog& c, const std::string& ds) {
             py::gil_scoped_release r;
             return ValueOrThrow(c.c().ColumnTags(ds));
           })
      .def("set_mask_policy",
           [](PyCatalog& c, const std::string& ds, const std::string& mode) {
             auto m = ValueOrThrow(catalog::ParseMaskMode(mode));
             py::gil_scoped_release r;
             ThrowIfError(c.c().SetMaskPolicy(ds, m));
           })
      .def("read_policy",
           [](PyCatalog& c, const std::string& ds) {
             catalog::ReadPolicy p;
             {
               py::gil_scoped_release r;
               p = ValueOrThrow(c.c().ReadPolicyFor(ds));
             }
             py::list cols;
             for (const auto& col : p.columns) cols.append(py::make_tuple(col.name, col.tags));
             return py::make_tuple(std::string(catalog::MaskModeName(p.mode)), cols, p.salt);
           })
      .def("audit",
           [](PyCatalog& c, const std::string& action, const std::string& object, const std::string& detail) {
             py::gil_scoped_release r;
             ThrowIfError(c.c().Audit(action, object, detail));
           },
           py::arg("action"), py::arg("object"), py::arg("detail") = "{}")
      .def("audit_events",
           [](PyCatalog& c, int64_t after, int64_t limit) {
             std::vector<catalog::AuditEvent> ev;
             {
               py::gil_scoped_release r;
               ev = ValueOrThrow(c.c().AuditEvents(after, limit));
             }
             py::list out;
             for (const auto& e : ev) {
               py::dict d;
               d["seq"] = e.seq;
               d["time_ms"] = e.time_ms;
               d["principal"] = e.principal;
               d["action"] = e.action;
               d["object"] = e.object;
               d["detail"] = e.detail_json;
               d["prev_hash"] = e.prev_hash;
               d["hash"] = e.hash;
               out.append(d);
             }
             return out;
           },
           py::arg("after") = 0, py::arg("limit") = 1000)
      .def("verify_audit", [](PyCatalog& c) {
        catalog::AuditVerifyResult v;
        {
          py::gil_scoped_release r;
          v = ValueOrThrow(c.c().VerifyAudit());
        }
        py::dict d;
        d["ok"] = v.ok;
        d["events"] = v.events;
        d["first_bad_seq"] = v.first_bad_seq;
        d["problem"] = v.problem;
        d["head_hash"] = v.head_hash;
        d["anchored"] = v.anchored;
        return d;
      });
}

}  // namespace flywheel::python
