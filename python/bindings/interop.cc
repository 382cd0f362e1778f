// flywheel._core bindings for ingest and Parquet (python/flywheel/interop.py
// is the public layer): read_parquet, parquet_schema, ingest.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>

#include "arrays.h"
#include "flywheel/interop/export.h"
#include "flywheel/interop/ingest.h"
#include "flywheel/interop/parquet/compression.h"
#include "flywheel/interop/parquet/convert.h"
#include "flywheel/interop/parquet/reader.h"
#include "status.h"

namespace py = pybind11;

namespace flywheel::python {
namespace {

// The file's columns as flywheel table columns (structs flattened, nested
// lists as JSON text: the mapping of ingest, docs/ingest.md).
py::dict ReadParquet(const std::string& path, const std::vector<std::string>& columns, int threads) {
  std::vector<std::pair<std::string, format::Column>> cols;
  {
    py::gil_scoped_release release;
    auto r = ValueOrThrow(interop::parquet::ParquetReader::Open(path));
    interop::parquet::ReadOptions o;
    o.columns = columns;
    o.threads = threads;
    std::vector<interop::parquet::Array> arrays = ValueOrThrow(r->ReadAll(o));
    std::vector<const interop::parquet::Field*> fields;
    for (const std::string& c : columns) {
      for (const auto& f : r->fields()) {
        if (f.name == c) fields.push_back(&f);
      }
    }
    if (columns.empty()) {
      for (const auto& f : r->fields()) fields.push_back(&f);
    }
    for (size_t i = 0; i < arrays.size(); ++i) {
      auto tf = ValueOrThrow(interop::parquet::ToTableFields(*fields[i]));
      auto tc = ValueOrThrow(interop::parquet::ToTableColumns(*fields[i], std::move(arrays[i])));
      for (size_t k = 0; k < tf.size(); ++k) cols.emplace_back(tf[k].name, std::move(tc[k]));
    }
  }
  py::dict out;
  for (auto& [name, c] : cols) out[py::str(name)] = ColumnToPython(c, /*writable=*/true);
  return out;
}

// [(name, parquet type text, nullable)] of the top-level fields, and the
// flywheel schema text ingest would create.
py::tuple ParquetSchema(const std::string& path) {
  auto r = ValueOrThrow(interop::parquet::ParquetReader::Open(path));
  py::list fields;
  format::Schema schema;
  for (const auto& f : r->fields()) {
    fields.append(py::make_tuple(f.name, interop::parquet::FieldTypeName(f), f.nullable));
    for (auto& tf : ValueOrThrow(interop::parquet::ToTableFields(f))) schema.fields.push_back(std::move(tf));
  }
  return py::make_tuple(fields, schema.ToString(), r->num_rows(), r->num_row_groups());
}

py::dict Ingest(const std::vector<std::string>& sources, const std::string& table, const std::string& format,
                const std::vector<std::string>& columns, int threads, const std::string& on_error,
                int64_t commit_every, const std::string& schema, const std::map<std::string, std::string>& overrides,
                const std::string& delimiter, bool header, py::object progress) {
  interop::IngestOptions o;
  o.sources = sources;
  o.table = table;
  o.format = ValueOrThrow(interop::ParseSourceFormat(format));
  o.columns = columns;
  o.threads = threads;
  o.on_error = ValueOrThrow(interop::ParseOnError(on_error));
  o.commit_every = commit_every;
  if (!schema.empty()) o.text.schema = ValueOrThrow(format::Schema::Parse(schema));
  o.text.overrides = overrides;
  if (delimiter.size() != 1) throw py::value_error("delimiter must be one character");
  o.text.delimiter = delimiter[0];
  o.text.header = header;
  o.command_line = "flywheel.ingest (Python)";
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  std::exception_ptr callback_error;
  // Called on this (the calling) thread with the GIL released: take it to
  // report progress and to notice Ctrl-C (KeyboardInterrupt cancels).
  o.progress = [&](const interop::IngestProgress& p) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      PyErr_Clear();
      cancel = true;
      return;
    }
    if (progress.is_none() || callback_error) return;
    try {
      py::dict d;
      d["files_done"] = p.files_done;
      d["files_total"] = p.files_total;
      d["files_failed"] = p.files_failed;
      d["rows"] = p.rows;
      d["bytes_done"] = p.bytes_done;
      d["bytes_total"] = p.bytes_total;
      d["seconds"] = p.seconds;
      progress(d);
    } catch (...) {
      callback_error = std::current_exception();
      cancel = true;
    }
  };
  Result<interop::IngestResult> r = absl::InternalError("not run");
  {
    py::gil_scoped_release release;
    r = interop::Ingest(o);
  }
  if (callback_error) std::rethrow_exception(callback_error);
  if (!r.ok() && absl::IsCancelled(r.status()) && cancel) {
    PyErr_SetString(PyExc_KeyboardInterrupt, "ingest interrupted; the table is at its last commit");
    throw py::error_already_set();
  }
  const interop::IngestResult& res = ValueOrThrow(std::move(r));
  py::dict out;
  out["rows"] = res.rows;
  out["versions"] = res.versions;
  out["seconds"] = res.seconds;
  out["files_failed"] = res.files_failed;
  py::list srcs;
  for (const auto& s : res.sources) {
    py::dict d;
    d["path"] = s.path;
    d["format"] = s.format;
    d["size"] = s.size;
    d["checksum"] = s.checksum;
    d["rows"] = s.rows;
    d["error"] = s.error.empty() ? py::object(py::none()) : py::object(py::str(s.error));
    d["skipped_entries"] = s.skipped_entries;
    srcs.append(d);
  }
  out["sources"] = srcs;
  return out;
}

int64_t ExportParquet(const std::string& uri, int64_t version, const std::string& path,
                      const std::vector<std::string>& columns, const std::string& codec, int64_t row_group_rows) {
  interop::ExportOptions o;
  o.columns = columns;
  o.row_group_rows = row_group_rows;
  o.writer.codec = ValueOrThrow(interop::parquet::ParseWritableCodec(codec));
  py::gil_scoped_release release;
  table::OpenOptions open;
  open.version = version;
  auto t = ValueOrThrow(table::Table::Open(uri, open));
  return ValueOrThrow(interop::ExportParquet(*t, path, o));
}

}  // namespace

void RegisterInterop(py::module_& m) {
  m.def("export_parquet", &ExportParquet, py::arg("uri"), py::arg("version"), py::arg("path"),
        py::arg("columns") = std::vector<std::string>{}, py::arg("codec") = "zstd",
        py::arg("row_group_rows") = 122880);
  m.def("read_parquet", &ReadParquet, py::arg("path"), py::arg("columns") = std::vector<std::string>{},
        py::arg("threads") = 0);
  m.def("parquet_schema", &ParquetSchema, py::arg("path"));
  m.def("ingest", &Ingest, py::arg("sources"), py::arg("table"), py::arg("format") = "auto",
        py::arg("columns") = std::vector<std::string>{}, py::arg("threads") = 0, py::arg("on_error") = "fail",
        py::arg("commit_every") = 0, py::arg("schema") = "",
        py::arg("overrides") = std::map<std::string, std::string>{}, py::arg("delimiter") = ",",
        py::arg("header") = true, py::arg("progress") = py::none());
}

}  // namespace flywheel::python
