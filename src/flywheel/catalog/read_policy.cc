#include "flywheel/catalog/read_policy.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/loader/loader.h"
#include "nlohmann/json.hpp"

namespace flywheel::catalog {
namespace {

using format::Buffer;
using format::TypeId;

// Strictness order: a mixture's column takes the strictest of its tables.
int Strictness(ReadPolicy::Mode m) {
  switch (m) {
    case ReadPolicy::Mode::kHash: return 0;
    case ReadPolicy::Mode::kNull: return 1;
    case ReadPolicy::Mode::kRefuse: return 2;
  }
  return 2;
}

std::string Quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// SHA256(salt, 0x00, value).
void Digest(const std::string& salt, std::string_view value, unsigned char out[32]) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  static const unsigned char kZero = 0;
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, salt.data(), salt.size());
  EVP_DigestUpdate(ctx, &kZero, 1);
  EVP_DigestUpdate(ctx, value.data(), value.size());
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, out, &len);
  EVP_MD_CTX_free(ctx);
}

bool IsInteger(TypeId id) {
  switch (id) {
    case TypeId::kInt8: case TypeId::kInt16: case TypeId::kInt32: case TypeId::kInt64:
    case TypeId::kUInt8: case TypeId::kUInt16: case TypeId::kUInt32: case TypeId::kUInt64:
      return true;
    default:
      return false;
  }
}

bool IsSigned(TypeId id) {
  return id == TypeId::kInt8 || id == TypeId::kInt16 || id == TypeId::kInt32 || id == TypeId::kInt64;
}

// Decimal text of the integer stored little-endian in `width` bytes at `p`.
std::string IntegerText(const uint8_t* p, size_t width, bool is_signed) {
  uint64_t u = 0;
  std::memcpy(&u, p, width);
  if (is_signed && width < 8 && ((u >> (width * 8 - 1)) & 1)) u |= ~uint64_t{0} << (width * 8);
  return is_signed ? std::to_string(static_cast<int64_t>(u)) : std::to_string(u);
}

// A copy of `column`'s validity (all valid when it has none), `length` bits.
Buffer CopyValidity(const format::Column& column) {
  const size_t bytes = static_cast<size_t>((column.length + 7) / 8);
  if (column.validity.empty()) return Buffer{};
  return Buffer::Copy(column.validity.data, bytes);
}

// Every row null: zeroed fixed-width values, or zero offsets and no values.
format::Column AllNull(const format::Column& column) {
  if (column.type.is_nested()) return format::MakeNullColumn(column.type, column.length, true);
  format::Column out;
  out.type = column.type;
  out.length = column.length;
  out.null_count = column.length;
  const size_t n = static_cast<size_t>(column.length);
  if (column.type.is_fixed_width()) {
    out.values = Buffer::FromVector(std::vector<uint8_t>(n * column.type.fixed_width(), 0));
  } else {
    out.values = Buffer::FromVector(std::vector<uint8_t>());
    out.offsets = Buffer::FromVector(std::vector<int64_t>(n + 1, 0));
  }
  out.validity = Buffer::FromVector(std::vector<uint8_t>((n + 7) / 8, 0));
  return out;
}

// String/binary rows replaced by their hashes; nulls stay (empty).
format::Column HashBytes(const format::Column& column, const std::string& salt) {
  const bool text = column.type.id == TypeId::kString;
  const size_t width = text ? 18 : 8;  // "h:" + 16 hex digits, or 8 bytes
  const size_t n = static_cast<size_t>(column.length);
  std::vector<int64_t> offsets(n + 1, 0);
  std::string values;
  values.reserve(n * width);
  unsigned char md[32];
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    if (column.IsValid(static_cast<int64_t>(i))) {
      Digest(salt, column.GetBytes(static_cast<int64_t>(i)), md);
      if (text) {
        values += "h:";
        for (int b = 0; b < 8; ++b) {
          values += kHex[md[b] >> 4];
          values += kHex[md[b] & 15];
        }
      } else {
        values.append(reinterpret_cast<const char*>(md), 8);
      }
    }
    offsets[i + 1] = static_cast<int64_t>(values.size());
  }
  format::Column out;
  out.type = column.type;
  out.length = column.length;
  out.null_count = column.null_count;
  out.values = Buffer::FromString(std::move(values));
  out.offsets = Buffer::FromVector(std::move(offsets));
  out.validity = CopyValidity(column);
  return out;
}

// 1-D integer rows replaced by their hashes; null rows zeroed.
format::Column HashIntegers(const format::Column& column, const std::string& salt) {
  const size_t width = column.type.fixed_width();
  const size_t n = static_cast<size_t>(column.length);
  const bool is_signed = IsSigned(column.type.id);
  std::vector<uint8_t> values(n * width, 0);
  unsigned char md[32];
  for (size_t i = 0; i < n; ++i) {
    if (!column.IsValid(static_cast<int64_t>(i))) continue;
    Digest(salt, IntegerText(column.FixedRow(static_cast<int64_t>(i)), width, is_signed), md);
    std::memcpy(values.data() + i * width, md, width);  // little-endian: the low bytes first
  }
  format::Column out;
  out.type = column.type;
  out.length = column.length;
  out.null_count = column.null_count;
  out.values = Buffer::FromVector(std::move(values));
  out.validity = CopyValidity(column);
  return out;
}

}  // namespace

Result<std::shared_ptr<const ReadGuard>> ReadGuard::For(Catalog* catalog, const std::vector<std::string>& table_uris) {
  if (catalog == nullptr) return std::make_shared<const ReadGuard>(nullptr, "", std::vector<Column>{});
  std::vector<Column> columns;
  for (const auto& uri : table_uris) {
    FW_ASSIGN_OR_RETURN(DatasetInfo ds, catalog->ResolveTable(uri));
    FW_ASSIGN_OR_RETURN(ReadPolicy policy, catalog->ReadPolicyFor(ds.name));
    for (const auto& pc : policy.columns) {
      Column c{pc.name, policy.mode, policy.salt, ds.name, pc.tags};
      auto it = std::find_if(columns.begin(), columns.end(), [&](const Column& x) { return x.name == pc.name; });
      if (it == columns.end()) {
        columns.push_back(std::move(c));
      } else if (Strictness(c.mode) > Strictness(it->mode)) {
        *it = std::move(c);
      }
    }
  }
  return std::make_shared<const ReadGuard>(catalog, catalog->principal(), std::move(columns));
}

ReadGuard::ReadGuard(Catalog* catalog, std::string principal, std::vector<Column> columns)
    : catalog_(catalog), principal_(std::move(principal)), columns_(std::move(columns)) {}

const ReadGuard::Column* ReadGuard::Find(std::string_view name) const {
  for (const auto& c : columns_) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Status ReadGuard::Denied(std::string_view action, const std::string& dataset, const std::string& detail_json,
                         std::string message) const {
  if (catalog_ != nullptr) {
    // The refusal stands even if the audit write fails; say both.
    if (Status s = catalog_->Audit(std::string(action), dataset, detail_json); !s.ok()) {
      absl::StrAppend(&message, " (and auditing the refusal failed: ", s.message(), ")");
    }
  }
  return absl::PermissionDeniedError(message);
}

Status ReadGuard::CheckRead(const std::vector<std::string>& requested, std::string_view action) const {
  for (const auto& c : columns_) {
    if (c.mode != ReadPolicy::Mode::kRefuse) continue;
    if (!requested.empty() && std::find(requested.begin(), requested.end(), c.name) == requested.end()) continue;
    const nlohmann::json detail{{"column", c.name}, {"tags", c.tags}, {"denied", true}};
    return Denied(action, c.dataset, detail.dump(),
                  absl::StrCat("column ", Quoted(c.name), " of ", Quoted(c.dataset), " is tagged ",
                               absl::StrJoin(c.tags, ", "), " and principal ", Quoted(principal_),
                               " is not cleared for it (the dataset refuses it); leave it out of the columns read"));
  }
  return absl::OkStatus();
}

Status ReadGuard::CheckExport(const std::vector<std::string>& columns, std::string_view location,
                              std::string_view action) const {
  std::vector<std::string> hidden;
  const Column* first = nullptr;
  for (const auto& name : columns) {
    if (const Column* c = Find(name)) {
      hidden.push_back(name);
      if (first == nullptr) first = c;
    }
  }
  if (hidden.empty()) return absl::OkStatus();
  const nlohmann::json detail{{"columns", hidden}, {"denied", true}};
  std::vector<std::string> quoted;
  for (const auto& h : hidden) quoted.push_back(Quoted(h));
  return Denied(action, first->dataset, detail.dump(),
                absl::StrCat("columns ", absl::StrJoin(quoted, ", "), " of ", std::string(location),
                             " are tagged and principal ", Quoted(principal_),
                             " is not cleared for them; export the others (file exports are never masked)"));
}

Status ReadGuard::CheckPredicate(std::string_view column, std::string_view location, std::string_view action) const {
  const Column* c = Find(column);
  // A path into a nested column ("meta.lang", "messages[0].role") reads
  // the column it starts at.
  if (const size_t cut = column.find_first_of(".["); c == nullptr && cut != std::string_view::npos) {
    c = Find(column.substr(0, cut));
  }
  if (c == nullptr) return absl::OkStatus();
  const nlohmann::json detail{{"columns", {c->name}}, {"where", true}, {"denied", true}};
  return Denied(action, c->dataset, detail.dump(),
                absl::StrCat("column ", Quoted(c->name), " of ", std::string(location), " is tagged and principal ",
                             Quoted(principal_), " is not cleared for it: it cannot be used in a predicate (",
                             std::string(action), ")"));
}

format::Column ReadGuard::MaskColumn(const format::Column& column, const Column& rule) {
  if (rule.mode == ReadPolicy::Mode::kHash) {
    const format::DataType& t = column.type;
    if (t.id == TypeId::kString || t.id == TypeId::kBinary) return HashBytes(column, rule.salt);
    if (IsInteger(t.id) && t.shape.empty()) return HashIntegers(column, rule.salt);
  }
  return AllNull(column);
}

Result<format::RecordBatch> ReadGuard::Mask(format::RecordBatch batch) const {
  if (columns_.empty()) return batch;
  for (size_t i = 0; i < batch.columns.size(); ++i) {
    const Column* rule = Find(batch.schema.fields[i].name);
    if (rule == nullptr) continue;
    batch.columns[i] = MaskColumn(batch.columns[i], *rule);
    batch.schema.fields[i].nullable = true;  // masked columns may hold nulls (MaskedSchema)
  }
  return batch;
}

format::Schema ReadGuard::MaskedSchema(format::Schema schema) const {
  for (auto& f : schema.fields) {
    if (Find(f.name) != nullptr) f.nullable = true;
  }
  return schema;
}

Status ReadGuard::Check(const std::vector<std::string>& columns) const { return CheckRead(columns); }

Result<std::shared_ptr<const loader::Batch>> ReadGuard::Apply(std::shared_ptr<const loader::Batch> batch) const {
  bool any = false;
  for (const auto& bc : batch->columns) any = any || Find(bc.name) != nullptr;
  if (!any) return batch;
  // The new batch keeps the one it rewrote (unmasked columns point into it)
  // and the masked columns' buffers.
  struct Owned {
    std::shared_ptr<const loader::Batch> source;
    std::vector<format::Column> masked;
  };
  auto owned = std::make_shared<Owned>();
  owned->source = batch;
  auto out = std::make_shared<loader::Batch>();
  out->epoch = batch->epoch;
  out->position = batch->position;
  out->num_rows = batch->num_rows;
  out->indices = batch->indices;
  out->tables = batch->tables;
  out->columns = batch->columns;
  owned->masked.reserve(out->columns.size());
  for (auto& bc : out->columns) {
    const Column* rule = Find(bc.name);
    if (rule == nullptr) continue;
    owned->masked.push_back(MaskColumn(bc.View(batch->num_rows, batch), *rule));
    const format::Column& m = owned->masked.back();
    if (m.type.is_nested()) {
      bc.nested = std::shared_ptr<const format::Column>(owned, &owned->masked.back());
      bc.null_count = m.null_count;
      bc.nullable = true;
      continue;
    }
    bc.values = m.values.data;
    bc.values_size = m.values.size;
    bc.offsets = m.offsets.empty() ? nullptr : m.offsets.as<int64_t>();
    bc.validity = m.null_count > 0 ? m.validity.data : nullptr;
    bc.null_count = m.null_count;
    bc.nullable = true;
  }
  out->keep_alive = std::move(owned);
  return std::shared_ptr<const loader::Batch>(std::move(out));
}

}  // namespace flywheel::catalog
