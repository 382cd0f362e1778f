// Implements docs/format/shard.md, section 3.3 (nested page bodies).
#include "flywheel/format/internal/nested_page.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace flywheel::internal_format {

using format::ScalarSize;
using format::TypeId;
using format::TypeIdName;

namespace {

uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

bool HasOffsets(const DataType& t) { return !t.is_fixed_width() && t.id != TypeId::kStruct; }

// Bytes per value element of a leaf with a values buffer.
size_t ElemSize(const DataType& t) {
  if (t.is_fixed_width()) return t.fixed_width();
  if (t.id == TypeId::kList) return ScalarSize(t.elem);
  return 1;
}

struct Node {
  int64_t length = 0;
  int64_t nulls = 0;
  std::string validity, offsets, values;
};

void Encode(const Column& c, int64_t offset, int64_t n, std::vector<Node>* nodes) {
  nodes->emplace_back();
  const size_t me = nodes->size() - 1;
  {
    Node& node = (*nodes)[me];
    node.length = n;
    if (c.null_count > 0 && !c.validity.empty()) {
      std::string bits(static_cast<size_t>((n + 7) / 8), '\0');
      for (int64_t i = 0; i < n; ++i) {
        if (c.IsValid(offset + i)) bits[i >> 3] = static_cast<char>(bits[i >> 3] | (1 << (i & 7)));
        else node.nulls++;
      }
      if (node.nulls > 0) node.validity = std::move(bits);
    }
  }
  if (c.type.id == TypeId::kStruct) {
    for (const Column& ch : c.children) Encode(ch, offset, n, nodes);
    return;
  }
  if (c.type.is_fixed_width()) {
    const size_t w = c.type.fixed_width();
    (*nodes)[me].values.assign(reinterpret_cast<const char*>(c.values.data + offset * w), n * w);
    return;
  }
  const int64_t* o = c.offsets_data() + offset;
  std::string offs(static_cast<size_t>(n + 1) * 8, '\0');
  auto* out = reinterpret_cast<int64_t*>(offs.data());
  for (int64_t i = 0; i <= n; ++i) out[i] = o[i] - o[0];
  (*nodes)[me].offsets = std::move(offs);
  if (c.type.is_nested()) {
    for (const Column& ch : c.children) Encode(ch, o[0], o[n] - o[0], nodes);
    return;
  }
  const size_t e = ElemSize(c.type);
  (*nodes)[me].values.assign(reinterpret_cast<const char*>(c.values.data + o[0] * e),
                             static_cast<size_t>(o[n] - o[0]) * e);
}

class Decoder {
 public:
  Decoder(const Buffer& body, bool full) : body_(body), full_(full) {}

  Status Start(const DataType& type) {
    const uint64_t nodes = static_cast<uint64_t>(NestedNodeCount(type));
    table_end_ = nodes * kNestedNodeEntryBytes;
    if (body_.size < table_end_) {
      return absl::DataLossError(absl::StrCat("nested page of ", body_.size, " bytes is shorter than its node table of ",
                                              nodes, " nodes"));
    }
    pos_ = table_end_;
    return absl::OkStatus();
  }

  Status Finish() const {
    if (pos_ != body_.size) {
      return absl::DataLossError(
          absl::StrCat("nested page sections end at byte ", pos_, " of a ", body_.size, "-byte body"));
    }
    return absl::OkStatus();
  }

  // Decodes the next node, which must hold `length` rows of `type`.
  Result<Column> Node(const DataType& type, bool nullable, int64_t length, const std::string& path) {
    auto bad = [&](auto&&... msg) {
      return absl::DataLossError(absl::StrCat("nested page node '", path, "' (", type.ToString(), "): ", msg...));
    };
    uint64_t e[5];
    std::memcpy(e, body_.data + next_entry_ * kNestedNodeEntryBytes, sizeof(e));
    next_entry_++;
    const uint64_t len = e[0], nulls = e[1], vsize = e[2], osize = e[3], valsize = e[4];
    if (len != static_cast<uint64_t>(length)) return bad("holds ", len, " rows, its parent says ", length);
    // Every row of every node takes at least one byte of the body (a leaf's
    // value or offset), which bounds the sizes below from overflowing.
    if (len > body_.size) return bad(len, " rows cannot fit a ", body_.size, "-byte page");
    if (nulls > len) return bad("null count ", nulls, " exceeds its ", len, " rows");
    if (nulls > 0 && !nullable) return bad("nulls in a non-nullable value");
    if (vsize != (nulls > 0 ? (len + 7) / 8 : 0)) return bad("validity size ", vsize, " does not match its null count");
    const bool has_offsets = HasOffsets(type);
    if (osize != (has_offsets ? (len + 1) * 8 : 0)) return bad("offsets size ", osize, " does not match ", len, " rows");
    Column c;
    c.type = type;
    c.length = length;
    c.null_count = static_cast<int64_t>(nulls);
    FW_ASSIGN_OR_RETURN(Buffer validity, Take(vsize, bad));
    if (vsize > 0) {
      c.validity = validity;
      if (full_) {
        int64_t counted = 0;
        for (int64_t i = 0; i < length; ++i) counted += !c.IsValid(i);
        if (counted != c.null_count) return bad("validity has ", counted, " nulls, the node table ", nulls);
      }
    }
    if (has_offsets) {
      FW_ASSIGN_OR_RETURN(c.offsets, Take(osize, bad));
      const int64_t* o = c.offsets_data();
      if (o[0] != 0) return bad("offsets do not start at 0");
      if (o[length] < 0 || static_cast<uint64_t>(o[length]) > body_.size) {
        return bad("last offset ", o[length], " is outside the page");
      }
      if (full_) {
        for (int64_t i = 0; i < length; ++i) {
          if (o[i + 1] < o[i]) return bad("offsets decrease at row ", i);
        }
      }
    }
    if (type.id == TypeId::kStruct) {
      if (valsize != 0) return bad("a struct has no values section");
      for (const Field& f : type.children) {
        FW_ASSIGN_OR_RETURN(Column ch, Node(f.type, f.nullable, length, absl::StrCat(path, ".", f.name)));
        c.children.push_back(std::move(ch));
      }
      return c;
    }
    if (type.is_nested()) {
      if (valsize != 0) return bad("a ", AsAbsl(TypeIdName(type.id)), " has no values section");
      const int64_t elems = c.offsets_data()[length];
      for (const Field& f : type.children) {
        FW_ASSIGN_OR_RETURN(Column ch, Node(f.type, f.nullable, elems, absl::StrCat(path, "[", f.name, "]")));
        c.children.push_back(std::move(ch));
      }
      return c;
    }
    // A leaf: its values must be exactly what the rows (or offsets) span.
    if (type.is_fixed_width() && len > valsize / type.fixed_width()) {
      return bad("values size ", valsize, " is short of ", len, " rows");
    }
    const uint64_t want = type.is_fixed_width()
                              ? len * type.fixed_width()
                              : static_cast<uint64_t>(c.offsets_data()[length]) * ElemSize(type);
    if (valsize != want) return bad("values size ", valsize, " does not match the rows (", want, ")");
    FW_ASSIGN_OR_RETURN(c.values, Take(valsize, bad));
    return c;
  }

 private:
  template <typename Bad>
  Result<Buffer> Take(uint64_t size, const Bad& bad) {
    if (size > body_.size - pos_ || Align8(size) > body_.size - pos_) {
      return bad("a section of ", size, " bytes runs past the page body");
    }
    Buffer b{body_.data + pos_, static_cast<size_t>(size), body_.owner};
    pos_ += Align8(size);
    return b;
  }

  const Buffer& body_;
  const bool full_;
  uint64_t table_end_ = 0;
  uint64_t pos_ = 0;
  uint64_t next_entry_ = 0;
};

}  // namespace

int NestedNodeCount(const DataType& type) {
  int n = 1;
  for (const Field& f : type.children) n += NestedNodeCount(f.type);
  return n;
}

uint64_t EstimateNestedPageBytes(const Column& c, int64_t offset, int64_t n) {
  uint64_t bytes = kNestedNodeEntryBytes + (c.null_count > 0 ? Align8(static_cast<uint64_t>((n + 7) / 8)) : 0);
  if (c.type.id == TypeId::kStruct) {
    for (const Column& ch : c.children) bytes += EstimateNestedPageBytes(ch, offset, n);
    return bytes;
  }
  if (c.type.is_fixed_width()) return bytes + Align8(static_cast<uint64_t>(n) * c.type.fixed_width());
  const int64_t* o = c.offsets_data();
  bytes += static_cast<uint64_t>(n + 1) * 8;
  if (c.type.is_nested()) {
    for (const Column& ch : c.children) bytes += EstimateNestedPageBytes(ch, o[offset], o[offset + n] - o[offset]);
    return bytes;
  }
  return bytes + Align8(static_cast<uint64_t>(o[offset + n] - o[offset]) * ElemSize(c.type));
}

void EncodeNestedPage(const Column& c, int64_t offset, int64_t n, std::string* out) {
  std::vector<Node> nodes;
  Encode(c, offset, n, &nodes);
  const size_t start = out->size();
  for (const Node& node : nodes) {
    const uint64_t e[5] = {static_cast<uint64_t>(node.length), static_cast<uint64_t>(node.nulls),
                           node.validity.size(), node.offsets.size(), node.values.size()};
    out->append(reinterpret_cast<const char*>(e), sizeof(e));
  }
  for (const Node& node : nodes) {
    for (const std::string* s : {&node.validity, &node.offsets, &node.values}) {
      out->append(*s);
      out->resize(start + Align8(out->size() - start), '\0');
    }
  }
}

Result<Column> DecodeNestedPage(const Field& field, int64_t num_rows, int64_t null_count, const Buffer& body,
                                bool full) {
  Decoder d(body, full);
  FW_RETURN_IF_ERROR(d.Start(field.type));
  FW_ASSIGN_OR_RETURN(Column c, d.Node(field.type, field.nullable, num_rows, field.name));
  if (c.null_count != null_count) {
    return absl::DataLossError(absl::StrCat("nested page holds ", c.null_count, " null rows, the page index says ",
                                            null_count));
  }
  FW_RETURN_IF_ERROR(d.Finish());
  return c;
}

}  // namespace flywheel::internal_format
