#include "flywheel/interop/parquet/thrift.h"

#include <cassert>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace flywheel::interop::parquet {
namespace {

constexpr uint8_t kMaxTypeCode = static_cast<uint8_t>(CompactType::kUuid);
constexpr uint64_t kMaxContainerSize = std::numeric_limits<int32_t>::max();

// The fewest bytes one container element of `type` can take: what bounds a
// container's size by the bytes left.
size_t MinElementBytes(CompactType type) {
  switch (type) {
    case CompactType::kDouble:
      return 8;
    case CompactType::kUuid:
      return 16;
    default:
      return 1;  // a one-byte varint, bool byte, length, header or stop byte
  }
}

// Container element types: a valid code, bools reported as kBoolTrue.
bool ToElementType(uint8_t code, CompactType* type) {
  if (code == 0 || code > kMaxTypeCode) return false;
  *type = code == static_cast<uint8_t>(CompactType::kBoolFalse) ? CompactType::kBoolTrue
                                                                : static_cast<CompactType>(code);
  return true;
}

}  // namespace

std::string CompactTypeName(CompactType type) {
  switch (type) {
    case CompactType::kStop:
      return "stop";
    case CompactType::kBoolTrue:
    case CompactType::kBoolFalse:
      return "bool";
    case CompactType::kByte:
      return "i8";
    case CompactType::kI16:
      return "i16";
    case CompactType::kI32:
      return "i32";
    case CompactType::kI64:
      return "i64";
    case CompactType::kDouble:
      return "double";
    case CompactType::kBinary:
      return "binary";
    case CompactType::kList:
      return "list";
    case CompactType::kSet:
      return "set";
    case CompactType::kMap:
      return "map";
    case CompactType::kStruct:
      return "struct";
    case CompactType::kUuid:
      return "uuid";
  }
  return absl::StrCat("type ", static_cast<int>(type));
}

// ---------------------------------------------------------------------------
// CompactReader

Status CompactReader::Error(std::string_view what, size_t at, std::string_view problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat("thrift: ", AsAbsl(what), " at byte ", at, ": ", AsAbsl(problem)));
}

Result<uint64_t> CompactReader::ReadVarint(std::string_view what) {
  const size_t start = pos_;
  uint64_t value = 0;
  for (int i = 0; i < 10; ++i) {
    if (pos_ >= size_) return Error(what, start, "truncated varint");
    const uint8_t b = data_[pos_++];
    if (i == 9) {
      // The 10th byte holds bit 63 alone.
      if (b & 0x80) return Error(what, start, "varint longer than 10 bytes");
      if (b > 1) return Error(what, start, "varint overflows 64 bits");
    }
    value |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) return value;
  }
  return Error(what, start, "varint longer than 10 bytes");  // unreachable
}

Result<int8_t> CompactReader::ReadByte(std::string_view what) {
  if (pos_ >= size_) return Error(what, pos_, "truncated i8");
  return static_cast<int8_t>(data_[pos_++]);
}

Result<int16_t> CompactReader::ReadI16(std::string_view what) {
  const size_t start = pos_;
  FW_ASSIGN_OR_RETURN(uint64_t u, ReadVarint(what));
  if (u > 0xffff) return Error(what, start, absl::StrCat("zigzag value ", u, " overflows i16"));
  return static_cast<int16_t>(static_cast<int32_t>(u >> 1) ^ -static_cast<int32_t>(u & 1));
}

Result<int32_t> CompactReader::ReadI32(std::string_view what) {
  const size_t start = pos_;
  FW_ASSIGN_OR_RETURN(uint64_t u, ReadVarint(what));
  if (u > 0xffffffffu) {
    return Error(what, start, absl::StrCat("zigzag value ", u, " overflows i32"));
  }
  const uint32_t z = static_cast<uint32_t>(u);
  return static_cast<int32_t>((z >> 1) ^ (~(z & 1) + 1));
}

Result<int64_t> CompactReader::ReadI64(std::string_view what) {
  FW_ASSIGN_OR_RETURN(uint64_t u, ReadVarint(what));
  return static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
}

Result<double> CompactReader::ReadDouble(std::string_view what) {
  if (remaining() < 8) return Error(what, pos_, "truncated double");
  uint64_t bits = 0;
  for (int i = 7; i >= 0; --i) bits = (bits << 8) | data_[pos_ + i];
  pos_ += 8;
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

Result<std::string> CompactReader::ReadBinary(std::string_view what) {
  const size_t start = pos_;
  FW_ASSIGN_OR_RETURN(uint64_t len, ReadVarint(what));
  if (len > remaining()) {
    return Error(what, start,
                 absl::StrCat("length ", len, " exceeds the ", remaining(), " bytes left"));
  }
  std::string out(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
  pos_ += static_cast<size_t>(len);
  return out;
}

Result<bool> CompactReader::ReadBoolElement(std::string_view what) {
  if (pos_ >= size_) return Error(what, pos_, "truncated bool");
  const uint8_t b = data_[pos_];
  if (b > 2) return Error(what, pos_, absl::StrCat("bool element byte ", b, " is not 0, 1 or 2"));
  ++pos_;
  return b == 1;
}

Status CompactReader::BeginStruct(std::string_view what) {
  if (last_ids_.size() >= static_cast<size_t>(kMaxDepth)) {
    return Error(what, pos_, absl::StrCat("structs nested deeper than ", kMaxDepth));
  }
  last_ids_.push_back(0);
  return absl::OkStatus();
}

void CompactReader::EndStruct() {
  assert(!last_ids_.empty());
  if (!last_ids_.empty()) last_ids_.pop_back();
}

Result<FieldHeader> CompactReader::ReadFieldHeader(std::string_view what) {
  const size_t start = pos_;
  if (pos_ >= size_) return Error(what, start, "truncated: field header or stop byte expected");
  const uint8_t b = data_[pos_++];
  if (b == 0) return FieldHeader{};
  const uint8_t code = b & 0x0f;
  const int delta = b >> 4;
  if (code == 0 || code > kMaxTypeCode) {
    return Error(what, start, absl::StrCat("field header has invalid type code ", code));
  }
  const int last = last_ids_.empty() ? 0 : last_ids_.back();
  int id;
  if (delta == 0) {
    FW_ASSIGN_OR_RETURN(id, ReadI16(absl::StrCat(AsAbsl(what), " field id")));
  } else {
    id = last + delta;
    if (id > std::numeric_limits<int16_t>::max()) {
      return Error(what, start,
                   absl::StrCat("field id delta ", delta, " after ", last, " overflows i16"));
    }
  }
  if (!last_ids_.empty()) last_ids_.back() = static_cast<int16_t>(id);
  return FieldHeader{static_cast<CompactType>(code), static_cast<int16_t>(id)};
}

Result<ListHeader> CompactReader::ReadListHeader(std::string_view what) {
  const size_t start = pos_;
  if (pos_ >= size_) return Error(what, start, "truncated list header");
  const uint8_t b = data_[pos_++];
  ListHeader h;
  if (!ToElementType(b & 0x0f, &h.elem_type)) {
    return Error(what, start, absl::StrCat("list header has invalid element type ", b & 0x0f));
  }
  uint64_t size = b >> 4;
  if (size == 15) {
    FW_ASSIGN_OR_RETURN(size, ReadVarint(what));
    if (size > kMaxContainerSize) {
      return Error(what, start, absl::StrCat("list size ", size, " exceeds i32"));
    }
  }
  if (size > remaining() / MinElementBytes(h.elem_type)) {
    return Error(what, start,
                 absl::StrCat("list of ", size, " ", CompactTypeName(h.elem_type),
                              " elements cannot fit in the ", remaining(), " bytes left"));
  }
  h.size = static_cast<uint32_t>(size);
  return h;
}

Result<MapHeader> CompactReader::ReadMapHeader(std::string_view what) {
  const size_t start = pos_;
  FW_ASSIGN_OR_RETURN(uint64_t size, ReadVarint(what));
  MapHeader h;
  if (size == 0) return h;
  if (size > kMaxContainerSize) {
    return Error(what, start, absl::StrCat("map size ", size, " exceeds i32"));
  }
  if (pos_ >= size_) return Error(what, start, "truncated map header");
  const uint8_t kv = data_[pos_++];
  if (!ToElementType(kv >> 4, &h.key_type) || !ToElementType(kv & 0x0f, &h.value_type)) {
    return Error(what, start,
                 absl::StrCat("map header has invalid key/value types ", kv >> 4, "/", kv & 0x0f));
  }
  const size_t min_entry = MinElementBytes(h.key_type) + MinElementBytes(h.value_type);
  if (size > remaining() / min_entry) {
    return Error(
        what, start,
        absl::StrCat("map of ", size, " entries cannot fit in the ", remaining(), " bytes left"));
  }
  h.size = static_cast<uint32_t>(size);
  return h;
}

Status CompactReader::SkipBytes(size_t n, std::string_view what) {
  if (n > remaining()) {
    return Error(what, pos_,
                 absl::StrCat("truncated: ", n, " bytes needed, ", remaining(), " left"));
  }
  pos_ += n;
  return absl::OkStatus();
}

Status CompactReader::Skip(CompactType type) { return SkipValue(type, false, depth()); }

Status CompactReader::SkipElement(CompactType type) { return SkipValue(type, true, depth()); }

Status CompactReader::SkipValue(CompactType type, bool element, int depth) {
  switch (type) {
    case CompactType::kBoolTrue:
    case CompactType::kBoolFalse:
      // A bool field's value is in its header; an element is one byte.
      if (element) return ReadBoolElement("skipped bool").status();
      return absl::OkStatus();
    case CompactType::kByte:
      return SkipBytes(1, "skipped i8");
    case CompactType::kI16:
      return ReadI16("skipped i16").status();
    case CompactType::kI32:
      return ReadI32("skipped i32").status();
    case CompactType::kI64:
      return ReadI64("skipped i64").status();
    case CompactType::kDouble:
      return SkipBytes(8, "skipped double");
    case CompactType::kUuid:
      return SkipBytes(16, "skipped uuid");
    case CompactType::kBinary: {
      const size_t start = pos_;
      FW_ASSIGN_OR_RETURN(uint64_t len, ReadVarint("skipped binary length"));
      if (len > remaining()) {
        return Error("skipped binary", start,
                     absl::StrCat("length ", len, " exceeds the ", remaining(), " bytes left"));
      }
      pos_ += static_cast<size_t>(len);
      return absl::OkStatus();
    }
    case CompactType::kList:
    case CompactType::kSet: {
      if (depth >= kMaxDepth) {
        return Error("skipped list", pos_, absl::StrCat("nested deeper than ", kMaxDepth));
      }
      FW_ASSIGN_OR_RETURN(ListHeader h, ReadListHeader("skipped list header"));
      for (uint32_t i = 0; i < h.size; ++i) {
        FW_RETURN_IF_ERROR(SkipValue(h.elem_type, true, depth + 1));
      }
      return absl::OkStatus();
    }
    case CompactType::kMap: {
      if (depth >= kMaxDepth) {
        return Error("skipped map", pos_, absl::StrCat("nested deeper than ", kMaxDepth));
      }
      FW_ASSIGN_OR_RETURN(MapHeader h, ReadMapHeader("skipped map header"));
      for (uint32_t i = 0; i < h.size; ++i) {
        FW_RETURN_IF_ERROR(SkipValue(h.key_type, true, depth + 1));
        FW_RETURN_IF_ERROR(SkipValue(h.value_type, true, depth + 1));
      }
      return absl::OkStatus();
    }
    case CompactType::kStruct: {
      if (depth >= kMaxDepth) {
        return Error("skipped struct", pos_, absl::StrCat("nested deeper than ", kMaxDepth));
      }
      FW_RETURN_IF_ERROR(BeginStruct("skipped struct"));
      while (true) {
        FW_ASSIGN_OR_RETURN(FieldHeader f, ReadFieldHeader("skipped struct"));
        if (f.type == CompactType::kStop) break;
        FW_RETURN_IF_ERROR(SkipValue(f.type, false, depth + 1));
      }
      EndStruct();
      return absl::OkStatus();
    }
    case CompactType::kStop:
      break;
  }
  return Error("skipped value", pos_,
               absl::StrCat("cannot skip a value of ", CompactTypeName(type)));
}

// ---------------------------------------------------------------------------
// CompactWriter

void CompactWriter::WriteVarint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void CompactWriter::WriteI16(int16_t v) { WriteI32(v); }

void CompactWriter::WriteI32(int32_t v) {
  const uint32_t u = static_cast<uint32_t>(v);
  WriteVarint((u << 1) ^ (v < 0 ? 0xffffffffu : 0u));
}

void CompactWriter::WriteI64(int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  WriteVarint((u << 1) ^ (v < 0 ? ~uint64_t{0} : uint64_t{0}));
}

void CompactWriter::WriteDouble(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void CompactWriter::WriteBinary(std::string_view v) {
  WriteVarint(v.size());
  out_.append(v.data(), v.size());
}

void CompactWriter::EndStruct() {
  assert(!last_ids_.empty());
  out_.push_back(0);
  if (!last_ids_.empty()) last_ids_.pop_back();
}

void CompactWriter::WriteFieldHeader(CompactType type, int16_t id) {
  assert(!last_ids_.empty());
  const int last = last_ids_.empty() ? 0 : last_ids_.back();
  const int delta = static_cast<int>(id) - last;
  const uint8_t code = static_cast<uint8_t>(type);
  if (delta > 0 && delta <= 15) {
    out_.push_back(static_cast<char>((delta << 4) | code));
  } else {
    out_.push_back(static_cast<char>(code));
    WriteI16(id);
  }
  if (!last_ids_.empty()) last_ids_.back() = id;
}

void CompactWriter::WriteListHeader(CompactType elem_type, uint32_t size) {
  const uint8_t code = static_cast<uint8_t>(elem_type);
  if (size < 15) {
    out_.push_back(static_cast<char>((size << 4) | code));
  } else {
    out_.push_back(static_cast<char>(0xf0 | code));
    WriteVarint(size);
  }
}

void CompactWriter::WriteMapHeader(CompactType key_type, CompactType value_type, uint32_t size) {
  WriteVarint(size);
  if (size == 0) return;
  out_.push_back(
      static_cast<char>((static_cast<uint8_t>(key_type) << 4) | static_cast<uint8_t>(value_type)));
}

}  // namespace flywheel::interop::parquet
