// Table manifests: the complete description of one table version.
//
// A manifest lists the table's schema and its fragments (each: data files
// holding some of the fields, row count, deletion vector) plus the operation
// that produced the version. One manifest file per version, published with
// put-if-absent; docs/format/table.md specifies the file layout and JSON.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/types.h"

namespace flywheel::table {

inline constexpr int kTableFormatVersion = 1;

struct DataFile {
  std::string path;             // relative to the table root, e.g. "data/<id>.shard"
  std::vector<int32_t> field_ids;
  uint64_t size_bytes = 0;
};

struct DeletionFile {
  std::string path;             // relative, e.g. "deletions/<id>.dv"; empty = none
  int64_t count = 0;            // rows deleted
};

struct Fragment {
  int64_t id = 0;
  int64_t num_rows = 0;         // physical rows in each data file
  std::vector<DataFile> files;
  DeletionFile deletion;

  int64_t live_rows() const { return num_rows - deletion.count; }
};

struct Operation {
  std::string type;             // create, append, overwrite, delete, add_column, compact
  std::string writer;           // identity of the committing process
  std::map<std::string, std::string> properties;  // free-form (lineage goes here)
  std::map<std::string, std::string> details;     // what the operation did, for `log`
};

struct Manifest {
  int64_t version = 0;
  int64_t timestamp_ms = 0;
  Operation operation;
  format::Schema schema;        // every field has an id
  int32_t next_field_id = 0;
  int64_t next_fragment_id = 0;
  std::vector<Fragment> fragments;
  // Table settings chosen at create time that every writer follows
  // ("codec", "page_size", "zstd_level").
  std::map<std::string, std::string> config;

  int64_t num_rows() const;
  // Serialized form: a checksummed envelope around JSON (docs/format/table.md).
  std::string Encode() const;
  // `what` names the file in errors.
  static Result<Manifest> Decode(std::string_view data, std::string_view what);
};

// Schema <-> JSON text, also used by the CLI and Python layers.
std::string SchemaToJson(const format::Schema& schema);
Result<format::Schema> SchemaFromJson(std::string_view json);

}  // namespace flywheel::table
