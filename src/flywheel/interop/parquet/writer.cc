#include "flywheel/interop/parquet/writer.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/base/half.h"
#include "flywheel/base/utf8.h"
#include "flywheel/interop/parquet/compression.h"
#include "flywheel/interop/parquet/encoding.h"
#include "flywheel/io/file_system.h"

namespace flywheel::interop::parquet {
namespace {

constexpr char kMagic[4] = {'P', 'A', 'R', '1'};
// The largest page readers accept (ours refuses more: reader.cc).
constexpr int64_t kMaxPageBytes = int64_t{1} << 30;
// A page also closes after this many entries, so that highly compressible
// columns (one repeated value, booleans) keep num_values far from int32 and
// readers' per-page buffers small.
constexpr int64_t kMaxPageEntries = int64_t{1} << 20;
// Byte-array statistics are omitted when the minimum or maximum is longer
// (they would bloat the footer, and truncating needs is_max_value_exact).
constexpr size_t kMaxStatisticsBytes = 64;
constexpr int kMaxDepth = 100;

// How a leaf's values compare for statistics (parquet-format's column
// orders, TypeDefinedOrder).
enum class Order { kNone, kBool, kSigned, kUnsigned, kFloat, kFloat16, kDecimalBigEndian, kBytes };

// One leaf column of the schema.
struct Leaf {
  std::vector<std::string> path;  // path_in_schema
  std::string name;               // dotted, for errors
  ValueType type;
  PhysicalType physical = PhysicalType::kInt32;
  size_t width = 0;  // bytes per value in our physical buffers (BOOLEAN: 1); 0 for BYTE_ARRAY
  int16_t max_def = 0;
  int16_t max_rep = 0;
  Order order = Order::kNone;
  bool dictionary = false;  // may be dictionary-encoded
};

// A field of the schema with the levels its values are written at.
struct Node {
  const Field* field = nullptr;
  std::string name;      // dotted path of fields, for errors
  int16_t def = 0;       // definition level when this node's value is present
  int16_t elem_rep = 0;  // kList: repetition level of every element after the first
  int leaf = -1;         // leaves: index into the leaf columns
  int first_leaf = 0;    // leaves under this node: [first_leaf, end_leaf)
  int end_leaf = 0;
  std::vector<Node> children;
};

Status Invalid(std::string_view name, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("column ", AsAbsl(name), ": ", AsAbsl(what)));
}

bool SameType(const ValueType& a, const ValueType& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case ValueKind::kFixedBinary:
      return a.width == b.width;
    case ValueKind::kDecimal:
      return a.width == b.width && a.precision == b.precision && a.scale == b.scale;
    case ValueKind::kTime32:
    case ValueKind::kTime64:
    case ValueKind::kTimestamp:
      return a.unit == b.unit && a.adjusted_to_utc == b.adjusted_to_utc;
    default:
      return true;
  }
}

LogicalType IntegerType(int bits, bool is_signed) {
  LogicalType lt;
  lt.kind = LogicalType::Kind::kInteger;
  lt.bit_width = bits;
  lt.is_signed = is_signed;
  return lt;
}

// The schema element and physical layout of a leaf field.
Status LeafSchema(const Field& f, const std::string& name, SchemaElement* e, Leaf* leaf) {
  const ValueType& t = f.type;
  using K = LogicalType::Kind;
  auto set = [&](PhysicalType p, size_t width, Order order) {
    e->type = p;
    leaf->physical = p;
    leaf->width = width;
    leaf->order = order;
    leaf->dictionary = p != PhysicalType::kBoolean;
  };
  auto integer = [&](int bits, bool is_signed, ConvertedType ct) {
    set(bits == 64 ? PhysicalType::kInt64 : PhysicalType::kInt32, bits == 64 ? 8 : 4,
        is_signed ? Order::kSigned : Order::kUnsigned);
    e->logical_type = IntegerType(bits, is_signed);
    e->converted_type = ct;
  };
  auto time_type = [&](K kind) {
    e->logical_type.kind = kind;
    e->logical_type.unit = t.unit;
    e->logical_type.adjusted_to_utc = t.adjusted_to_utc;
  };
  switch (t.kind) {
    case ValueKind::kNull:
      if (!f.nullable) return Invalid(name, "a null-typed field must be nullable");
      set(PhysicalType::kInt32, 4, Order::kNone);
      leaf->dictionary = false;
      e->logical_type.kind = K::kUnknown;
      return absl::OkStatus();
    case ValueKind::kBool:
      set(PhysicalType::kBoolean, 1, Order::kBool);
      return absl::OkStatus();
    case ValueKind::kInt8:
      integer(8, true, ConvertedType::kInt8);
      return absl::OkStatus();
    case ValueKind::kInt16:
      integer(16, true, ConvertedType::kInt16);
      return absl::OkStatus();
    case ValueKind::kInt32:
      integer(32, true, ConvertedType::kInt32);
      return absl::OkStatus();
    case ValueKind::kInt64:
      integer(64, true, ConvertedType::kInt64);
      return absl::OkStatus();
    case ValueKind::kUInt8:
      integer(8, false, ConvertedType::kUint8);
      return absl::OkStatus();
    case ValueKind::kUInt16:
      integer(16, false, ConvertedType::kUint16);
      return absl::OkStatus();
    case ValueKind::kUInt32:
      integer(32, false, ConvertedType::kUint32);
      return absl::OkStatus();
    case ValueKind::kUInt64:
      integer(64, false, ConvertedType::kUint64);
      return absl::OkStatus();
    case ValueKind::kFloat16:
      set(PhysicalType::kFixedLenByteArray, 2, Order::kFloat16);
      e->type_length = 2;
      e->logical_type.kind = K::kFloat16;
      return absl::OkStatus();
    case ValueKind::kFloat32:
      set(PhysicalType::kFloat, 4, Order::kFloat);
      return absl::OkStatus();
    case ValueKind::kFloat64:
      set(PhysicalType::kDouble, 8, Order::kFloat);
      return absl::OkStatus();
    case ValueKind::kString:
      set(PhysicalType::kByteArray, 0, Order::kBytes);
      e->logical_type.kind = K::kString;
      e->converted_type = ConvertedType::kUtf8;
      return absl::OkStatus();
    case ValueKind::kBinary:
      set(PhysicalType::kByteArray, 0, Order::kBytes);
      return absl::OkStatus();
    case ValueKind::kFixedBinary:
      if (t.width < 1) return Invalid(name, absl::StrCat("fixed_binary of width ", t.width));
      set(PhysicalType::kFixedLenByteArray, static_cast<size_t>(t.width), Order::kBytes);
      e->type_length = t.width;
      return absl::OkStatus();
    case ValueKind::kDate32:
      set(PhysicalType::kInt32, 4, Order::kSigned);
      e->logical_type.kind = K::kDate;
      e->converted_type = ConvertedType::kDate;
      return absl::OkStatus();
    case ValueKind::kTime32:
      if (t.unit != TimeUnit::kMillis) return Invalid(name, "time32 must be in milliseconds");
      set(PhysicalType::kInt32, 4, Order::kSigned);
      time_type(K::kTime);
      // The legacy TIME_MILLIS means isAdjustedToUTC = true (LogicalTypes.md).
      if (t.adjusted_to_utc) e->converted_type = ConvertedType::kTimeMillis;
      return absl::OkStatus();
    case ValueKind::kTime64:
      if (t.unit == TimeUnit::kMillis)
        return Invalid(name, "time64 must be in microseconds or nanoseconds");
      set(PhysicalType::kInt64, 8, Order::kSigned);
      time_type(K::kTime);
      if (t.adjusted_to_utc && t.unit == TimeUnit::kMicros)
        e->converted_type = ConvertedType::kTimeMicros;
      return absl::OkStatus();
    case ValueKind::kTimestamp:
      set(PhysicalType::kInt64, 8, Order::kSigned);
      time_type(K::kTimestamp);
      if (t.adjusted_to_utc && t.unit != TimeUnit::kNanos) {
        e->converted_type = t.unit == TimeUnit::kMillis ? ConvertedType::kTimestampMillis
                                                        : ConvertedType::kTimestampMicros;
      }
      return absl::OkStatus();
    case ValueKind::kDecimal: {
      const int max_precision = t.width == 4 ? 9 : t.width == 8 ? 18 : t.width == 16 ? 38 : 0;
      if (max_precision == 0)
        return Invalid(name, absl::StrCat("decimal of width ", t.width, " (need 4, 8 or 16)"));
      if (t.precision < 1 || t.precision > max_precision || t.scale < 0 || t.scale > t.precision) {
        return Invalid(
            name, absl::StrCat("decimal(", t.precision, ",", t.scale, ") does not fit ", t.width,
                               " bytes (precision 1..", max_precision, ", scale 0..precision)"));
      }
      if (t.width == 16) {
        set(PhysicalType::kFixedLenByteArray, 16, Order::kDecimalBigEndian);
        e->type_length = 16;
      } else {
        set(t.width == 4 ? PhysicalType::kInt32 : PhysicalType::kInt64,
            static_cast<size_t>(t.width), Order::kSigned);
      }
      e->logical_type.kind = K::kDecimal;
      e->logical_type.decimal_precision = t.precision;
      e->logical_type.decimal_scale = t.scale;
      e->converted_type = ConvertedType::kDecimal;
      e->precision = t.precision;
      e->scale = t.scale;
      return absl::OkStatus();
    }
    case ValueKind::kList:
    case ValueKind::kStruct:
      break;
  }
  return Invalid(name, "not a leaf type");
}

// Appends the schema elements, leaves and node of `f` (depth-first).
Status BuildNode(const Field& f, const std::string& parent_name, std::vector<std::string> path,
                 int16_t parent_def, int16_t parent_rep, int depth, Node* node,
                 std::vector<SchemaElement>* schema, std::vector<Leaf>* leaves) {
  const std::string name = parent_name.empty() ? f.name : absl::StrCat(parent_name, ".", f.name);
  if (f.name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a field ", parent_name.empty() ? "" : absl::StrCat("of ", parent_name, " "),
                     "has no name"));
  }
  if (depth > kMaxDepth)
    return Invalid(name, absl::StrCat("nested more than ", kMaxDepth, " levels deep"));
  node->field = &f;
  node->name = name;
  node->def = static_cast<int16_t>(parent_def + (f.nullable ? 1 : 0));
  node->first_leaf = static_cast<int>(leaves->size());
  path.push_back(f.name);
  SchemaElement e;
  e.name = f.name;
  e.repetition = f.nullable ? Repetition::kOptional : Repetition::kRequired;
  const ValueKind kind = f.type.kind;
  if (kind != ValueKind::kList && kind != ValueKind::kStruct) {
    if (!f.children.empty())
      return Invalid(name, absl::StrCat(ValueTypeName(f.type), " field with children"));
    Leaf leaf;
    FW_RETURN_IF_ERROR(LeafSchema(f, name, &e, &leaf));
    leaf.path = std::move(path);
    leaf.name = name;
    leaf.type = f.type;
    leaf.max_def = node->def;
    leaf.max_rep = parent_rep;
    node->leaf = static_cast<int>(leaves->size());
    leaves->push_back(std::move(leaf));
    schema->push_back(std::move(e));
    node->end_leaf = static_cast<int>(leaves->size());
    return absl::OkStatus();
  }
  if (kind == ValueKind::kList) {
    if (f.children.size() != 1) {
      return Invalid(name, absl::StrCat("a list needs exactly one child field (the element), not ",
                                        f.children.size()));
    }
    if (f.map) {
      // <opt|req> group name (MAP) { repeated group key_value { required key; <opt|req> value } }:
      // the repeated group is the element struct itself.
      const Field& kv = f.children[0];
      if (kv.type.kind != ValueKind::kStruct || kv.children.size() != 2 || kv.nullable || kv.children[0].nullable) {
        return Invalid(name, "a map's element must be a non-null struct of a non-null key and a value");
      }
      e.num_children = 1;
      e.logical_type.kind = LogicalType::Kind::kMap;
      e.converted_type = ConvertedType::kMap;
      schema->push_back(std::move(e));
      node->elem_rep = static_cast<int16_t>(parent_rep + 1);
      node->children.resize(1);
      // (The node keeps a pointer to its field: kv itself, not a copy.)
      const size_t at = schema->size();
      FW_RETURN_IF_ERROR(BuildNode(kv, name, std::move(path), static_cast<int16_t>(node->def + 1),
                                   node->elem_rep, depth + 1, &node->children[0], schema, leaves));
      (*schema)[at].repetition = Repetition::kRepeated;
      node->end_leaf = static_cast<int>(leaves->size());
      return absl::OkStatus();
    }
    // <opt|req> group name (LIST) { repeated group list { <opt|req> element } }
    e.num_children = 1;
    e.logical_type.kind = LogicalType::Kind::kList;
    e.converted_type = ConvertedType::kList;
    schema->push_back(std::move(e));
    SchemaElement rep;
    rep.name = "list";
    rep.repetition = Repetition::kRepeated;
    rep.num_children = 1;
    schema->push_back(std::move(rep));
    path.push_back("list");
    node->elem_rep = static_cast<int16_t>(parent_rep + 1);
    node->children.resize(1);
    // The element keeps its field's name ("element" when it has none), so a
    // file read back has the fields written.
    const Field& elem = f.children[0];
    if (elem.name.empty()) return Invalid(name, "the list element has no name (use \"element\")");
    FW_RETURN_IF_ERROR(BuildNode(elem, name, std::move(path), static_cast<int16_t>(node->def + 1),
                                 node->elem_rep, depth + 1, &node->children[0], schema, leaves));
  } else {
    if (f.children.empty()) return Invalid(name, "a struct needs at least one field");
    std::set<std::string> names;
    for (const Field& c : f.children) {
      if (!names.insert(c.name).second)
        return Invalid(name, absl::StrCat("two fields named '", c.name, "'"));
    }
    e.num_children = static_cast<int32_t>(f.children.size());
    schema->push_back(std::move(e));
    node->children.resize(f.children.size());
    for (size_t c = 0; c < f.children.size(); ++c) {
      FW_RETURN_IF_ERROR(BuildNode(f.children[c], name, path, node->def, parent_rep, depth + 1,
                                   &node->children[c], schema, leaves));
    }
  }
  node->end_leaf = static_cast<int>(leaves->size());
  return absl::OkStatus();
}

// Checks that `a` is laid out as `n`'s field says (types, buffer sizes,
// offsets, children) so that shredding reads only what exists, and records
// each leaf's array.
Status ValidateArray(const Node& n, const Array& a, std::vector<const Array*>* leaf_arrays) {
  const Field& f = *n.field;
  if (!SameType(a.type, f.type)) {
    return Invalid(n.name, absl::StrCat("the array is ", ValueTypeName(a.type), ", the field is ",
                                        ValueTypeName(f.type)));
  }
  if (a.length < 0) return Invalid(n.name, "negative length");
  const uint64_t len = static_cast<uint64_t>(a.length);
  if (!a.validity.empty() && a.validity.size() < (len + 7) / 8) {
    return Invalid(n.name, absl::StrCat("validity bitmap of ", a.validity.size(), " bytes for ",
                                        len, " rows"));
  }
  auto check_offsets = [&](uint64_t limit, std::string_view what) -> Status {
    if (a.offsets.size() != len + 1) {
      return Invalid(n.name, absl::StrCat(a.offsets.size(), " offsets for ", len, " rows (need ",
                                          len + 1, ")"));
    }
    if (a.offsets[0] < 0) return Invalid(n.name, "negative first offset");
    for (uint64_t i = 0; i < len; ++i) {
      if (a.offsets[i + 1] < a.offsets[i])
        return Invalid(n.name, absl::StrCat("offsets decrease at row ", i));
    }
    if (static_cast<uint64_t>(a.offsets[len]) > limit) {
      return Invalid(n.name, absl::StrCat("offsets point past the ", AsAbsl(what), " (",
                                          a.offsets[len], " > ", limit, ")"));
    }
    return absl::OkStatus();
  };
  switch (a.type.kind) {
    case ValueKind::kNull:
      break;
    case ValueKind::kString:
    case ValueKind::kBinary:
      FW_RETURN_IF_ERROR(check_offsets(a.values.size(), "value bytes"));
      break;
    case ValueKind::kList:
      if (a.children.size() != 1)
        return Invalid(n.name, absl::StrCat("list array with ", a.children.size(), " children"));
      FW_RETURN_IF_ERROR(check_offsets(
          static_cast<uint64_t>(std::max<int64_t>(a.children[0].length, 0)), "element array"));
      return ValidateArray(n.children[0], a.children[0], leaf_arrays);
    case ValueKind::kStruct:
      if (a.children.size() != f.children.size()) {
        return Invalid(n.name, absl::StrCat("struct array with ", a.children.size(),
                                            " children, the field has ", f.children.size()));
      }
      for (size_t c = 0; c < a.children.size(); ++c) {
        if (a.children[c].length < a.length) {
          return Invalid(n.children[c].name,
                         absl::StrCat(a.children[c].length, " rows, its struct has ", a.length));
        }
        FW_RETURN_IF_ERROR(ValidateArray(n.children[c], a.children[c], leaf_arrays));
      }
      return absl::OkStatus();
    default: {
      const uint64_t w = ValueWidth(a.type);
      if (a.values.size() / w < len) {
        return Invalid(n.name,
                       absl::StrCat(a.values.size(), " value bytes for ", len, " rows of ", w));
      }
    }
  }
  (*leaf_arrays)[n.leaf] = &a;
  return absl::OkStatus();
}

// One leaf's levels for a row group, and the array slot of each present value.
struct LeafLevels {
  std::vector<int16_t> def, rep;
  std::vector<int64_t> slots;
};

void EmitNull(const Node& n, int16_t r, int16_t d, std::vector<LeafLevels>* out) {
  for (int l = n.first_leaf; l < n.end_leaf; ++l) {
    (*out)[l].def.push_back(d);
    (*out)[l].rep.push_back(r);
  }
}

// Writes the levels of slot `i` of `a` (field `n`) at repetition level `r`
// below a parent present at definition level `parent_def`: the inverse of
// the reader's assembly (parquet-format's Dremel encoding).
Status Shred(const Node& n, const Array& a, int64_t i, int16_t r, int16_t parent_def,
             std::vector<LeafLevels>* out) {
  if (a.type.kind == ValueKind::kNull) {  // always null, whatever its bitmap says
    EmitNull(n, r, parent_def, out);
    return absl::OkStatus();
  }
  if (!a.IsValid(i)) {
    if (!n.field->nullable) {
      return Invalid(n.name, absl::StrCat("null at slot ", i, " but the field is not nullable"));
    }
    EmitNull(n, r, parent_def, out);
    return absl::OkStatus();
  }
  switch (a.type.kind) {
    case ValueKind::kStruct:
      for (size_t c = 0; c < n.children.size(); ++c) {
        FW_RETURN_IF_ERROR(Shred(n.children[c], a.children[c], i, r, n.def, out));
      }
      return absl::OkStatus();
    case ValueKind::kList: {
      const int64_t begin = a.offsets[i], end = a.offsets[i + 1];
      if (begin == end) {  // present but empty: defined up to the list itself
        EmitNull(n, r, n.def, out);
        return absl::OkStatus();
      }
      for (int64_t k = begin; k < end; ++k) {
        FW_RETURN_IF_ERROR(Shred(n.children[0], a.children[0], k, k == begin ? r : n.elem_rep,
                                 static_cast<int16_t>(n.def + 1), out));
      }
      return absl::OkStatus();
    }
    default: {
      LeafLevels& l = (*out)[n.leaf];
      l.def.push_back(n.def);
      l.rep.push_back(r);
      l.slots.push_back(i);
      return absl::OkStatus();
    }
  }
}

// The present values of one leaf in physical form: `width` bytes each (PLAIN
// layout; BOOLEAN one byte 0/1), or byte arrays.
struct Values {
  std::string fixed;
  std::vector<std::string_view> bytes;
  int64_t count = 0;
  size_t width = 0;

  std::string_view Get(int64_t k) const {
    return width == 0 ? bytes[k] : std::string_view(fixed.data() + k * width, width);
  }
};

Status CheckUtf8(const Leaf& leaf, const Array& a, const std::vector<int64_t>& slots) {
  for (int64_t s : slots) {
    const std::string_view b(reinterpret_cast<const char*>(a.values.data()) + a.offsets[s],
                             static_cast<size_t>(a.offsets[s + 1] - a.offsets[s]));
    const size_t bad = FirstInvalidUtf8(b);
    if (bad != std::string_view::npos) {
      return Invalid(leaf.name, absl::StrCat("the string at slot ", s, " is not valid UTF-8 (byte ",
                                             bad, ")"));
    }
  }
  return absl::OkStatus();
}

Status GatherValues(const Leaf& leaf, const Array& a, const std::vector<int64_t>& slots,
                    Values* v) {
  v->count = static_cast<int64_t>(slots.size());
  v->width = leaf.width;
  const ValueKind kind = a.type.kind;
  if (kind == ValueKind::kString || kind == ValueKind::kBinary) {
    v->bytes.reserve(slots.size());
    for (int64_t s : slots) {
      const std::string_view b(reinterpret_cast<const char*>(a.values.data()) + a.offsets[s],
                               static_cast<size_t>(a.offsets[s + 1] - a.offsets[s]));
      v->bytes.push_back(b);
    }
    return absl::OkStatus();
  }
  const size_t src_width = ValueWidth(a.type);
  v->fixed.resize(slots.size() * leaf.width);
  char* dst = v->fixed.data();
  const uint8_t* src = a.values.data();
  for (int64_t s : slots) {
    const uint8_t* p = src + s * src_width;
    switch (kind) {
      case ValueKind::kBool:
        *dst = p[0] != 0 ? 1 : 0;
        break;
      case ValueKind::kInt8: {
        const int32_t x = static_cast<int8_t>(p[0]);
        std::memcpy(dst, &x, 4);
        break;
      }
      case ValueKind::kInt16: {
        int16_t y;
        std::memcpy(&y, p, 2);
        const int32_t x = y;
        std::memcpy(dst, &x, 4);
        break;
      }
      case ValueKind::kUInt8: {
        const uint32_t x = p[0];
        std::memcpy(dst, &x, 4);
        break;
      }
      case ValueKind::kUInt16: {
        uint16_t y;
        std::memcpy(&y, p, 2);
        const uint32_t x = y;
        std::memcpy(dst, &x, 4);
        break;
      }
      case ValueKind::kDecimal:
        if (leaf.physical == PhysicalType::kFixedLenByteArray) {  // big-endian two's complement
          for (size_t b = 0; b < leaf.width; ++b) dst[b] = static_cast<char>(p[leaf.width - 1 - b]);
        } else {
          std::memcpy(dst, p, leaf.width);
        }
        break;
      default:
        std::memcpy(dst, p, leaf.width);
    }
    dst += leaf.width;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Statistics.


template <typename T>
T Load(std::string_view s) {
  T x;
  std::memcpy(&x, s.data(), sizeof(T));
  return x;
}

// a < b in the leaf's order. REQUIRES: neither is NaN (floats).
bool Less(const Leaf& leaf, std::string_view a, std::string_view b) {
  switch (leaf.order) {
    case Order::kBool:
      return a[0] < b[0];
    case Order::kSigned:
      return leaf.width == 4 ? Load<int32_t>(a) < Load<int32_t>(b)
                             : Load<int64_t>(a) < Load<int64_t>(b);
    case Order::kUnsigned:
      return leaf.width == 4 ? Load<uint32_t>(a) < Load<uint32_t>(b)
                             : Load<uint64_t>(a) < Load<uint64_t>(b);
    case Order::kFloat:
      return leaf.width == 4 ? Load<float>(a) < Load<float>(b) : Load<double>(a) < Load<double>(b);
    case Order::kFloat16:
      return HalfToDouble(Load<uint16_t>(a)) < HalfToDouble(Load<uint16_t>(b));
    case Order::kDecimalBigEndian: {
      // The first byte compares signed, the rest unsigned.
      const int8_t x = static_cast<int8_t>(a[0]), y = static_cast<int8_t>(b[0]);
      if (x != y) return x < y;
      return a.substr(1) < b.substr(1);
    }
    case Order::kBytes:
      return a < b;  // std::char_traits<char> compares as unsigned char
    case Order::kNone:
      break;
  }
  return false;
}

bool IsNaN(const Leaf& leaf, std::string_view v) {
  if (leaf.order == Order::kFloat)
    return leaf.width == 4 ? std::isnan(Load<float>(v)) : std::isnan(Load<double>(v));
  if (leaf.order == Order::kFloat16) return std::isnan(HalfToDouble(Load<uint16_t>(v)));
  return false;
}

// Zero is written as -0 for the minimum and +0 for the maximum
// (parquet-format: readers must not trust the sign of a zero bound).
std::string FloatBound(const Leaf& leaf, std::string_view v, bool is_min) {
  std::string out(v);
  if (leaf.order == Order::kFloat && leaf.width == 4 && Load<float>(v) == 0.0f) {
    const float z = is_min ? -0.0f : 0.0f;
    std::memcpy(out.data(), &z, 4);
  } else if (leaf.order == Order::kFloat && leaf.width == 8 && Load<double>(v) == 0.0) {
    const double z = is_min ? -0.0 : 0.0;
    std::memcpy(out.data(), &z, 8);
  } else if (leaf.order == Order::kFloat16 && (Load<uint16_t>(v) & 0x7fff) == 0) {
    const uint16_t z = is_min ? 0x8000 : 0;
    std::memcpy(out.data(), &z, 2);
  }
  return out;
}

Statistics ComputeStatistics(const Leaf& leaf, const Values& v, int64_t nulls) {
  Statistics s;
  s.null_count = nulls;
  if (leaf.order == Order::kNone) return s;
  int64_t min = -1, max = -1;
  for (int64_t k = 0; k < v.count; ++k) {
    const std::string_view x = v.Get(k);
    // A NaN anywhere: no bounds. Bounds that skip it (what the format
    // allows) make DuckDB, which orders NaN above every number, prune the
    // row group for `x > c` and lose the NaN rows.
    if (IsNaN(leaf, x)) return s;
    if (min < 0) {
      min = max = k;
      continue;
    }
    if (Less(leaf, x, v.Get(min))) min = k;
    if (Less(leaf, v.Get(max), x)) max = k;
  }
  if (min < 0) return s;
  std::string lo = FloatBound(leaf, v.Get(min), true);
  std::string hi = FloatBound(leaf, v.Get(max), false);
  if (leaf.order == Order::kBytes &&
      (lo.size() > kMaxStatisticsBytes || hi.size() > kMaxStatisticsBytes))
    return s;
  // The deprecated min/max are signed-order only; write them where that is
  // the column's order and the physical type is numeric (old readers trust
  // them there and nowhere else).
  const bool legacy = (leaf.order == Order::kSigned || leaf.order == Order::kFloat);
  if (legacy) {
    s.min = lo;
    s.max = hi;
  }
  s.min_value = std::move(lo);
  s.max_value = std::move(hi);
  return s;
}

// ---------------------------------------------------------------------------
// Pages.

void AppendLevels(const int16_t* levels, int64_t n, int16_t max_level, std::string* out) {
  std::vector<uint32_t> tmp(levels, levels + n);
  std::string enc;
  EncodeRleBitPacked(tmp.data(), n, BitWidth(static_cast<uint64_t>(max_level)), &enc);
  const uint32_t len = static_cast<uint32_t>(enc.size());
  char prefix[4];
  std::memcpy(prefix, &len, 4);
  out->append(prefix, 4);
  out->append(enc);
}

void AppendPlain(const Leaf& leaf, const Values& v, int64_t begin, int64_t end, std::string* out) {
  if (leaf.physical == PhysicalType::kBoolean) {
    EncodePlainBoolean(reinterpret_cast<const uint8_t*>(v.fixed.data()) + begin, end - begin, out);
  } else if (leaf.physical == PhysicalType::kByteArray) {
    for (int64_t k = begin; k < end; ++k) {
      const uint32_t len = static_cast<uint32_t>(v.bytes[k].size());
      char prefix[4];
      std::memcpy(prefix, &len, 4);
      out->append(prefix, 4);
      out->append(v.bytes[k]);
    }
  } else {
    out->append(v.fixed.data() + begin * leaf.width, static_cast<size_t>(end - begin) * leaf.width);
  }
}

// Bits one PLAIN value takes (the page size estimate).
int64_t PlainBits(const Leaf& leaf, const Values& v, int64_t k) {
  if (leaf.physical == PhysicalType::kBoolean) return 1;
  if (leaf.physical == PhysicalType::kByteArray)
    return 8 * (4 + static_cast<int64_t>(v.bytes[k].size()));
  return 8 * static_cast<int64_t>(leaf.width);
}

// A column chunk being encoded: pages appended to `pages` (header + body).
struct ChunkOut {
  std::string dictionary_page;  // header + body, or empty
  std::string pages;
  std::set<Encoding> encodings;
  int64_t uncompressed = 0;  // headers included
  int num_pages = 0;
};

class ChunkEncoder {
 public:
  ChunkEncoder(const Leaf& leaf, const LeafLevels& levels, const Values& values,
               const ParquetWriterOptions& options, ChunkOut* out)
      : leaf_(leaf), levels_(levels), values_(values), options_(options), out_(out) {}

  Status Encode();

 private:
  Status AddPage(PageType type, const std::string& raw, int32_t num_values, Encoding encoding,
                 std::string* dst);
  Status FlushDataPage(int64_t e0, int64_t e1, int64_t v0, int64_t v1, bool dict);
  // Adds values [v0, v1) to the dictionary; false (and the dictionary as it
  // was) when it would grow past options.dictionary_bytes.
  bool AddToDictionary(int64_t v0, int64_t v1);

  const Leaf& leaf_;
  const LeafLevels& levels_;
  const Values& values_;
  const ParquetWriterOptions& options_;
  ChunkOut* out_;
  std::unordered_map<std::string_view, uint32_t> dict_;
  std::vector<std::string_view> dict_values_;
  int64_t dict_bytes_ = 0;
  std::vector<uint32_t> indices_;  // per value, while dictionary-encoded
};

bool ChunkEncoder::AddToDictionary(int64_t v0, int64_t v1) {
  const size_t before = dict_values_.size();
  const int64_t bytes_before = dict_bytes_;
  for (int64_t k = v0; k < v1; ++k) {
    const std::string_view x = values_.Get(k);
    auto [it, added] = dict_.try_emplace(x, static_cast<uint32_t>(dict_values_.size()));
    if (added) {
      dict_values_.push_back(x);
      dict_bytes_ +=
          static_cast<int64_t>(x.size()) + (leaf_.physical == PhysicalType::kByteArray ? 4 : 0);
      if (dict_bytes_ > options_.dictionary_bytes) {
        for (size_t j = before; j < dict_values_.size(); ++j) dict_.erase(dict_values_[j]);
        dict_values_.resize(before);
        dict_bytes_ = bytes_before;
        return false;
      }
    }
    indices_[k] = it->second;
  }
  return true;
}

Status ChunkEncoder::AddPage(PageType type, const std::string& raw, int32_t num_values,
                             Encoding encoding, std::string* dst) {
  if (static_cast<int64_t>(raw.size()) > kMaxPageBytes) {
    return Invalid(leaf_.name,
                   absl::StrCat("a page of ", raw.size(), " bytes (one row's values) exceeds the ",
                                kMaxPageBytes, "-byte limit readers accept"));
  }
  std::string body;
  FW_RETURN_IF_ERROR(Compress(options_.codec, reinterpret_cast<const uint8_t*>(raw.data()),
                              raw.size(), &body, options_.level));
  if (body.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Invalid(leaf_.name, "a compressed page exceeds 2 GiB");
  }
  PageHeader h;
  h.type = type;
  h.uncompressed_page_size = static_cast<int32_t>(raw.size());
  h.compressed_page_size = static_cast<int32_t>(body.size());
  // The page CRC (CRC-32, as gzip's, of the page bytes after the header):
  // readers that check it (flywheel, parquet-mr, Arrow) catch corruption.
  h.crc = static_cast<int32_t>(
      static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
  if (type == PageType::kDictionaryPage) {
    h.dictionary_page_header = DictionaryPageHeader{num_values, encoding, std::nullopt};
  } else {
    DataPageHeader d;
    d.num_values = num_values;
    d.encoding = encoding;
    h.data_page_header = d;
  }
  const std::string header = SerializePageHeader(h);
  dst->append(header);
  dst->append(body);
  out_->uncompressed += static_cast<int64_t>(header.size() + raw.size());
  out_->encodings.insert(encoding);
  ++out_->num_pages;
  return absl::OkStatus();
}

Status ChunkEncoder::FlushDataPage(int64_t e0, int64_t e1, int64_t v0, int64_t v1, bool dict) {
  if (e1 == e0) return absl::OkStatus();
  std::string raw;
  if (leaf_.max_rep > 0) AppendLevels(levels_.rep.data() + e0, e1 - e0, leaf_.max_rep, &raw);
  if (leaf_.max_def > 0) AppendLevels(levels_.def.data() + e0, e1 - e0, leaf_.max_def, &raw);
  Encoding enc = Encoding::kPlain;
  if (dict && v1 > v0) {
    enc = Encoding::kRleDictionary;
    const int bw = std::max(1, BitWidth(dict_values_.size() - 1));
    raw.push_back(static_cast<char>(bw));
    EncodeRleBitPacked(indices_.data() + v0, v1 - v0, bw, &raw);
  } else {
    AppendPlain(leaf_, values_, v0, v1, &raw);
  }
  return AddPage(PageType::kDataPage, raw, static_cast<int32_t>(e1 - e0), enc, &out_->pages);
}

Status ChunkEncoder::Encode() {
  const int64_t entries = static_cast<int64_t>(levels_.def.size());
  const bool has_rep = leaf_.max_rep > 0;
  const int64_t level_bits = BitWidth(static_cast<uint64_t>(leaf_.max_def)) +
                             BitWidth(static_cast<uint64_t>(leaf_.max_rep));
  const int64_t page_bits = options_.page_bytes * 8;
  bool dict = leaf_.dictionary && options_.dictionary_bytes > 0 && values_.count > 0;
  if (dict) indices_.resize(static_cast<size_t>(values_.count));
  int64_t page_e = 0, page_v = 0;  // where the open page starts
  int64_t e = 0, v = 0;
  int64_t bits = 0;
  while (e < entries) {
    // One record: a page may only start where a row does (repetition 0).
    int64_t rec_end = e + 1;
    if (has_rep) {
      while (rec_end < entries && levels_.rep[rec_end] != 0) ++rec_end;
    }
    int64_t v_end = v;
    for (int64_t j = e; j < rec_end; ++j) v_end += levels_.def[j] == leaf_.max_def ? 1 : 0;
    int64_t rec_bits = level_bits * (rec_end - e);
    if (dict && !AddToDictionary(v, v_end)) {
      // The dictionary is full: close the open page with it, and write the
      // rest of the chunk PLAIN.
      FW_RETURN_IF_ERROR(FlushDataPage(page_e, e, page_v, v, true));
      page_e = e;
      page_v = v;
      bits = 0;
      dict = false;
    }
    if (dict) {
      rec_bits += (v_end - v) * BitWidth(dict_values_.size());
    } else {
      for (int64_t k = v; k < v_end; ++k) rec_bits += PlainBits(leaf_, values_, k);
    }
    bits += rec_bits;
    e = rec_end;
    v = v_end;
    if (bits >= page_bits || e - page_e >= kMaxPageEntries) {
      FW_RETURN_IF_ERROR(FlushDataPage(page_e, e, page_v, v, dict));
      page_e = e;
      page_v = v;
      bits = 0;
    }
  }
  FW_RETURN_IF_ERROR(FlushDataPage(page_e, e, page_v, v, dict));
  if (!dict_values_.empty()) {
    std::string raw;
    if (leaf_.physical == PhysicalType::kByteArray) {
      for (std::string_view x : dict_values_) {
        const uint32_t len = static_cast<uint32_t>(x.size());
        char prefix[4];
        std::memcpy(prefix, &len, 4);
        raw.append(prefix, 4);
        raw.append(x);
      }
    } else {
      for (std::string_view x : dict_values_) raw.append(x);
    }
    FW_RETURN_IF_ERROR(AddPage(PageType::kDictionaryPage, raw,
                               static_cast<int32_t>(dict_values_.size()), Encoding::kPlain,
                               &out_->dictionary_page));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

class WriterImpl final : public ParquetWriter {
 public:
  WriterImpl(std::string path, std::vector<Field> fields, ParquetWriterOptions options)
      : path_(std::move(path)), fields_(std::move(fields)), options_(std::move(options)) {}

  Status Init();
  Status WriteRowGroup(const std::vector<Array>& columns) override;
  Status Close() override;
  int64_t rows_written() const override { return rows_; }

 private:
  Status WriteColumnChunk(int leaf, const LeafLevels& levels, const Array& array, RowGroup* group);
  Status Append(std::string_view bytes) {
    FW_RETURN_IF_ERROR_CTX(file_->Append(bytes), "writing ", path_);
    return absl::OkStatus();
  }

  std::string path_;
  std::vector<Field> fields_;  // nodes_ point into these
  ParquetWriterOptions options_;
  std::vector<Node> nodes_;  // one per top-level field
  std::vector<Leaf> leaves_;
  FileMetaData meta_;
  std::unique_ptr<io::WritableFile> file_;
  int64_t rows_ = 0;
  bool closed_ = false;
  Status failed_;  // set when a write failed part way: the file is unusable
};

Status WriterImpl::Init() {
  FW_RETURN_IF_ERROR(options_.Validate());
  if (fields_.empty()) return absl::InvalidArgumentError("a Parquet file needs at least one field");
  std::set<std::string> names;
  for (const Field& f : fields_) {
    if (!names.insert(f.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("two top-level fields named '", f.name, "'"));
    }
  }
  SchemaElement root;
  root.name = "schema";
  root.num_children = static_cast<int32_t>(fields_.size());
  meta_.schema.push_back(std::move(root));
  nodes_.resize(fields_.size());
  for (size_t i = 0; i < fields_.size(); ++i) {
    FW_RETURN_IF_ERROR(BuildNode(fields_[i], "", {}, 0, 0, 0, &nodes_[i], &meta_.schema, &leaves_));
  }
  meta_.version = 2;
  meta_.created_by = options_.created_by;
  for (const auto& [k, v] : options_.key_value_metadata)
    meta_.key_value_metadata.push_back(KeyValue{k, v});
  FW_ASSIGN_OR_RETURN(file_, io::PosixFileSystem()->NewWritable(path_));
  return Append(std::string_view(kMagic, 4));
}

Status WriterImpl::WriteColumnChunk(int leaf_index, const LeafLevels& levels, const Array& array,
                                    RowGroup* group) {
  const Leaf& leaf = leaves_[leaf_index];
  Values values;
  FW_RETURN_IF_ERROR(GatherValues(leaf, array, levels.slots, &values));
  ChunkOut out;
  ChunkEncoder encoder(leaf, levels, values, options_, &out);
  FW_RETURN_IF_ERROR_CTX(encoder.Encode(), "column ", leaf.name);
  const int64_t start = static_cast<int64_t>(file_->position());
  ColumnMetaData m;
  m.type = leaf.physical;
  // Dictionary page first, then RLE for the levels, then the data pages'.
  if (!out.dictionary_page.empty()) m.encodings.push_back(Encoding::kPlain);
  if (leaf.max_def > 0 || leaf.max_rep > 0) m.encodings.push_back(Encoding::kRle);
  for (Encoding e : out.encodings) {
    if (std::find(m.encodings.begin(), m.encodings.end(), e) == m.encodings.end())
      m.encodings.push_back(e);
  }
  m.path_in_schema = leaf.path;
  m.codec = options_.codec;
  m.num_values = static_cast<int64_t>(levels.def.size());
  m.total_uncompressed_size = out.uncompressed;
  m.total_compressed_size = static_cast<int64_t>(out.dictionary_page.size() + out.pages.size());
  m.data_page_offset = start + static_cast<int64_t>(out.dictionary_page.size());
  if (!out.dictionary_page.empty()) m.dictionary_page_offset = start;
  if (options_.statistics) {
    m.statistics = ComputeStatistics(leaf, values, m.num_values - values.count);
  }
  failed_ = Append(out.dictionary_page);
  if (failed_.ok()) failed_ = Append(out.pages);
  FW_RETURN_IF_ERROR(failed_);
  ColumnChunk cc;
  cc.file_offset = start;
  group->total_byte_size += m.total_uncompressed_size;
  *group->total_compressed_size += m.total_compressed_size;
  cc.meta_data = std::move(m);
  group->columns.push_back(std::move(cc));
  return absl::OkStatus();
}

Status WriterImpl::WriteRowGroup(const std::vector<Array>& columns) {
  if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": the writer is closed"));
  FW_RETURN_IF_ERROR_CTX(failed_, path_, ": an earlier write failed");
  if (columns.size() != fields_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": ", columns.size(), " columns for ", fields_.size(), " fields"));
  }
  std::vector<const Array*> leaf_arrays(leaves_.size(), nullptr);
  const int64_t rows = columns[0].length;
  for (size_t c = 0; c < columns.size(); ++c) {
    FW_RETURN_IF_ERROR_CTX(ValidateArray(nodes_[c], columns[c], &leaf_arrays), path_);
    if (columns[c].length != rows) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": column ", fields_[c].name, " has ",
                                                     columns[c].length, " rows, column ",
                                                     fields_[0].name, " has ", rows));
    }
  }
  if (rows == 0) return absl::OkStatus();  // no empty row groups: some readers choke on them
  // Levels of every leaf, checked (nulls where the schema allows them,
  // UTF-8) before a byte is written.
  std::vector<LeafLevels> levels(leaves_.size());
  for (size_t c = 0; c < columns.size(); ++c) {
    for (int l = nodes_[c].first_leaf; l < nodes_[c].end_leaf; ++l) {
      levels[l].def.reserve(static_cast<size_t>(rows));
      levels[l].rep.reserve(static_cast<size_t>(rows));
    }
    for (int64_t i = 0; i < rows; ++i) {
      FW_RETURN_IF_ERROR_CTX(Shred(nodes_[c], columns[c], i, 0, 0, &levels), path_, ": row ", i);
    }
  }
  for (size_t l = 0; l < leaves_.size(); ++l) {
    if (leaves_[l].type.kind == ValueKind::kString) {
      FW_RETURN_IF_ERROR_CTX(CheckUtf8(leaves_[l], *leaf_arrays[l], levels[l].slots), path_);
    }
  }
  RowGroup group;
  group.num_rows = rows;
  group.file_offset = static_cast<int64_t>(file_->position());
  group.total_compressed_size = 0;
  if (meta_.row_groups.size() <= static_cast<size_t>(std::numeric_limits<int16_t>::max())) {
    group.ordinal = static_cast<int16_t>(meta_.row_groups.size());
  }
  for (size_t l = 0; l < leaves_.size(); ++l) {
    const Status s = WriteColumnChunk(static_cast<int>(l), levels[l], *leaf_arrays[l], &group);
    if (!s.ok()) {
      // Invalid values (UTF-8, oversized pages) are found before this
      // chunk's bytes are written, but earlier chunks of the group are out:
      // the file cannot be finished either way.
      if (failed_.ok()) failed_ = s;
      return Annotate(s, path_);
    }
    levels[l] = LeafLevels();  // free as we go
  }
  rows_ += rows;
  meta_.num_rows = rows_;
  meta_.row_groups.push_back(std::move(group));
  return absl::OkStatus();
}

Status WriterImpl::Close() {
  if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": Close called twice"));
  closed_ = true;
  FW_RETURN_IF_ERROR_CTX(failed_, path_, ": an earlier write failed; the file has no footer");
  const std::string footer = SerializeFileMetaData(meta_);
  FW_RETURN_IF_ERROR(Append(footer));
  const uint32_t len = static_cast<uint32_t>(footer.size());
  char tail[8];
  std::memcpy(tail, &len, 4);
  std::memcpy(tail + 4, kMagic, 4);
  FW_RETURN_IF_ERROR(Append(std::string_view(tail, 8)));
  FW_RETURN_IF_ERROR_CTX(file_->Close(), "closing ", path_);
  return absl::OkStatus();
}

// flywheel scalar types as the reader's value types.
Result<ValueType> ScalarValueType(format::TypeId id) {
  using format::TypeId;
  switch (id) {
    case TypeId::kBool:
      return ValueType{ValueKind::kBool};
    case TypeId::kInt8:
      return ValueType{ValueKind::kInt8};
    case TypeId::kInt16:
      return ValueType{ValueKind::kInt16};
    case TypeId::kInt32:
      return ValueType{ValueKind::kInt32};
    case TypeId::kInt64:
      return ValueType{ValueKind::kInt64};
    case TypeId::kUInt8:
      return ValueType{ValueKind::kUInt8};
    case TypeId::kUInt16:
      return ValueType{ValueKind::kUInt16};
    case TypeId::kUInt32:
      return ValueType{ValueKind::kUInt32};
    case TypeId::kUInt64:
      return ValueType{ValueKind::kUInt64};
    case TypeId::kFloat16:
      return ValueType{ValueKind::kFloat16};
    case TypeId::kFloat32:
      return ValueType{ValueKind::kFloat32};
    case TypeId::kFloat64:
      return ValueType{ValueKind::kFloat64};
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("type ", AsAbsl(format::TypeIdName(id)), " is not a scalar"));
}

Result<Field> FieldFromTable(const format::Field& f) {
  FW_RETURN_IF_ERROR(f.type.Validate());
  Field out;
  out.name = f.name;
  out.nullable = f.nullable;
  const format::DataType& t = f.type;
  if (t.id == format::TypeId::kString || t.id == format::TypeId::kBinary) {
    out.type = ValueType{t.id == format::TypeId::kString ? ValueKind::kString : ValueKind::kBinary};
    return out;
  }
  if (t.id == format::TypeId::kStruct) {
    out.type = ValueType{ValueKind::kStruct};
    for (const format::Field& c : t.children) {
      FW_ASSIGN_OR_RETURN(Field cf, FieldFromTable(c));
      out.children.push_back(std::move(cf));
    }
    return out;
  }
  if (t.id == format::TypeId::kMap) {
    // A list of non-null {key, value} structs, written as a MAP group.
    Field kv;
    kv.name = "key_value";
    kv.nullable = false;
    kv.type = ValueType{ValueKind::kStruct};
    for (const format::Field& c : t.children) {
      FW_ASSIGN_OR_RETURN(Field cf, FieldFromTable(c));
      kv.children.push_back(std::move(cf));
    }
    out.type = ValueType{ValueKind::kList};
    out.map = true;
    out.children.push_back(std::move(kv));
    return out;
  }
  if (t.id == format::TypeId::kList && t.is_nested()) {
    format::Field item = t.children[0];
    item.name = "element";
    FW_ASSIGN_OR_RETURN(Field elem, FieldFromTable(item));
    out.type = ValueType{ValueKind::kList};
    out.children.push_back(std::move(elem));
    return out;
  }
  if (t.id == format::TypeId::kList || !t.shape.empty()) {
    Field elem;
    elem.name = "element";
    elem.nullable = false;
    FW_ASSIGN_OR_RETURN(elem.type, ScalarValueType(t.id == format::TypeId::kList ? t.elem : t.id));
    out.type = ValueType{ValueKind::kList};
    out.children.push_back(std::move(elem));
    return out;
  }
  FW_ASSIGN_OR_RETURN(out.type, ScalarValueType(t.id));
  return out;
}

void CopyValidity(const format::Column& c, Array* a) {
  a->null_count = 0;
  if (c.validity.empty()) return;
  a->validity.assign(static_cast<size_t>((c.length + 7) / 8), 0);
  for (int64_t i = 0; i < c.length; ++i) {
    if (c.IsValid(i)) {
      a->validity[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    } else {
      ++a->null_count;
    }
  }
  if (a->null_count == 0) a->validity.clear();
}

}  // namespace

Status ParquetWriterOptions::Validate() const {
  switch (codec) {
    case CompressionCodec::kUncompressed:
    case CompressionCodec::kSnappy:
    case CompressionCodec::kLz4Raw:
      break;
    case CompressionCodec::kGzip:
      if (level > 9)
        return absl::InvalidArgumentError(
            absl::StrCat("GZIP level ", level, " (0..9, or < 0: default)"));
      break;
    case CompressionCodec::kBrotli:
      if (level > 11)
        return absl::InvalidArgumentError(
            absl::StrCat("BROTLI level ", level, " (0..11, or < 0: default)"));
      break;
    case CompressionCodec::kZstd:
      if (level > 22) {
        return absl::InvalidArgumentError(
            absl::StrCat("ZSTD level ", level, " (0..22, or < 0: default)"));
      }
      break;
    case CompressionCodec::kLz4:
    case CompressionCodec::kLzo:
      return absl::InvalidArgumentError(absl::StrCat("the writer does not write ",
                                                     AsAbsl(CodecName(codec)),
                                                     " (use LZ4_RAW, ZSTD or SNAPPY)"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown compression codec ", static_cast<int>(codec)));
  }
  if (page_bytes < 1 || page_bytes > kMaxPageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_bytes ", page_bytes, " (1..", kMaxPageBytes, ")"));
  }
  if (dictionary_bytes < 0 || dictionary_bytes > kMaxPageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("dictionary_bytes ", dictionary_bytes, " (0..", kMaxPageBytes, ")"));
  }
  for (const auto& [k, v] : key_value_metadata) {
    if (k.empty()) return absl::InvalidArgumentError("key_value_metadata has an empty key");
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<ParquetWriter>> ParquetWriter::Open(const std::string& path,
                                                           std::vector<Field> fields,
                                                           const ParquetWriterOptions& options) {
  auto w = std::make_unique<WriterImpl>(path, std::move(fields), options);
  FW_RETURN_IF_ERROR_CTX(w->Init(), "opening Parquet writer for ", path);
  return std::unique_ptr<ParquetWriter>(std::move(w));
}

Result<std::vector<Field>> FieldsFromTable(const format::Schema& schema) {
  FW_RETURN_IF_ERROR(schema.Validate());
  std::vector<Field> out;
  for (const format::Field& f : schema.fields) {
    FW_ASSIGN_OR_RETURN_CTX(Field p, FieldFromTable(f), "field ", f.name);
    out.push_back(std::move(p));
  }
  return out;
}

namespace {

// Rows [0, col.length) of a table column as a Parquet Array of `f` (which
// FieldFromTable made from the column's field), offsets rebased to 0.
Array ArrayFromColumn(const format::Column& col, const Field& f) {
  Array a;
  a.type = f.type;
  a.length = col.length;
  CopyValidity(col, &a);
  const format::DataType& t = col.type;
  if (t.id == format::TypeId::kStruct) {
    for (size_t k = 0; k < col.children.size(); ++k) a.children.push_back(ArrayFromColumn(col.children[k], f.children[k]));
  } else if (t.is_nested()) {
    const int64_t* o = col.offsets_data();
    a.offsets.resize(static_cast<size_t>(col.length) + 1);
    for (int64_t i = 0; i <= col.length; ++i) a.offsets[i] = o[i] - o[0];
    const int64_t first = o[0], n = o[col.length] - o[0];
    if (t.id == format::TypeId::kList) {
      a.children.push_back(ArrayFromColumn(col.children[0].Slice(first, n), f.children[0]));
    } else {
      Array kv;
      kv.type = f.children[0].type;
      kv.length = n;
      kv.children.push_back(ArrayFromColumn(col.children[0].Slice(first, n), f.children[0].children[0]));
      kv.children.push_back(ArrayFromColumn(col.children[1].Slice(first, n), f.children[0].children[1]));
      a.children.push_back(std::move(kv));
    }
  } else if (t.id == format::TypeId::kString || t.id == format::TypeId::kBinary) {
    const int64_t* o = col.offsets_data();
    a.offsets.resize(static_cast<size_t>(col.length) + 1);
    for (int64_t i = 0; i <= col.length; ++i) a.offsets[i] = o[i] - o[0];
    a.values.assign(col.values.data + o[0], col.values.data + o[col.length]);
  } else if (t.id == format::TypeId::kList) {
    const int64_t* o = col.offsets_data();
    const size_t esize = format::ScalarSize(t.elem);
    a.offsets.resize(static_cast<size_t>(col.length) + 1);
    for (int64_t i = 0; i <= col.length; ++i) a.offsets[i] = o[i] - o[0];
    Array e;
    e.type = f.children[0].type;
    e.length = o[col.length] - o[0];
    e.values.assign(col.values.data + o[0] * esize, col.values.data + o[col.length] * esize);
    a.children.push_back(std::move(e));
  } else if (!t.shape.empty()) {
    const int64_t k = t.num_elements();
    a.offsets.resize(static_cast<size_t>(col.length) + 1);
    for (int64_t i = 0; i <= col.length; ++i) a.offsets[i] = i * k;
    Array e;
    e.type = f.children[0].type;
    e.length = col.length * k;
    e.values.assign(col.values.data, col.values.data + col.length * t.fixed_width());
    a.children.push_back(std::move(e));
  } else {
    a.values.assign(col.values.data, col.values.data + col.length * t.fixed_width());
  }
  return a;
}

}  // namespace

Result<std::vector<Array>> ArraysFromTable(const format::RecordBatch& batch) {
  FW_RETURN_IF_ERROR(batch.Validate());
  std::vector<Array> out;
  for (size_t c = 0; c < batch.columns.size(); ++c) {
    const format::Field& field = batch.schema.fields[c];
    FW_ASSIGN_OR_RETURN_CTX(Field f, FieldFromTable(field), "field ", field.name);
    out.push_back(ArrayFromColumn(batch.columns[c], f));
  }
  return out;
}

}  // namespace flywheel::interop::parquet
