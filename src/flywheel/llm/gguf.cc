#include "flywheel/llm/gguf.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "flywheel/base/half.h"
#include "flywheel/io/file_system.h"

namespace flywheel::llm {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMaxDims = 4;          // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = 1 << 20;

// A bounds-checked little-endian reader over the header.
struct Cursor {
  const uint8_t* p;
  size_t size;
  size_t pos = 0;

  size_t left() const { return size - pos; }
  Status Need(uint64_t n, std::string_view what) const {
    if (n > left()) {
      return absl::DataLossError(absl::StrCat(AsAbsl(what), " at byte ", pos, " needs ", n, " bytes, ", left(), " remain"));
    }
    return absl::OkStatus();
  }
  template <typename T>
  Result<T> Get(std::string_view what) {
    FW_RETURN_IF_ERROR(Need(sizeof(T), what));
    T v;
    std::memcpy(&v, p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  Result<std::string_view> Str(std::string_view what) {
    FW_ASSIGN_OR_RETURN(const uint64_t n, Get<uint64_t>(what));
    if (n > left()) {
      return absl::DataLossError(absl::StrCat(AsAbsl(what), " at byte ", pos - 8, " claims ", n, " bytes, ", left(), " remain"));
    }
    std::string_view s(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(n));
    pos += static_cast<size_t>(n);
    return s;
  }
};

// Bytes of a scalar value type; 0 for strings and arrays; -1 for unknown.
int ScalarBytes(uint32_t t) {
  switch (static_cast<GgufType>(t)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return -1;
}

// Scalar at `p` of type `t` into `v` (u/i/f by kind).
void LoadScalar(GgufType t, const uint8_t* p, GgufValue* v) {
  auto load = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (t) {
    case GgufType::kUint8: v->u = load(uint8_t{}); break;
    case GgufType::kBool: v->u = load(uint8_t{}) != 0; break;
    case GgufType::kInt8: v->i = load(int8_t{}); break;
    case GgufType::kUint16: v->u = load(uint16_t{}); break;
    case GgufType::kInt16: v->i = load(int16_t{}); break;
    case GgufType::kUint32: v->u = load(uint32_t{}); break;
    case GgufType::kInt32: v->i = load(int32_t{}); break;
    case GgufType::kFloat32: v->f = load(float{}); break;
    case GgufType::kUint64: v->u = load(uint64_t{}); break;
    case GgufType::kInt64: v->i = load(int64_t{}); break;
    case GgufType::kFloat64: v->f = load(double{}); break;
    default: break;
  }
}

bool IsUnsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 || t == GgufType::kUint64 ||
         t == GgufType::kBool;
}
bool IsSigned(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 || t == GgufType::kInt64;
}
bool IsFloat(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

Result<GgufValue> ReadValue(Cursor& c, uint32_t type, std::string_view key) {
  GgufValue v;
  v.type = static_cast<GgufType>(type);
  const int width = ScalarBytes(type);
  if (width < 0) return absl::DataLossError(absl::StrCat("metadata '", AsAbsl(key), "' has unknown value type ", type));
  if (width > 0) {
    FW_RETURN_IF_ERROR(c.Need(static_cast<uint64_t>(width), absl::StrCat("metadata '", AsAbsl(key), "'")));
    LoadScalar(v.type, c.p + c.pos, &v);
    c.pos += static_cast<size_t>(width);
    return v;
  }
  if (v.type == GgufType::kString) {
    FW_ASSIGN_OR_RETURN(v.s, c.Str(absl::StrCat("metadata '", AsAbsl(key), "'")));
    return v;
  }
  FW_ASSIGN_OR_RETURN(const uint32_t elem, c.Get<uint32_t>(absl::StrCat("metadata '", AsAbsl(key), "' element type")));
  FW_ASSIGN_OR_RETURN(const uint64_t n, c.Get<uint64_t>(absl::StrCat("metadata '", AsAbsl(key), "' element count")));
  const int ew = ScalarBytes(elem);
  if (ew < 0) return absl::DataLossError(absl::StrCat("metadata '", AsAbsl(key), "' is an array of unknown type ", elem));
  if (static_cast<GgufType>(elem) == GgufType::kArray) {
    return absl::UnimplementedError(absl::StrCat("metadata '", AsAbsl(key), "' is an array of arrays (not supported)"));
  }
  v.elem = static_cast<GgufType>(elem);
  v.count = n;
  // Each element takes at least its width (a string at least its 8-byte
  // length): the count is checked against the bytes left before anything
  // is sized by it.
  const uint64_t min_bytes = ew > 0 ? static_cast<uint64_t>(ew) : 8;
  if (n > c.left() / min_bytes) {
    return absl::DataLossError(absl::StrCat("metadata '", AsAbsl(key), "' claims ", n, " elements at byte ", c.pos - 12, ", ",
                                            c.left(), " bytes remain"));
  }
  if (ew > 0) {
    v.elems = c.p + c.pos;
    c.pos += static_cast<size_t>(n * static_cast<uint64_t>(ew));
    return v;
  }
  v.strings.reserve(static_cast<size_t>(n));
  for (uint64_t k = 0; k < n; ++k) {
    FW_ASSIGN_OR_RETURN(std::string_view s, c.Str(absl::StrCat("metadata '", AsAbsl(key), "' element ", k)));
    v.strings.push_back(s);
  }
  return v;
}

}  // namespace

std::string GgmlTypeName(uint32_t type) {
  static constexpr const char* kNames[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0",    "Q5_1",    "Q8_0", "Q8_1",  "Q2_K",
      "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
      "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return absl::StrCat("type ", type);
}

bool GgmlBlock(uint32_t type, uint64_t* block_elements, uint64_t* block_bytes) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: *block_elements = 1; *block_bytes = 4; return true;
    case GgmlType::kF16:
    case GgmlType::kBF16: *block_elements = 1; *block_bytes = 2; return true;
    case GgmlType::kQ4_0: *block_elements = 32; *block_bytes = 18; return true;
    case GgmlType::kQ4_1: *block_elements = 32; *block_bytes = 20; return true;
    case GgmlType::kQ8_0: *block_elements = 32; *block_bytes = 34; return true;
  }
  return false;
}

Status DequantizeInto(uint32_t type, const uint8_t* src, size_t src_bytes, uint64_t n, float* out) {
  uint64_t be = 0, bb = 0;
  if (!GgmlBlock(type, &be, &bb)) {
    return absl::UnimplementedError(absl::StrCat("tensor type ", GgmlTypeName(type),
                                                 " is not supported (flywheel reads F32, F16, BF16, Q8_0, Q4_0, Q4_1)"));
  }
  if (n % be != 0) return absl::InvalidArgumentError(absl::StrCat(n, " elements are not whole blocks of ", be));
  if (n / be > src_bytes / bb) {
    return absl::DataLossError(absl::StrCat(n, " elements of ", GgmlTypeName(type), " need ", n / be * bb,
                                            " bytes, ", src_bytes, " given"));
  }
  auto f16 = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return static_cast<float>(HalfToDouble(h));
  };
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return absl::OkStatus();
    case GgmlType::kF16:
      for (uint64_t k = 0; k < n; ++k) out[k] = f16(src + 2 * k);
      return absl::OkStatus();
    case GgmlType::kBF16:
      for (uint64_t k = 0; k < n; ++k) {
        uint16_t h;
        std::memcpy(&h, src + 2 * k, 2);
        out[k] = Bf16ToFloat(h);
      }
      return absl::OkStatus();
    case GgmlType::kQ8_0:
      // Block: f16 scale d, then 32 int8 q; x = d * q.
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 34;
        const float d = f16(blk);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
      }
      return absl::OkStatus();
    case GgmlType::kQ4_0:
      // Block: f16 d, 16 bytes of nibbles; element j (< 16) is the low nibble
      // of byte j, element j + 16 its high nibble; x = d * (nibble - 8).
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 18;
        const float d = f16(blk);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * static_cast<float>((blk[2 + j] & 0x0f) - 8);
          out[b * 32 + j + 16] = d * static_cast<float>((blk[2 + j] >> 4) - 8);
        }
      }
      return absl::OkStatus();
    case GgmlType::kQ4_1:
      // Block: f16 d, f16 m, 16 bytes of nibbles (as Q4_0); x = d * nibble + m.
      for (uint64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + b * 20;
        const float d = f16(blk);
        const float m = f16(blk + 2);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * static_cast<float>(blk[4 + j] & 0x0f) + m;
          out[b * 32 + j + 16] = d * static_cast<float>(blk[4 + j] >> 4) + m;
        }
      }
      return absl::OkStatus();
  }
  return absl::InternalError("unreachable");
}

bool GgufValue::is_integer() const { return IsUnsigned(type) || IsSigned(type); }

Result<int64_t> GgufValue::AsInt(std::string_view key) const {
  if (IsSigned(type)) return i;
  if (IsUnsigned(type)) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("metadata '", AsAbsl(key), "' = ", u, " is out of range"));
    }
    return static_cast<int64_t>(u);
  }
  return absl::InvalidArgumentError(absl::StrCat("metadata '", AsAbsl(key), "' is not an integer"));
}

Result<double> GgufValue::AsFloat(std::string_view key) const {
  if (IsFloat(type)) return f;
  if (IsSigned(type)) return static_cast<double>(i);
  if (IsUnsigned(type)) return static_cast<double>(u);
  return absl::InvalidArgumentError(absl::StrCat("metadata '", AsAbsl(key), "' is not a number"));
}

int64_t GgufValue::IntAt(uint64_t k) const {
  GgufValue x;
  x.type = elem;
  LoadScalar(elem, elems + k * static_cast<uint64_t>(ScalarBytes(static_cast<uint32_t>(elem))), &x);
  return IsSigned(elem) ? x.i : IsFloat(elem) ? static_cast<int64_t>(x.f) : static_cast<int64_t>(x.u);
}

double GgufValue::FloatAt(uint64_t k) const {
  GgufValue x;
  x.type = elem;
  LoadScalar(elem, elems + k * static_cast<uint64_t>(ScalarBytes(static_cast<uint32_t>(elem))), &x);
  return IsFloat(elem) ? x.f : IsSigned(elem) ? static_cast<double>(x.i) : static_cast<double>(x.u);
}

GgufFile::~GgufFile() = default;

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  FW_ASSIGN_OR_RETURN(auto file, io::PosixFileSystem()->OpenRead(path));
  std::unique_ptr<GgufFile> g(new GgufFile());
  if (file->mapped_data() == nullptr) {
    g->owned_.resize(static_cast<size_t>(file->size()));
    FW_RETURN_IF_ERROR(file->ReadAt(0, g->owned_.size(), g->owned_.data()));
    FW_RETURN_IF_ERROR_CTX(g->ParseAll(reinterpret_cast<const uint8_t*>(g->owned_.data()), g->owned_.size()), path);
  } else {
    FW_RETURN_IF_ERROR_CTX(g->ParseAll(file->mapped_data(), static_cast<size_t>(file->size())), path);
  }
  g->file_ = std::move(file);
  return g;
}

Result<std::unique_ptr<GgufFile>> GgufFile::Parse(std::string bytes) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->owned_ = std::move(bytes);
  FW_RETURN_IF_ERROR(g->ParseAll(reinterpret_cast<const uint8_t*>(g->owned_.data()), g->owned_.size()));
  return g;
}

Status GgufFile::ParseAll(const uint8_t* p, size_t size) {
  Cursor c{p, size};
  FW_ASSIGN_OR_RETURN(const uint32_t magic, c.Get<uint32_t>("magic"));
  if (magic != kMagic) return absl::InvalidArgumentError("not a GGUF file (the first 4 bytes are not \"GGUF\")");
  FW_ASSIGN_OR_RETURN(version_, c.Get<uint32_t>("version"));
  if (version_ < 2 || version_ > 3) {
    return absl::UnimplementedError(absl::StrCat("GGUF version ", version_, " is not supported (2 and 3 are)"));
  }
  FW_ASSIGN_OR_RETURN(const uint64_t n_tensors, c.Get<uint64_t>("tensor count"));
  FW_ASSIGN_OR_RETURN(const uint64_t n_kv, c.Get<uint64_t>("metadata count"));
  // A metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; a
  // tensor entry at least 8 + 4 + 4 + 8.
  if (n_kv > c.left() / 13) {
    return absl::DataLossError(absl::StrCat("the header claims ", n_kv, " metadata entries, ", c.left(),
                                            " bytes remain"));
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    FW_ASSIGN_OR_RETURN(std::string_view key, c.Str(absl::StrCat("metadata key ", k)));
    FW_ASSIGN_OR_RETURN(const uint32_t type, c.Get<uint32_t>(absl::StrCat("metadata '", AsAbsl(key), "' type")));
    FW_ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, type, key));
    if (!metadata_.emplace(std::string(key), std::move(v)).second) {
      return absl::DataLossError(absl::StrCat("metadata key '", AsAbsl(key), "' appears twice"));
    }
  }
  if (const GgufValue* a = Find("general.alignment")) {
    FW_ASSIGN_OR_RETURN(const int64_t al, a->AsInt("general.alignment"));
    if (al <= 0 || static_cast<uint64_t>(al) > kMaxAlignment || (al & (al - 1)) != 0) {
      return absl::DataLossError(absl::StrCat("general.alignment ", al, " is not a power of two up to ", kMaxAlignment));
    }
    alignment_ = static_cast<uint64_t>(al);
  }
  if (n_tensors > c.left() / 24) {
    return absl::DataLossError(absl::StrCat("the header claims ", n_tensors, " tensors, ", c.left(), " bytes remain"));
  }
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    FW_ASSIGN_OR_RETURN(std::string_view name, c.Str(absl::StrCat("tensor ", k, " name")));
    t.name = std::string(name);
    FW_ASSIGN_OR_RETURN(const uint32_t nd, c.Get<uint32_t>(absl::StrCat("tensor '", t.name, "' dimension count")));
    if (nd == 0 || nd > kMaxDims) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' has ", nd, " dimensions (1 to ", kMaxDims, ")"));
    }
    t.elements = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      FW_ASSIGN_OR_RETURN(const uint64_t dim, c.Get<uint64_t>(absl::StrCat("tensor '", t.name, "' dimension")));
      if (dim == 0 || dim > (uint64_t{1} << 48) || t.elements > (uint64_t{1} << 48) / dim) {
        return absl::DataLossError(absl::StrCat("tensor '", t.name, "' dimension ", d, " = ", dim,
                                                " is zero or overflows"));
      }
      t.dims.push_back(dim);
      t.elements *= dim;
    }
    FW_ASSIGN_OR_RETURN(t.type, c.Get<uint32_t>(absl::StrCat("tensor '", t.name, "' type")));
    FW_ASSIGN_OR_RETURN(t.offset, c.Get<uint64_t>(absl::StrCat("tensor '", t.name, "' offset")));
    if (t.offset % alignment_ != 0) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' offset ", t.offset, " is not a multiple of the ",
                                              alignment_, "-byte alignment"));
    }
    uint64_t be = 0, bb = 0;
    if (GgmlBlock(t.type, &be, &bb)) {
      if (t.dims[0] % be != 0) {
        return absl::DataLossError(absl::StrCat("tensor '", t.name, "' rows of ", t.dims[0], " are not whole ",
                                                GgmlTypeName(t.type), " blocks of ", be));
      }
      t.bytes = t.elements / be * bb;
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    tensors_.push_back(std::move(t));
  }
  const uint64_t data_start = (static_cast<uint64_t>(c.pos) + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_start > size) {
    return absl::DataLossError(absl::StrCat("the data section would start at byte ", data_start, ", past the end (",
                                            size, " bytes)"));
  }
  data_ = p + std::min<uint64_t>(data_start, size);
  const uint64_t data_bytes = size - std::min<uint64_t>(data_start, size);
  for (const GgufTensor& t : tensors_) {
    if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' bytes [", t.offset, ", ", t.offset + t.bytes,
                                              ") run past the data section's ", data_bytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Result<int64_t> GgufFile::Int(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata '", AsAbsl(key), "' is missing"));
  return v->AsInt(key);
}

Result<double> GgufFile::Float(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata '", AsAbsl(key), "' is missing"));
  return v->AsFloat(key);
}

Result<std::string> GgufFile::String(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("metadata '", AsAbsl(key), "' is missing"));
  if (v->type != GgufType::kString) return absl::InvalidArgumentError(absl::StrCat("metadata '", AsAbsl(key), "' is not a string"));
  return std::string(v->s);
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::vector<float>> GgufFile::Dequantize(const GgufTensor& t) const {
  uint64_t be = 0, bb = 0;
  if (!GgmlBlock(t.type, &be, &bb)) {
    return absl::UnimplementedError(absl::StrCat("tensor '", t.name, "' is ", GgmlTypeName(t.type),
                                                 ", which flywheel does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1)"));
  }
  std::vector<float> out(static_cast<size_t>(t.elements));
  FW_RETURN_IF_ERROR_CTX(DequantizeInto(t.type, Data(t), static_cast<size_t>(t.bytes), t.elements, out.data()),
                         "tensor '", t.name, "'");
  return out;
}

}  // namespace flywheel::llm
