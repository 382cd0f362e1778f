// flywheel._core.Table and _core.ScanIterator: versioned tables
// (src/flywheel/table/table.h) for the Python layer in python/flywheel/table.py.
//
// GIL: every call that can touch storage runs with the GIL released; Python
// objects are converted before and after, under the GIL.
//
// Locking: table::Table allows concurrent reads but no call concurrent with a
// write through the same handle. Python code shares handles between threads
// freely, so each handle carries a reader/writer lock, always taken after the
// GIL is released (so a thread waiting for the lock never holds the GIL and a
// thread holding the lock never waits for the GIL).
#include "flywheel/table/table.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "arrays.h"
#include "arrow.h"
#include "flywheel/catalog/read_policy.h"
#include "flywheel/format/arrow.h"
#include "flywheel/format/codec.h"
#include "status.h"
#include "types.h"

namespace flywheel::python {
namespace py = pybind11;

using format::Column;
using format::RecordBatch;
using format::Schema;
using table::Table;

using Properties = std::map<std::string, std::string>;

namespace {

// KeyError for a column the schema lacks; names the table and its columns.
[[noreturn]] void NoColumn(const std::string& name, const std::string& uri, const Schema& schema) {
  throw py::key_error(
      absl::StrCat("no column '", name, "' in table ", uri, " (columns: ", schema.ToString(), ")"));
}

void CheckColumns(const std::vector<std::string>& names, const std::string& uri,
                  const Schema& schema) {
  for (const auto& n : names) {
    if (schema.FieldIndex(n) < 0) NoColumn(n, uri, schema);
  }
}

// The table's logical types (config "logical_types": temporal columns, docs/arrow.md).
format::LogicalTypes LogicalTypesOf(const Table& t) {
  format::LogicalTypes out;
  auto it = t.manifest().config.find("logical_types");
  if (it == t.manifest().config.end()) return out;
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  for (const auto& [col, tag] : j.items()) {
    if (tag.is_string()) out[col] = tag.get<std::string>();
  }
  return out;
}

// Arrow data's temporal columns must be what the table holds (a timestamp in
// ms into a column of us would shift every value).
Status CheckLogicalTypes(const format::LogicalTypes& have, const format::LogicalTypes& table, const Schema& schema,
                         const std::string& what) {
  for (const auto& [col, tag] : have) {
    auto it = table.find(col);
    const std::string want = it == table.end() ? std::string() : it->second;
    if (tag != want) {
      const int i = schema.FieldIndex(col);
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": column '", col, "' is ", tag, " in the Arrow data but ",
          !want.empty() ? want : (i >= 0 ? schema.fields[static_cast<size_t>(i)].type.ToString() : "absent"),
          " in the table"));
    }
  }
  return absl::OkStatus();
}

table::TableOptions WriteOptions(const std::optional<std::string>& codec,
                                 std::optional<int64_t> page_size) {
  table::TableOptions o;
  if (codec) o.shard.codec = ValueOrThrow(format::ParseCodec(*codec));
  if (page_size) {
    if (*page_size <= 0)
      throw StatusError(absl::InvalidArgumentError("page_size must be positive"));
    o.shard.page_size = static_cast<size_t>(*page_size);
  }
  ThrowIfError(o.Validate());
  return o;
}

// The batch for `columns` (name -> column tuple) against `schema`. With
// `all_fields`, the batch has every field of the schema in order (Overwrite
// takes the batch schema as the new table schema): omitted nullable fields
// read null, omitted non-nullable ones are an error. Otherwise only the given
// fields (Append fills the rest with nulls or defaults).
RecordBatch BatchFromPython(const Schema& schema, const std::string& uri, const py::dict& columns,
                            bool all_fields) {
  if (columns.empty()) throw py::value_error(absl::StrCat("no columns given for table ", uri));
  RecordBatch b;
  std::string first_name;
  std::vector<std::pair<int, Column>> given;
  const auto index = schema.NameIndex();
  for (auto [key, value] : columns) {
    const std::string name = py::cast<std::string>(key);
    const auto found = index.find(name);
    const int i = found == index.end() ? -1 : found->second;
    if (i < 0) NoColumn(name, uri, schema);
    Column c = ColumnFromPython(schema.fields[i], value);
    if (given.empty()) {
      b.num_rows = c.length;
      first_name = name;
    } else if (c.length != b.num_rows) {
      throw py::value_error(absl::StrCat("column '", name, "' has ", c.length, " rows but column '",
                                         first_name, "' has ", b.num_rows));
    }
    given.emplace_back(i, std::move(c));
  }
  if (!all_fields) {
    for (auto& [i, c] : given) {
      b.schema.fields.push_back(schema.fields[i]);
      b.columns.push_back(std::move(c));
    }
    return b;
  }
  std::vector<int> given_at(static_cast<size_t>(schema.num_fields()), -1);  // field -> index in `given`
  for (size_t g = 0; g < given.size(); ++g) given_at[static_cast<size_t>(given[g].first)] = static_cast<int>(g);
  for (int i = 0; i < schema.num_fields(); ++i) {
    const format::Field& f = schema.fields[i];
    const int g = given_at[static_cast<size_t>(i)];
    b.schema.fields.push_back(f);
    if (g >= 0) {
      b.columns.push_back(std::move(given[static_cast<size_t>(g)].second));
    } else if (f.nullable) {
      b.columns.push_back(format::MakeNullColumn(f.type, b.num_rows, true));
    } else {
      throw py::value_error(absl::StrCat("column '", f.name, "' is missing and is not nullable"));
    }
  }
  return b;
}

table::CommitOptions Commit(Properties p) { return table::CommitOptions{std::move(p)}; }

// The catalog's column rules for the reader (null: none); reads mask in C++.
using Guard = std::shared_ptr<catalog::ReadGuard>;

// Scan batches cross as _core.ArrowBatch (to_dict() and the Arrow capsules).
class PyScan {
 public:
  PyScan(std::unique_ptr<table::ScanIterator> it, format::LogicalTypes logical, Guard guard)
      : it_(std::move(it)), logical_(std::move(logical)), guard_(std::move(guard)) {}

  py::object Next() {
    std::optional<RecordBatch> batch;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      if (it_) {
        batch = ValueOrThrow(it_->Next());
        if (!batch) it_.reset();  // drop the snapshot (and its open files) at the end
        if (batch && guard_) batch = ValueOrThrow(guard_->Mask(std::move(*batch)));
      }
    }
    if (!batch) throw py::stop_iteration();
    return WrapBatch(std::move(*batch), logical_);
  }

 private:
  std::mutex mu_;
  std::unique_ptr<table::ScanIterator> it_;
  const format::LogicalTypes logical_;
  const Guard guard_;
};

class PyTable {
 private:
  // (Defined first: member templates returning auto must precede their uses.)
  // Runs f(const Table&) without the GIL, under the shared lock.
  template <typename F>
  auto Read(F&& f) const {
    py::gil_scoped_release nogil;
    std::shared_lock<std::shared_mutex> lock(mu_);
    return f(static_cast<const Table&>(*t_));
  }
  // Runs f(Table&) without the GIL, under the exclusive lock.
  template <typename F>
  auto Write(F&& f) {
    py::gil_scoped_release nogil;
    std::unique_lock<std::shared_mutex> lock(mu_);
    return f(*t_);
  }

  std::pair<Schema, std::string> SchemaAndUri() const {
    return Read([](const Table& t) { return std::make_pair(t.schema(), t.uri()); });
  }

  // Runs without the GIL: pybind11's builtin exceptions only touch Python
  // when translated, after the GIL is re-taken.
  static void CheckColumnsNoGil(const Table& t, const std::vector<std::string>& names) {
    CheckColumns(names, t.uri(), t.schema());
  }

 public:
  // The logical types are fixed when the table is created (config), so one
  // parse serves the handle's life.
  explicit PyTable(std::shared_ptr<Table> t) : t_(std::move(t)), logical_(LogicalTypesOf(*t_)) {}

  static std::shared_ptr<PyTable> Create(const std::string& path,
                                         const std::vector<FieldTuple>& fields,
                                         const std::string& codec, std::optional<int64_t> page_size,
                                         Properties properties) {
    const Schema schema = SchemaFromTuples(fields);
    // Create records codec and page size in the table config; later handles follow it.
    const table::TableOptions options = WriteOptions(codec, page_size);
    py::gil_scoped_release nogil;
    return std::make_shared<PyTable>(
        ValueOrThrow(Table::Create(path, schema, options, Commit(properties))));
  }

  static std::shared_ptr<PyTable> Open(const std::string& path, std::optional<int64_t> version,
                                       std::optional<std::string> tag) {
    if (version && tag) throw py::value_error("give version or tag, not both");
    table::OpenOptions open;
    open.version = version;
    open.tag = std::move(tag);
    py::gil_scoped_release nogil;
    return std::make_shared<PyTable>(ValueOrThrow(Table::Open(path, open)));
  }

  // ---- snapshot properties
  std::string Path() const {
    return Read([](const Table& t) { return t.uri(); });
  }
  int64_t Version() const {
    return Read([](const Table& t) { return t.version(); });
  }
  int64_t NumRows() const {
    return Read([](const Table& t) { return t.num_rows(); });
  }
  std::map<std::string, std::string> Config() const {
    return Read([](const Table& t) { return t.manifest().config; });
  }
  std::vector<FieldTuple> Fields() const {
    return SchemaToTuples(Read([](const Table& t) { return t.schema(); }));
  }

  // ---- versions
  // This version's data files (absolute paths), from its manifest.
  std::vector<std::string> DataFiles() const {
    return Read([](const Table& t) {
      std::vector<std::string> out;
      for (const auto& frag : t.manifest().fragments) {
        for (const auto& f : frag.files) out.push_back(absl::StrCat(t.uri(), "/", f.path));
      }
      return out;
    });
  }

  py::dict LeafStats(const std::string& column) const {
    auto stats = Read([&](const Table& t) { return ValueOrThrow(t.LeafStatistics(column)); });
    py::dict out;
    for (const auto& [path, st] : stats) {
      py::dict d;
      d["values"] = st.values;
      d["nulls"] = st.nulls;
      if (st.has_bounds && st.text) {
        d["min"] = py::bytes(st.min_text);
        d["max"] = py::bytes(st.max_text);
      } else if (st.has_bounds) {
        d["min"] = st.min;
        d["max"] = st.max;
      }
      if (st.bounds_incomplete) d["bounds_incomplete"] = true;
      out[py::str(path)] = d;
    }
    return out;
  }

  py::list Versions() const {
    auto versions = Read([](const Table& t) { return ValueOrThrow(t.Versions()); });
    py::list out;
    for (const auto& v : versions) {
      py::dict d;
      d["version"] = v.version;
      d["timestamp_ms"] = v.timestamp_ms;
      d["operation"] = v.operation.type;
      d["writer"] = v.operation.writer;
      d["properties"] = v.operation.properties;
      d["details"] = v.operation.details;
      d["num_rows"] = v.num_rows;
      d["num_fragments"] = v.num_fragments;
      out.append(std::move(d));
    }
    return out;
  }
  int64_t LatestVersion() const {
    return Read([](const Table& t) { return ValueOrThrow(t.LatestVersion()); });
  }
  std::shared_ptr<PyTable> Checkout(int64_t version) const {
    return std::make_shared<PyTable>(
        Read([&](const Table& t) { return ValueOrThrow(t.Checkout(version)); }));
  }
  std::shared_ptr<PyTable> CheckoutLatest() const {
    return std::make_shared<PyTable>(
        Read([](const Table& t) { return ValueOrThrow(t.CheckoutLatest()); }));
  }

  // ---- reads
  std::unique_ptr<PyScan> Scan(std::vector<std::string> columns, int64_t batch_rows, Guard guard) const {
    return std::make_unique<PyScan>(Read([&](const Table& t) {
      CheckColumnsNoGil(t, columns);
      return ValueOrThrow(t.Scan(table::ScanOptions{std::move(columns), batch_rows}));
    }), logical_, std::move(guard));
  }

  // Rows as a _core.ArrowBatch (to_dict() and the Arrow capsules).
  py::object Take(const py::array_t<int64_t, py::array::c_style>& indices,
                  std::vector<std::string> columns, Guard guard) const {
    if (indices.ndim() != 1) throw py::value_error("indices must be 1-d");
    std::vector<int64_t> idx(indices.data(), indices.data() + indices.shape(0));
    RecordBatch b = Read([&](const Table& t) {
      CheckColumnsNoGil(t, columns);
      RecordBatch taken = ValueOrThrow(t.Take(idx, columns));
      return guard ? ValueOrThrow(guard->Mask(std::move(taken))) : taken;
    });
    return WrapBatch(std::move(b), logical_);
  }

  // ---- Arrow (docs/arrow.md)

  // An arrow_array_stream capsule over a scan of this version.
  py::capsule ArrowStream(std::vector<std::string> columns, std::optional<std::string> where,
                          int64_t batch_rows, Guard guard) const {
    table::ScanOptions o{columns, batch_rows, std::nullopt};
    if (where) o.where = ValueOrThrow(table::Predicate::Parse(*where));
    auto [scan, schema] = Read([&](const Table& t) {
      CheckColumnsNoGil(t, columns);
      Schema s;
      if (columns.empty()) s = t.schema();
      for (const auto& n : columns) s.fields.push_back(t.schema().fields[t.schema().FieldIndex(n)]);
      return std::make_pair(std::shared_ptr<table::ScanIterator>(ValueOrThrow(t.Scan(o))), s);
    });
    if (!guard) return StreamCapsule(std::move(schema), [scan = std::move(scan)]() { return scan->Next(); }, logical_);
    return StreamCapsule(
        guard->MaskedSchema(std::move(schema)),
        [scan = std::move(scan), guard]() -> Result<std::optional<RecordBatch>> {
          FW_ASSIGN_OR_RETURN(std::optional<RecordBatch> b, scan->Next());
          if (!b) return b;
          FW_ASSIGN_OR_RETURN(RecordBatch masked, guard->Mask(std::move(*b)));
          return std::optional<RecordBatch>(std::move(masked));
        },
        logical_);
  }

  py::capsule ArrowSchemaCapsule() const {
    return SchemaCapsule(Read([](const Table& t) { return t.schema(); }), &logical_);
  }

  // Appends every batch of an Arrow source as one version; nothing is
  // committed when any batch fails. Returns the rows appended.
  int64_t AppendArrow(py::handle data, Properties properties) {
    std::unique_ptr<ArrowInput> in = OpenArrow(data);
    return Write([&](Table& t) {
      const Schema schema = t.schema();
      const std::string what = absl::StrCat("append to ", t.uri());
      std::unique_ptr<table::AppendTransaction> txn = t.BeginAppend();
      ThrowIfError(ReadArrow(
          *in,
          [&](const Schema&, const format::LogicalTypes& logical) {
            return CheckLogicalTypes(logical, logical_, schema, what);
          },
          [&](RecordBatch b) -> Status {
            FW_ASSIGN_OR_RETURN(RecordBatch c, format::ConformImported(std::move(b), schema, what));
            return c.num_rows == 0 ? Status() : txn->Write(c);
          }));
      const int64_t rows = txn->rows();
      if (rows > 0) ThrowIfError(txn->Commit(Commit(std::move(properties))));
      return rows;
    });
  }

  // A new table with an Arrow source's schema (version 1) and its rows
  // (version 2, when there are any).
  static std::shared_ptr<PyTable> CreateArrow(const std::string& path, py::handle data, const std::string& codec,
                                              std::optional<int64_t> page_size, Properties properties) {
    std::unique_ptr<ArrowInput> in = OpenArrow(data);
    table::TableOptions options = WriteOptions(codec, page_size);
    py::gil_scoped_release nogil;
    std::shared_ptr<Table> t;
    std::unique_ptr<table::AppendTransaction> txn;
    Status st = ReadArrow(
        *in,
        [&](const Schema& s, const format::LogicalTypes& logical) -> Status {
          if (!logical.empty()) options.extra_config["logical_types"] = nlohmann::json(logical).dump();
          FW_ASSIGN_OR_RETURN(t, Table::Create(path, s, options, Commit(properties)));
          txn = t->BeginAppend();
          return absl::OkStatus();
        },
        [&](RecordBatch b) -> Status {
          FW_ASSIGN_OR_RETURN(RecordBatch c,
                              format::ConformImported(std::move(b), t->schema(), absl::StrCat("create ", path)));
          return c.num_rows == 0 ? Status() : txn->Write(c);
        });
    if (st.ok() && txn->rows() > 0) st = txn->Commit(Commit(properties));
    txn.reset();
    ThrowIfError(st);
    return std::make_shared<PyTable>(std::move(t));
  }

  // ---- writes
  void Append(const py::dict& columns, Properties properties) {
    const auto [schema, uri] = SchemaAndUri();
    RecordBatch b = BatchFromPython(schema, uri, columns, /*all_fields=*/false);
    Write([&](Table& t) { ThrowIfError(t.Append(b, Commit(std::move(properties)))); });
  }

  void Overwrite(const py::dict& columns, std::optional<std::vector<FieldTuple>> fields,
                 Properties properties) {
    auto [schema, uri] = SchemaAndUri();
    if (fields) schema = SchemaFromTuples(*fields);
    RecordBatch b = BatchFromPython(schema, uri, columns, /*all_fields=*/true);
    Write([&](Table& t) { ThrowIfError(t.Overwrite(b, Commit(std::move(properties)))); });
  }

  int64_t Delete(const py::array_t<int64_t, py::array::c_style>& indices, Properties properties) {
    if (indices.ndim() != 1) throw py::value_error("indices must be 1-d");
    std::vector<int64_t> idx(indices.data(), indices.data() + indices.shape(0));
    return Write([&](Table& t) {
      ThrowIfError(t.Delete(idx, Commit(std::move(properties))));
      std::sort(idx.begin(), idx.end());
      return static_cast<int64_t>(std::unique(idx.begin(), idx.end()) - idx.begin());
    });
  }

  int64_t DeleteWhere(const std::string& where, Properties properties) {
    const table::Predicate pred = ValueOrThrow(table::Predicate::Parse(where));
    const auto [schema, uri] = SchemaAndUri();
    if (schema.FieldIndex(pred.TopColumn(schema)) < 0) NoColumn(pred.TopColumn(schema), uri, schema);
    return Write(
        [&](Table& t) { return ValueOrThrow(t.DeleteWhere(pred, Commit(std::move(properties)))); });
  }

  void AddColumn(const std::string& name, const std::string& type, bool nullable,
                 const std::string& default_json, Properties properties) {
    const format::Field f = FieldFromTuple({name, type, nullable, default_json});
    Write([&](Table& t) { ThrowIfError(t.AddColumn(f, Commit(std::move(properties)))); });
  }

  int64_t Compact(std::optional<int64_t> target_rows, std::optional<double> max_deleted_fraction,
                  Properties properties) {
    table::CompactOptions o;
    if (target_rows) o.target_rows = *target_rows;
    if (max_deleted_fraction) o.max_deleted_fraction = *max_deleted_fraction;
    return Write(
        [&](Table& t) { return ValueOrThrow(t.Compact(o, Commit(std::move(properties)))); });
  }

  // ---- version management
  void Tag(const std::string& name, std::optional<int64_t> version) {
    Write([&](Table& t) { ThrowIfError(t.Tag(name, version)); });
  }
  void Untag(const std::string& name) {
    Write([&](Table& t) { ThrowIfError(t.Untag(name)); });
  }
  std::map<std::string, int64_t> Tags() const {
    return Read([](const Table& t) { return ValueOrThrow(t.Tags()); });
  }

  std::vector<int64_t> Expire(int64_t keep_last, std::optional<int64_t> older_than_ms) {
    table::ExpireOptions o;
    o.keep_last = keep_last;
    if (older_than_ms) o.older_than_ms = *older_than_ms;
    return Write([&](Table& t) { return ValueOrThrow(t.Expire(o)).expired; });
  }

  py::tuple Vacuum(int64_t grace_ms, bool dry_run) {
    if (grace_ms < 0) throw py::value_error("grace period must be >= 0");
    table::VacuumResult r = Write([&](Table& t) {
      return ValueOrThrow(t.Vacuum(table::VacuumOptions{grace_ms, dry_run}));
    });
    return py::make_tuple(r.deleted, r.bytes_freed);
  }

 private:
  std::shared_ptr<Table> t_;
  const format::LogicalTypes logical_;
  mutable std::shared_mutex mu_;
};

}  // namespace

void RegisterTable(py::module_& m) {
  m.def(
      "predicate_column",
      [](const std::string& where) { return ValueOrThrow(table::Predicate::Parse(where)).column; },
      py::arg("where"), "The column a 'column OP value' predicate reads (ValueError if it is malformed).");
  py::class_<PyScan>(m, "ScanIterator", "Batches of one table version; see Table.scan.")
      .def("__iter__", [](PyScan& s) -> PyScan& { return s; })
      .def("__next__", &PyScan::Next);

  py::class_<PyTable, std::shared_ptr<PyTable>>(
      m, "Table", "A handle on one version of a table; see flywheel.Table.")
      .def_static("create", &PyTable::Create, py::arg("path"), py::arg("fields"),
                  py::arg("codec") = "none", py::arg("page_size") = py::none(),
                  py::arg("properties") = Properties{})
      .def_static("open", &PyTable::Open, py::arg("path"), py::arg("version") = py::none(),
                  py::arg("tag") = py::none())
      .def_property_readonly("path", &PyTable::Path)
      .def_property_readonly("version", &PyTable::Version)
      .def_property_readonly("num_rows", &PyTable::NumRows)
      .def("fields", &PyTable::Fields)
      .def("config", &PyTable::Config)
      .def("versions", &PyTable::Versions)
      .def("data_files", &PyTable::DataFiles)
      .def("leaf_stats", &PyTable::LeafStats, py::arg("column"))
      .def("latest_version", &PyTable::LatestVersion)
      .def("checkout", &PyTable::Checkout, py::arg("version"))
      .def("checkout_latest", &PyTable::CheckoutLatest)
      .def("scan", &PyTable::Scan, py::arg("columns") = std::vector<std::string>{},
           py::arg("batch_rows") = 0, py::arg("guard") = py::none())
      .def("take", &PyTable::Take, py::arg("indices"),
           py::arg("columns") = std::vector<std::string>{}, py::arg("guard") = py::none())
      .def("arrow_stream", &PyTable::ArrowStream, py::arg("columns") = std::vector<std::string>{},
           py::arg("where") = py::none(), py::arg("batch_rows") = 0, py::arg("guard") = py::none())
      .def("arrow_schema", &PyTable::ArrowSchemaCapsule)
      .def("append_arrow", &PyTable::AppendArrow, py::arg("data"), py::arg("properties") = Properties{})
      .def_static("create_arrow", &PyTable::CreateArrow, py::arg("path"), py::arg("data"), py::arg("codec"),
                  py::arg("page_size"), py::arg("properties"))
      .def("append", &PyTable::Append, py::arg("columns"), py::arg("properties") = Properties{})
      .def("overwrite", &PyTable::Overwrite, py::arg("columns"), py::arg("fields") = py::none(),
           py::arg("properties") = Properties{})
      .def("delete", &PyTable::Delete, py::arg("indices"), py::arg("properties") = Properties{})
      .def("delete_where", &PyTable::DeleteWhere, py::arg("where"),
           py::arg("properties") = Properties{})
      .def("add_column", &PyTable::AddColumn, py::arg("name"), py::arg("type"), py::arg("nullable"),
           py::arg("default_json"), py::arg("properties") = Properties{})
      .def("compact", &PyTable::Compact, py::arg("target_rows") = py::none(),
           py::arg("max_deleted_fraction") = py::none(), py::arg("properties") = Properties{})
      .def("tag", &PyTable::Tag, py::arg("name"), py::arg("version") = py::none())
      .def("untag", &PyTable::Untag, py::arg("name"))
      .def("tags", &PyTable::Tags)
      .def("expire", &PyTable::Expire, py::arg("keep_last"), py::arg("older_than_ms") = py::none())
      .def("vacuum", &PyTable::Vacuum, py::arg("grace_ms"), py::arg("dry_run"));
}

}  // namespace flywheel::python
