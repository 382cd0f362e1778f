#include "flywheel/format/column.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"

namespace flywheel::format {
namespace {

size_t ValueElemSize(const DataType& t) {
  if (t.is_fixed_width()) return t.fixed_width();
  if (t.id == TypeId::kList) return ScalarSize(t.elem);
  return 1;
}

Buffer SliceBits(const Buffer& bits, int64_t offset, int64_t length) {
  if (bits.empty()) return {};
  if (offset % 8 == 0) {
    return Buffer{bits.data + offset / 8, static_cast<size_t>((length + 7) / 8), bits.owner};
  }
  std::vector<uint8_t> out(static_cast<size_t>((length + 7) / 8), 0);
  for (int64_t i = 0; i < length; ++i) {
    const int64_t j = offset + i;
    if ((bits.data[j >> 3] >> (j & 7)) & 1) out[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
  }
  return Buffer::FromVector(std::move(out));
}

}  // namespace

Buffer Buffer::Copy(const void* data, size_t size) {
  std::vector<uint8_t> v(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  return FromVector(std::move(v));
}

Buffer Buffer::Allocate(size_t size, uint8_t** data) {
  uint8_t* p = static_cast<uint8_t*>(::operator new(std::max<size_t>(size, 1), std::align_val_t{64}));
  std::shared_ptr<uint8_t> owner(p, [](uint8_t* q) { ::operator delete(q, std::align_val_t{64}); });
  *data = p;
  return Buffer{p, size, std::move(owner)};
}

Buffer Buffer::FromString(std::string s) {
  auto holder = std::make_shared<std::string>(std::move(s));
  return Buffer{reinterpret_cast<const uint8_t*>(holder->data()), holder->size(), holder};
}

int64_t Column::num_values() const {
  if (type.is_fixed_width()) return length * type.num_elements();
  if (type.id == TypeId::kStruct) return length;
  if (length == 0 || offsets.empty()) return 0;
  return offsets_data()[length] - offsets_data()[0];
}

Column Column::Slice(int64_t offset, int64_t len) const {
  Column c;
  c.type = type;
  c.length = len;
  if (type.id == TypeId::kStruct) {
    c.children.reserve(children.size());
    for (const Column& ch : children) c.children.push_back(ch.Slice(offset, len));
  } else if (type.is_fixed_width()) {
    const size_t w = type.fixed_width();
    c.values = Buffer{values.data + offset * w, static_cast<size_t>(len) * w, values.owner};
  } else {
    c.values = values;
    c.offsets = Buffer{offsets.data + offset * 8, static_cast<size_t>(len + 1) * 8, offsets.owner};
    c.children = children;
  }
  if (!validity.empty()) {
    c.validity = SliceBits(validity, offset, len);
    int64_t nulls = 0;
    for (int64_t i = 0; i < len; ++i) nulls += !c.IsValid(i);
    c.null_count = nulls;
    if (nulls == 0) c.validity = {};
  }
  return c;
}

Status Column::Validate(std::string_view what) const {
  auto bad = [&](auto&&... msg) {
    return absl::InvalidArgumentError(absl::StrCat("column '", AsAbsl(what), "' (",
                                                   type.ToString(), "): ", msg...));
  };
  if (length < 0) return bad("negative length");
  if (!validity.empty() && validity.size < static_cast<size_t>((length + 7) / 8)) {
    return bad("validity bitmap has ", validity.size, " bytes, need ", (length + 7) / 8);
  }
  if (null_count < 0 || null_count > length) {
    return bad("null count ", null_count, " does not match its validity bitmap");
  }
  if (type.is_nested() && children.size() != type.children.size()) {
    return bad("has ", children.size(), " child columns, its type ", type.children.size());
  }
  if (!type.is_nested() && !children.empty()) return bad("child columns on a type without children");
  // Children: their own checks, then their nullability.
  auto check_child = [&](size_t i, int64_t rows) -> Status {
    const Field& f = type.children[i];
    const Column& ch = children[i];
    const std::string name = absl::StrCat(AsAbsl(what), type.id == TypeId::kStruct ? "." : "", 
                                          type.id == TypeId::kStruct ? f.name : absl::StrCat("[", f.name, "]"));
    if (!(ch.type == f.type)) return bad("child '", f.name, "' has type ", ch.type.ToString());
    if (ch.length < rows) return bad("child '", f.name, "' has ", ch.length, " rows, need ", rows);
    if (ch.null_count > 0 && !f.nullable) {
      return absl::InvalidArgumentError(absl::StrCat("column '", name, "' has nulls but is not nullable"));
    }
    return ch.Validate(name);
  };
  if (type.id == TypeId::kStruct) {
    for (size_t i = 0; i < children.size(); ++i) FW_RETURN_IF_ERROR(check_child(i, length));
    return absl::OkStatus();
  }
  if (type.is_fixed_width()) {
    // Compared by division: length * width can overflow for huge tensors.
    const size_t w = type.fixed_width();
    if (values.size % w != 0 || values.size / w != static_cast<uint64_t>(length)) {
      return bad("values have ", values.size, " bytes, expected ", length, " rows of ", w);
    }
    return absl::OkStatus();
  }
  if (offsets.size % 8 != 0 || offsets.size / 8 != static_cast<uint64_t>(length) + 1) {
    return bad("offsets have ", offsets.size, " bytes, expected ", (length + 1) * 8);
  }
  const int64_t* o = offsets_data();
  if (o[0] < 0) return bad("negative first offset");
  for (int64_t i = 0; i < length; ++i) {
    if (o[i + 1] < o[i]) return bad("offsets decrease at row ", i);
  }
  if (type.is_nested()) {
    // list: one child; map: keys and values of equal length.
    if (type.id == TypeId::kMap && children[0].length != children[1].length) {
      return bad("map keys and values have ", children[0].length, " and ", children[1].length, " rows");
    }
    for (size_t i = 0; i < children.size(); ++i) {
      if (o[length] > children[i].length) {
        return bad("offsets point past the elements (", o[length], " > ", children[i].length, ")");
      }
      FW_RETURN_IF_ERROR(check_child(i, 0));
    }
    return absl::OkStatus();
  }
  const size_t esize = ValueElemSize(type);
  if (static_cast<uint64_t>(o[length]) > values.size / esize) {
    return bad("offsets point past the values (", o[length], " > ", values.size / esize, ")");
  }
  return absl::OkStatus();
}

Status RecordBatch::Validate() const {
  if (columns.size() != schema.fields.size()) {
    return absl::InvalidArgumentError(absl::StrCat("batch has ", columns.size(),
                                                   " columns, schema has ", schema.fields.size()));
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    const Field& f = schema.fields[i];
    const Column& c = columns[i];
    if (!(c.type == f.type)) {
      return absl::InvalidArgumentError(absl::StrCat("column '", f.name, "' has type ",
                                                     c.type.ToString(), ", schema says ",
                                                     f.type.ToString()));
    }
    if (c.length != num_rows) {
      return absl::InvalidArgumentError(absl::StrCat("column '", f.name, "' has ", c.length,
                                                     " rows, batch has ", num_rows));
    }
    if (c.null_count > 0 && !f.nullable) {
      return absl::InvalidArgumentError(
          absl::StrCat("column '", f.name, "' has nulls but the field is not nullable"));
    }
    FW_RETURN_IF_ERROR(c.Validate(f.name));
  }
  return absl::OkStatus();
}

Column MakeStringColumn(const std::vector<std::string>& values, bool binary) {
  std::vector<int64_t> offsets{0};
  std::string data;
  for (const auto& s : values) {
    data += s;
    offsets.push_back(static_cast<int64_t>(data.size()));
  }
  Column c;
  c.type = binary ? DataType::Binary() : DataType::String();
  c.length = static_cast<int64_t>(values.size());
  c.values = Buffer::FromString(std::move(data));
  c.offsets = Buffer::FromVector(std::move(offsets));
  return c;
}

void SetValidity(Column& c, const std::vector<bool>& valid) {
  std::vector<uint8_t> bits((valid.size() + 7) / 8, 0);
  int64_t nulls = 0;
  for (size_t i = 0; i < valid.size(); ++i) {
    if (valid[i]) bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    else nulls++;
  }
  c.null_count = nulls;
  c.validity = nulls ? Buffer::FromVector(std::move(bits)) : Buffer{};
}

Status ClearChildNullsUnderNullRows(Column* c, std::string_view what) {
  if (c->type.id != TypeId::kStruct) return absl::OkStatus();
  for (size_t k = 0; k < c->children.size() && k < c->type.children.size(); ++k) {
    const Field& f = c->type.children[k];
    Column& ch = c->children[k];
    if (f.nullable || ch.null_count == 0 || ch.validity.empty()) continue;
    for (int64_t i = 0; i < c->length && i < ch.length; ++i) {
      if (!ch.IsValid(i) && c->IsValid(i)) {
        return absl::InvalidArgumentError(absl::StrCat("column '", AsAbsl(what), ".", f.name, "' is null in row ", i,
                                                       " but is not nullable"));
      }
    }
    ch.validity = {};
    ch.null_count = 0;
  }
  return absl::OkStatus();
}

bool IsWidening(const DataType& from, const DataType& to) {
  if (from == to) return true;
  if (from.id != to.id || !from.is_nested() || !to.is_nested()) return false;
  if (to.id == TypeId::kStruct ? from.children.size() > to.children.size()
                               : from.children.size() != to.children.size()) {
    return false;
  }
  for (size_t i = 0; i < to.children.size(); ++i) {
    if (i >= from.children.size()) {
      if (!to.children[i].nullable) return false;
      continue;
    }
    const Field& a = from.children[i];
    const Field& b = to.children[i];
    if (a.name != b.name || a.nullable != b.nullable || !IsWidening(a.type, b.type)) return false;
  }
  return true;
}

Column WidenColumn(const Column& c, const DataType& to) {
  if (c.type == to) return c;
  Column out = c;
  out.type = to;
  out.children.clear();
  for (size_t i = 0; i < to.children.size(); ++i) {
    if (i < c.children.size()) {
      out.children.push_back(WidenColumn(c.children[i], to.children[i].type));
    } else {
      // An added struct field: null in every row (struct rows: c.length).
      out.children.push_back(MakeNullColumn(to.children[i].type, c.length, true));
    }
  }
  return out;
}

Column MakeNullColumn(const DataType& type, int64_t length, bool nullable) {
  Column c;
  c.type = type;
  c.length = length;
  if (type.id == TypeId::kStruct) {
    for (const Field& f : type.children) c.children.push_back(MakeNullColumn(f.type, length, f.nullable));
  } else if (type.is_fixed_width()) {
    c.values = Buffer::FromVector(std::vector<uint8_t>(static_cast<size_t>(length) * type.fixed_width(), 0));
  } else {
    if (!type.is_nested()) c.values = Buffer::FromVector(std::vector<uint8_t>(8, 0));
    c.offsets = Buffer::FromVector(std::vector<int64_t>(static_cast<size_t>(length) + 1, 0));
    for (const Field& f : type.children) c.children.push_back(MakeNullColumn(f.type, 0, f.nullable));
  }
  if (nullable && length > 0) {
    c.validity = Buffer::FromVector(std::vector<uint8_t>(static_cast<size_t>((length + 7) / 8), 0));
    c.null_count = length;
  }
  return c;
}

namespace {

Buffer ConcatValidity(const std::vector<Column>& parts, int64_t length) {
  bool any_nulls = false;
  for (const auto& p : parts) any_nulls |= p.null_count > 0;
  if (!any_nulls) return {};
  std::vector<uint8_t> bits(static_cast<size_t>((length + 7) / 8), 0);
  int64_t row = 0;
  for (const auto& p : parts) {
    for (int64_t i = 0; i < p.length; ++i, ++row) {
      if (p.IsValid(i)) bits[row >> 3] |= static_cast<uint8_t>(1u << (row & 7));
    }
  }
  return Buffer::FromVector(std::move(bits));
}

}  // namespace

Column ConcatColumns(const std::vector<Column>& parts) {
  if (parts.size() == 1) return parts[0];
  Column out;
  if (parts.empty()) return out;
  out.type = parts[0].type;
  for (const auto& p : parts) {
    out.length += p.length;
    out.null_count += p.null_count;
  }
  if (out.type.id == TypeId::kStruct) {
    for (size_t k = 0; k < out.type.children.size(); ++k) {
      std::vector<Column> kids;
      kids.reserve(parts.size());
      for (const auto& p : parts) kids.push_back(p.children[k]);
      out.children.push_back(ConcatColumns(kids));
    }
  } else if (out.type.is_nested()) {
    // Offsets rebased onto the concatenation of each part's element range.
    std::vector<int64_t> offsets;
    offsets.reserve(static_cast<size_t>(out.length) + 1);
    offsets.push_back(0);
    std::vector<std::vector<Column>> kids(out.type.children.size());
    for (const auto& p : parts) {
      if (p.length == 0) continue;
      const auto [first, last] = p.ChildRange(0, p.length);
      const int64_t* o = p.offsets_data();
      const int64_t base = offsets.back() - o[0];
      for (int64_t i = 1; i <= p.length; ++i) offsets.push_back(o[i] + base);
      for (size_t k = 0; k < kids.size(); ++k) kids[k].push_back(p.children[k].Slice(first, last - first));
    }
    for (size_t k = 0; k < kids.size(); ++k) {
      out.children.push_back(kids[k].empty() ? MakeNullColumn(out.type.children[k].type, 0, false)
                                             : ConcatColumns(kids[k]));
    }
    out.offsets = Buffer::FromVector(std::move(offsets));
  } else if (out.type.is_fixed_width()) {
    std::vector<uint8_t> values;
    values.reserve(static_cast<size_t>(out.length) * out.type.fixed_width());
    for (const auto& p : parts) values.insert(values.end(), p.values.data, p.values.data + p.values.size);
    out.values = Buffer::FromVector(std::move(values));
  } else {
    const size_t esize = ValueElemSize(out.type);
    std::vector<int64_t> offsets;
    offsets.reserve(static_cast<size_t>(out.length) + 1);
    offsets.push_back(0);
    std::vector<uint8_t> values;
    for (const auto& p : parts) {
      if (p.length == 0) continue;
      const int64_t* o = p.offsets_data();
      const int64_t base = static_cast<int64_t>(values.size() / esize) - o[0];
      for (int64_t i = 1; i <= p.length; ++i) offsets.push_back(o[i] + base);
      values.insert(values.end(), p.values.data + o[0] * esize, p.values.data + o[p.length] * esize);
    }
    if (values.empty()) values.resize(8);
    out.values = Buffer::FromVector(std::move(values));
    out.offsets = Buffer::FromVector(std::move(offsets));
  }
  out.validity = ConcatValidity(parts, out.length);
  return out;
}

Column TakeColumn(const Column& c, const int64_t* indices, size_t n) {
  Column out;
  out.type = c.type;
  out.length = static_cast<int64_t>(n);
  if (c.type.id == TypeId::kStruct) {
    for (const Column& ch : c.children) out.children.push_back(TakeColumn(ch, indices, n));
  } else if (c.type.is_nested()) {
    // The elements of the taken rows, in order, gathered from each child.
    const int64_t* o = c.offsets_data();
    std::vector<int64_t> offsets(n + 1);
    offsets[0] = 0;
    for (size_t i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + (o[indices[i] + 1] - o[indices[i]]);
    std::vector<int64_t> elems(static_cast<size_t>(offsets[n]));
    for (size_t i = 0, k = 0; i < n; ++i) {
      for (int64_t e = o[indices[i]]; e < o[indices[i] + 1]; ++e) elems[k++] = e;
    }
    for (const Column& ch : c.children) out.children.push_back(TakeColumn(ch, elems.data(), elems.size()));
    out.offsets = Buffer::FromVector(std::move(offsets));
  } else if (c.type.is_fixed_width()) {
    const size_t w = c.type.fixed_width();
    uint8_t* dst = nullptr;
    out.values = Buffer::Allocate(n * w, &dst);
    for (size_t i = 0; i < n; ++i) std::memcpy(dst + i * w, c.values.data + indices[i] * w, w);
  } else {
    const size_t esize = ValueElemSize(c.type);
    const int64_t* o = c.offsets_data();
    std::vector<int64_t> offsets(n + 1);
    offsets[0] = 0;
    for (size_t i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + (o[indices[i] + 1] - o[indices[i]]);
    std::vector<uint8_t> values(std::max<size_t>(8, static_cast<size_t>(offsets[n]) * esize));
    for (size_t i = 0; i < n; ++i) {
      const int64_t r = indices[i];
      std::memcpy(values.data() + offsets[i] * esize, c.values.data + o[r] * esize,
                  static_cast<size_t>(o[r + 1] - o[r]) * esize);
    }
    out.values = Buffer::FromVector(std::move(values));
    out.offsets = Buffer::FromVector(std::move(offsets));
  }
  if (!c.validity.empty()) {
    std::vector<bool> valid(n);
    for (size_t i = 0; i < n; ++i) valid[i] = c.IsValid(indices[i]);
    SetValidity(out, valid);
  }
  return out;
}

}  // namespace flywheel::format
