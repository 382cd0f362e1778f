// `flywheel table ...`: create, append, show, head, log, tag, delete,
// add-column, compact, expire, vacuum.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/catalog/read_policy.h"
#include "flywheel/cli/json_rows.h"
#include "flywheel/table/table.h"

namespace flywheel::cli {
namespace {

using table::Table;

struct Common {
  std::string path;
  int64_t version = -1;
  std::string tag;
};

Result<std::shared_ptr<Table>> OpenTable(const Common& c) {
  table::OpenOptions o;
  if (c.version >= 0) o.version = c.version;
  if (!c.tag.empty()) o.tag = c.tag;
  FW_ASSIGN_OR_RETURN(std::string path, AuthorizedTable(c.path, catalog::Privilege::kRead, "open"));
  return Table::Open(path, o);
}

// A table named by path or dataset, checked for `p` when a catalog is configured.
Result<std::shared_ptr<Table>> OpenNamedTable(const std::string& arg,
                                              catalog::Privilege p = catalog::Privilege::kWrite,
                                              const char* action = "write") {
  FW_ASSIGN_OR_RETURN(std::string path, AuthorizedTable(arg, p, action));
  return Table::Open(path);
}

std::string FormatTime(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

Result<std::map<std::string, std::string>> ParseProperties(const std::vector<std::string>& kvs) {
  std::map<std::string, std::string> out;
  for (const auto& kv : kvs) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("property '", kv, "' is not KEY=VALUE"));
    }
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

void AddVersionFlags(CLI::App* cmd, Common* c) {
  cmd->add_option("--version", c->version, "Read this version (default: latest)")->check(AtLeast(1));
  cmd->add_option("--tag", c->tag, "Read the version this tag names");
}

}  // namespace

void AddTableCommands(CLI::App& app, int* rc) {
  CLI::App* grp = app.add_subcommand("table", "Create, change and inspect versioned tables");
  grp->require_subcommand(1);

  // ---- create
  {
    auto* cmd = grp->add_subcommand("create", "Create an empty table with a schema");
    auto path = std::make_shared<std::string>();
    auto schema = std::make_shared<std::string>();
    auto codec = std::make_shared<std::string>("none");
    auto page_size = std::make_shared<int64_t>(0);
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->add_option("--schema", *schema,
                    "Columns as name:type, comma separated; '?' marks nullable.\n"
                    "Types: bool int8..int64 uint8..uint64 float16 float32 float64,\n"
                    "tensors like float32[16] or uint8[32,32,3], string, binary, list<int32>")
        ->required();
    cmd->add_option("--codec", *codec, "Page codec of every data file the table gets: none, lz4, zstd")
        ->capture_default_str();
    cmd->add_option("--page-size", *page_size, "Target page size in bytes (default 262144)")
        ->check(AtLeast(1));
    cmd->callback([=] {
      auto s = format::Schema::Parse(*schema);
      if (!s.ok()) return void(*rc = Fail(s.status()));
      auto c = format::ParseCodec(*codec);
      if (!c.ok()) return void(*rc = Fail(c.status()));
      table::TableOptions to;
      to.shard.codec = *c;
      if (*page_size > 0) to.shard.page_size = static_cast<size_t>(*page_size);
      auto where = AuthorizedTable(*path, catalog::Privilege::kWrite, "create", /*for_create=*/true);
      if (!where.ok()) return void(*rc = Fail(where.status()));
      auto t = Table::Create(*where, *s, to);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      RecordTableWrite("create", **t, 0);
      std::printf("created %s (version 1): %s\n", path->c_str(), s->ToString().c_str());
    });
  }

  // ---- append
  {
    auto* cmd = grp->add_subcommand("append", "Append rows from JSON lines (one object per line)");
    auto path = std::make_shared<std::string>();
    auto input = std::make_shared<std::string>("-");
    auto props = std::make_shared<std::vector<std::string>>();
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->add_option("--jsonl", *input, "JSON lines file, or - for standard input")->capture_default_str();
    cmd->add_option("--property", *props, "KEY=VALUE recorded with the commit (repeatable)");
    cmd->callback([=] {
      auto t = OpenNamedTable(*path);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      std::ifstream file;
      std::istream* in = &std::cin;
      if (*input != "-") {
        file.open(*input);
        if (!file) return void(*rc = Fail(absl::NotFoundError(absl::StrCat("cannot open ", *input))));
        in = &file;
      }
      auto batch = ReadJsonLines(*in, *input == "-" ? "<stdin>" : *input, (*t)->schema());
      if (!batch.ok()) return void(*rc = Fail(batch.status()));
      auto p = ParseProperties(*props);
      if (!p.ok()) return void(*rc = Fail(p.status()));
      const int64_t before = (*t)->version();
      Status s = (*t)->Append(*batch, table::CommitOptions{*p});
      if (!s.ok()) return void(*rc = Fail(s));
      RecordTableWrite("append", **t, before);
      std::printf("appended %lld rows to %s: version %lld, %lld rows\n",
                  static_cast<long long>(batch->num_rows), path->c_str(),
                  static_cast<long long>((*t)->version()), static_cast<long long>((*t)->num_rows()));
    });
  }

  // ---- show
  {
    auto* cmd = grp->add_subcommand("show", "Show a version's schema, size, fragments and tags");
    auto c = std::make_shared<Common>();
    cmd->add_option("path", c->path, "Table directory")->required();
    AddVersionFlags(cmd, c.get());
    cmd->callback([=] {
      auto t = OpenTable(*c);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      const auto& m = (*t)->manifest();
      uint64_t bytes = 0;
      int64_t deleted = 0;
      for (const auto& f : m.fragments) {
        for (const auto& df : f.files) bytes += df.size_bytes;
        deleted += f.deletion.count;
      }
      auto latest = (*t)->LatestVersion();
      std::printf("table    %s\n", c->path.c_str());
      std::printf("version  %lld%s\n", static_cast<long long>(m.version),
                  latest.ok() && *latest == m.version ? " (latest)" : "");
      std::printf("created  %s UTC by %s (%s)\n", FormatTime(m.timestamp_ms).c_str(),
                  m.operation.writer.c_str(), m.operation.type.c_str());
      std::printf("rows     %lld (%lld deleted rows not yet compacted)\n",
                  static_cast<long long>(m.num_rows()), static_cast<long long>(deleted));
      std::printf("data     %zu fragments, %s\n", m.fragments.size(), HumanBytes(bytes).c_str());
      if (m.config.count("codec")) {
        std::printf("storage  codec %s, pages of %s bytes\n", m.config.at("codec").c_str(),
                    m.config.count("page_size") ? m.config.at("page_size").c_str() : "?");
      }
      std::printf("schema\n");
      for (const auto& f : m.schema.fields) {
        std::printf("  %-20s %s%s%s\n", f.name.c_str(), f.type.ToString().c_str(), f.nullable ? " (nullable)" : "",
                    f.default_json.empty() ? "" : (" default " + f.default_json).c_str());
      }
      auto tags = (*t)->Tags();
      if (tags.ok() && !tags->empty()) {
        std::printf("tags\n");
        for (const auto& [name, v] : *tags) std::printf("  %-20s version %lld\n", name.c_str(), static_cast<long long>(v));
      }
    });
  }

  // ---- head
  {
    auto* cmd = grp->add_subcommand("head", "Print the first rows");
    auto c = std::make_shared<Common>();
    auto n = std::make_shared<int64_t>(10);
    auto columns = std::make_shared<std::vector<std::string>>();
    auto as_json = std::make_shared<bool>(false);
    cmd->add_option("path", c->path, "Table directory")->required();
    cmd->add_option("-n,--rows", *n, "Number of rows")->capture_default_str()->check(AtLeast(0));
    cmd->add_option("--columns", *columns, "Columns to print (default: all)")->delimiter(',');
    cmd->add_flag("--json", *as_json, "Print JSON lines instead of a text table");
    AddVersionFlags(cmd, c.get());
    cmd->callback([=] {
      auto t = OpenTable(*c);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      const int64_t rows = std::min(*n, (*t)->num_rows());
      std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(rows, 0)));
      for (int64_t i = 0; i < rows; ++i) idx[i] = i;
      // Masked or refused per the catalog, as the Python API and the Loader do.
      auto guard = ReadGuardFor(**t);
      if (!guard.ok()) return void(*rc = Fail(guard.status()));
      if (Status s = (*guard)->CheckRead(*columns); !s.ok()) return void(*rc = Fail(s));
      auto taken = (*t)->Take(idx, *columns);
      if (!taken.ok()) return void(*rc = Fail(taken.status()));
      auto b = (*guard)->Mask(*std::move(taken));
      if (!b.ok()) return void(*rc = Fail(b.status()));
      if (*as_json) {
        for (int64_t r = 0; r < b->num_rows; ++r) std::printf("%s\n", RowToJson(*b, r).c_str());
        return;
      }
      std::vector<std::vector<std::string>> cells(b->columns.size());
      std::vector<size_t> width(b->columns.size());
      for (size_t f = 0; f < b->columns.size(); ++f) {
        width[f] = b->schema.fields[f].name.size();
        for (int64_t r = 0; r < b->num_rows; ++r) {
          cells[f].push_back(CellToText(b->columns[f], r, 40));
          width[f] = std::max(width[f], cells[f].back().size());
        }
      }
      for (size_t f = 0; f < b->columns.size(); ++f) std::printf("%-*s  ", static_cast<int>(width[f]), b->schema.fields[f].name.c_str());
      std::printf("\n");
      for (int64_t r = 0; r < b->num_rows; ++r) {
        for (size_t f = 0; f < b->columns.size(); ++f) std::printf("%-*s  ", static_cast<int>(width[f]), cells[f][r].c_str());
        std::printf("\n");
      }
      std::printf("(%lld of %lld rows, version %lld)\n", static_cast<long long>(b->num_rows),
                  static_cast<long long>((*t)->num_rows()), static_cast<long long>((*t)->version()));
    });
  }

  // ---- log
  {
    auto* cmd = grp->add_subcommand("log", "List retained versions with their operations");
    auto path = std::make_shared<std::string>();
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->callback([=] {
      auto t = OpenNamedTable(*path, catalog::Privilege::kRead, "open");
      if (!t.ok()) return void(*rc = Fail(t.status()));
      auto versions = (*t)->Versions();
      if (!versions.ok()) return void(*rc = Fail(versions.status()));
      auto tags = (*t)->Tags();
      std::map<int64_t, std::string> tag_of;
      if (tags.ok()) {
        for (const auto& [name, v] : *tags) tag_of[v] += (tag_of[v].empty() ? "" : ",") + name;
      }
      std::printf("%-8s %-19s %-11s %10s  %-24s %s\n", "version", "time (UTC)", "operation", "rows", "writer", "details");
      for (const auto& v : *versions) {
        std::string details;
        for (const auto& [k, val] : v.operation.details) details += k + "=" + val + " ";
        for (const auto& [k, val] : v.operation.properties) details += k + "=" + val + " ";
        if (tag_of.count(v.version)) details += "tags=" + tag_of[v.version];
        std::printf("%-8lld %-19s %-11s %10lld  %-24s %s\n", static_cast<long long>(v.version),
                    FormatTime(v.timestamp_ms).c_str(), v.operation.type.c_str(),
                    static_cast<long long>(v.num_rows), v.operation.writer.c_str(), details.c_str());
      }
    });
  }

  // ---- tag
  {
    auto* cmd = grp->add_subcommand("tag", "Name a version (tagged versions are never expired)");
    auto path = std::make_shared<std::string>();
    auto name = std::make_shared<std::string>();
    auto version = std::make_shared<int64_t>(-1);
    auto del = std::make_shared<bool>(false);
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->add_option("name", *name, "Tag name (letters, digits, - _ .)")->required();
    cmd->add_option("--version", *version, "Version to tag (default: latest)")->check(AtLeast(1));
    cmd->add_flag("-d,--delete", *del, "Remove the tag instead");
    cmd->callback([=] {
      auto t = OpenNamedTable(*path);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      if (*del) {
        Status s = (*t)->Untag(*name);
        if (!s.ok()) return void(*rc = Fail(s));
        std::printf("removed tag %s\n", name->c_str());
        return;
      }
      Status s = (*t)->Tag(*name, *version >= 0 ? std::optional<int64_t>(*version) : std::nullopt);
      if (!s.ok()) return void(*rc = Fail(s));
      std::printf("tagged version %lld as %s\n",
                  static_cast<long long>(*version >= 0 ? *version : (*t)->version()), name->c_str());
    });
  }

  // ---- delete
  {
    auto* cmd = grp->add_subcommand("delete", "Delete rows by predicate or by row index");
    auto path = std::make_shared<std::string>();
    auto where = std::make_shared<std::string>();
    auto rows = std::make_shared<std::vector<int64_t>>();
    cmd->add_option("path", *path, "Table directory")->required();
    auto* w = cmd->add_option("--where", *where, "Predicate 'column OP value', OP in == != < <= > >=");
    auto* r = cmd->add_option("--rows", *rows, "Row indices of the latest version, comma separated")
                  ->delimiter(',')
                  ->check(AtLeast(0));
    w->excludes(r);
    cmd->callback([=] {
      if (where->empty() && rows->empty()) {
        return void(*rc = Fail(absl::InvalidArgumentError("give --where or --rows")));
      }
      auto t = OpenNamedTable(*path);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      int64_t n = 0;
      const int64_t before = (*t)->version();
      if (!where->empty()) {
        auto p = table::Predicate::Parse(*where);
        if (!p.ok()) return void(*rc = Fail(p.status()));
        // A predicate reads its column: which rows match would tell an
        // uncleared principal about a tagged column, so it is refused as a read is.
        auto guard = ReadGuardFor(**t);
        if (!guard.ok()) return void(*rc = Fail(guard.status()));
        if (Status s = (*guard)->CheckPredicate(p->column, "'" + *path + "'", "delete"); !s.ok()) {
          return void(*rc = Fail(s));
        }
        auto d = (*t)->DeleteWhere(*p);
        if (!d.ok()) return void(*rc = Fail(d.status()));
        n = *d;
      } else {
        Status s = (*t)->Delete(*rows);
        if (!s.ok()) return void(*rc = Fail(s));
        n = static_cast<int64_t>(rows->size());
      }
      if ((*t)->version() != before) RecordTableWrite("delete", **t, before);
      std::printf("deleted %lld rows: version %lld, %lld rows\n", static_cast<long long>(n),
                  static_cast<long long>((*t)->version()), static_cast<long long>((*t)->num_rows()));
    });
  }

  // ---- add-column
  {
    auto* cmd = grp->add_subcommand("add-column", "Add a column; existing rows read null or the default");
    auto path = std::make_shared<std::string>();
    auto spec = std::make_shared<std::string>();
    auto def = std::make_shared<std::string>();
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->add_option("column", *spec, "name:type ('?' suffix for nullable)")->required();
    cmd->add_option("--default", *def, "JSON value existing rows read, e.g. 0 or '\"x\"'");
    cmd->callback([=] {
      auto s = format::Schema::Parse(*spec);
      if (!s.ok()) return void(*rc = Fail(s.status()));
      if (s->fields.size() != 1) return void(*rc = Fail(absl::InvalidArgumentError("give exactly one column")));
      format::Field f = s->fields[0];
      f.default_json = *def;
      auto t = OpenNamedTable(*path);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      const int64_t before = (*t)->version();
      Status st = (*t)->AddColumn(f);
      if (!st.ok()) return void(*rc = Fail(st));
      RecordTableWrite("add_column", **t, before);
      std::printf("added column %s: version %lld\n", f.name.c_str(), static_cast<long long>((*t)->version()));
    });
  }

  // ---- compact
  {
    auto* cmd = grp->add_subcommand("compact", "Rewrite small and deletion-heavy fragments");
    auto path = std::make_shared<std::string>();
    auto opts = std::make_shared<table::CompactOptions>();
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->add_option("--target-rows", opts->target_rows, "Merge fragments smaller than this")->capture_default_str();
    cmd->add_option("--max-deleted-fraction", opts->max_deleted_fraction,
                    "Rewrite fragments with at least this fraction deleted")->capture_default_str();
    cmd->callback([=] {
      auto t = OpenNamedTable(*path);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      const int64_t before = (*t)->version();
      auto n = (*t)->Compact(*opts);
      if (!n.ok()) return void(*rc = Fail(n.status()));
      if ((*t)->version() != before) RecordTableWrite("compact", **t, before);
      if (*n == 0) std::printf("nothing to compact (version %lld)\n", static_cast<long long>((*t)->version()));
      else std::printf("compacted %lld fragments into %zu: version %lld\n", static_cast<long long>(*n),
                       (*t)->manifest().fragments.size(), static_cast<long long>((*t)->version()));
    });
  }

  // ---- expire
  {
    auto* cmd = grp->add_subcommand("expire", "Drop old versions (never tagged ones or the latest)");
    auto path = std::make_shared<std::string>();
    auto keep = std::make_shared<int64_t>(1);
    auto older = std::make_shared<std::string>();
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->add_option("--keep-last", *keep, "Keep at least this many newest versions")->capture_default_str();
    cmd->add_option("--older-than", *older, "Only expire versions older than this (30s, 10m, 2h, 7d)");
    cmd->callback([=] {
      auto t = OpenNamedTable(*path);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      table::ExpireOptions o;
      o.keep_last = *keep;
      if (!older->empty()) {
        auto ms = ParseDurationMs(*older);
        if (!ms.ok()) return void(*rc = Fail(ms.status()));
        o.older_than_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count() - *ms;
      }
      auto r = (*t)->Expire(o);
      if (!r.ok()) return void(*rc = Fail(r.status()));
      std::printf("expired %zu versions%s\n", r->expired.size(), r->expired.empty() ? "" : ":");
      for (int64_t v : r->expired) std::printf("  %lld\n", static_cast<long long>(v));
    });
  }

  // ---- vacuum
  {
    auto* cmd = grp->add_subcommand("vacuum", "Delete files no retained version references");
    auto path = std::make_shared<std::string>();
    auto grace = std::make_shared<std::string>("1h");
    auto dry = std::make_shared<bool>(false);
    cmd->add_option("path", *path, "Table directory")->required();
    cmd->add_option("--grace", *grace, "Keep unreferenced files younger than this (in-flight writers)")
        ->capture_default_str();
    cmd->add_flag("--dry-run", *dry, "Only list what would be deleted");
    cmd->callback([=] {
      auto ms = ParseDurationMs(*grace);
      if (!ms.ok()) return void(*rc = Fail(ms.status()));
      auto t = OpenNamedTable(*path);
      if (!t.ok()) return void(*rc = Fail(t.status()));
      auto r = (*t)->Vacuum(table::VacuumOptions{*ms, *dry});
      if (!r.ok()) return void(*rc = Fail(r.status()));
      for (const auto& f : r->deleted) std::printf("  %s\n", f.c_str());
      std::printf("%s %zu files, %s\n", *dry ? "would delete" : "deleted", r->deleted.size(),
                  HumanBytes(r->bytes_freed).c_str());
    });
  }
}

}  // namespace flywheel::cli
