// libFuzzer target for the Arrow C data interface importer (format/arrow.h,
// docs/arrow.md).
//
// The interface carries pointers, not sizes, so a producer is trusted to
// give buffers as large as its lengths and offsets say. Within that
// contract, the input picks the parts flywheel must check itself: the Arrow
// type (format string, children, dictionary, extension metadata), lengths
// and offsets (slices), validity bitmaps and null counts, int32/int64 offsets,
// string/binary views (lengths, buffer indices and offsets, checked against
// the variadic sizes buffer) and dictionary indices. Every buffer the
// importer may read is allocated here with the size the declared lengths
// imply, so ASan reports any read past what a conforming producer gives.
// ImportBatch must return an error or a batch whose columns validate and
// whose every byte can be read; an imported batch must export and import
// again to the same values.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/format/arrow.h"

namespace {

using flywheel::format::Column;
using flywheel::format::RecordBatch;
using flywheel::format::TypeId;

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t Byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(Byte()) << (8 * i);
    return v;
  }
};

// Storage for one synthetic array tree.
struct Arena {
  std::vector<std::unique_ptr<std::vector<uint8_t>>> bufs;
  std::vector<std::unique_ptr<ArrowArray>> arrays;
  std::vector<std::unique_ptr<ArrowSchema>> schemas;
  std::vector<std::unique_ptr<std::vector<const void*>>> ptrs;
  std::vector<std::unique_ptr<std::vector<ArrowArray*>>> kids;
  std::vector<std::unique_ptr<std::vector<ArrowSchema*>>> skids;
  std::vector<std::unique_ptr<std::string>> strings;

  uint8_t* Buf(size_t size, Reader& r) {
    bufs.push_back(std::make_unique<std::vector<uint8_t>>(size + 1));
    auto& b = *bufs.back();
    for (size_t i = 0; i < size; ++i) b[i] = r.Byte();
    return b.data();
  }
  const char* Str(std::string s) {
    strings.push_back(std::make_unique<std::string>(std::move(s)));
    return strings.back()->c_str();
  }
};

void NoRelease(ArrowArray* a) { a->release = nullptr; }
void NoReleaseSchema(ArrowSchema* s) { s->release = nullptr; }

ArrowArray* NewArray(Arena& ar, int64_t length, int64_t offset, std::vector<const void*> buffers,
                     std::vector<ArrowArray*> children, int64_t null_count) {
  ar.arrays.push_back(std::make_unique<ArrowArray>());
  ArrowArray* a = ar.arrays.back().get();
  ar.ptrs.push_back(std::make_unique<std::vector<const void*>>(std::move(buffers)));
  ar.kids.push_back(std::make_unique<std::vector<ArrowArray*>>(std::move(children)));
  a->length = length;
  a->offset = offset;
  a->null_count = null_count;
  a->n_buffers = static_cast<int64_t>(ar.ptrs.back()->size());
  a->buffers = ar.ptrs.back()->data();
  a->n_children = static_cast<int64_t>(ar.kids.back()->size());
  a->children = ar.kids.back()->empty() ? nullptr : ar.kids.back()->data();
  a->dictionary = nullptr;
  a->release = &NoRelease;
  a->private_data = nullptr;
  return a;
}

ArrowSchema* NewSchema(Arena& ar, const char* format, const char* name, std::vector<ArrowSchema*> children,
                       const char* metadata = nullptr) {
  ar.schemas.push_back(std::make_unique<ArrowSchema>());
  ArrowSchema* s = ar.schemas.back().get();
  ar.skids.push_back(std::make_unique<std::vector<ArrowSchema*>>(std::move(children)));
  s->format = format;
  s->name = name;
  s->metadata = metadata;
  s->flags = ARROW_FLAG_NULLABLE;
  s->n_children = static_cast<int64_t>(ar.skids.back()->size());
  s->children = ar.skids.back()->empty() ? nullptr : ar.skids.back()->data();
  s->dictionary = nullptr;
  s->release = &NoReleaseSchema;
  s->private_data = nullptr;
  return s;
}

// An offsets buffer (int32 or int64) holding `offs`.
uint8_t* Offsets(Arena& ar, Reader& r, const std::vector<int64_t>& offs, bool wide) {
  uint8_t* o = ar.Buf(offs.size() * (wide ? 8 : 4), r);
  for (size_t i = 0; i < offs.size(); ++i) {
    if (wide) {
      std::memcpy(o + i * 8, &offs[i], 8);
    } else {
      const int32_t v = static_cast<int32_t>(offs[i]);
      std::memcpy(o + i * 4, &v, 4);
    }
  }
  return o;
}

const char* const kScalars[] = {"b", "c", "C", "s", "S", "i", "I", "l", "L", "e", "f", "g"};
size_t ScalarBytes(const char* f) {
  switch (f[0]) {
    case 'c': case 'C': return 1;
    case 's': case 'S': case 'e': return 2;
    case 'i': case 'I': case 'f': return 4;
    default: return 8;
  }
}

// One column: (schema, array) of `rows` logical rows starting at `offset`.
void MakeColumn(Arena& ar, Reader& r, int64_t rows, int depth, ArrowSchema** s_out, ArrowArray** a_out) {
  const int64_t offset = r.Byte() % 9;
  const int64_t total = rows + offset;
  const bool has_validity = r.Byte() & 1;
  const void* validity = has_validity ? ar.Buf(static_cast<size_t>((total + 7) / 8), r) : nullptr;
  const int64_t null_count = has_validity ? -1 : 0;
  // Children of children are scalars: nesting is what a conforming producer
  // gives in one or two levels, and deeper fixed-size lists would multiply
  // the lengths (and this harness's buffers) past any memory.
  const uint8_t kind = depth >= 2 ? r.Byte() % 2 : r.Byte() % (depth > 0 ? 7 : 9);
  const char* name = ar.Str("c" + std::to_string(r.Byte()));
  switch (kind) {
    case 0: case 1: {  // scalar
      const char* f = kScalars[r.Byte() % 12];
      const size_t bytes = f[0] == 'b' ? static_cast<size_t>((total + 7) / 8) : ScalarBytes(f) * total;
      *s_out = NewSchema(ar, f, name, {});
      *a_out = NewArray(ar, rows, offset, {validity, ar.Buf(bytes, r)}, {}, null_count);
      return;
    }
    case 2: case 3: {  // string / binary, int32 or int64 offsets, offsets from the input (kept monotonic)
      const bool wide = kind == 3;
      std::vector<int64_t> offs(static_cast<size_t>(total + 1));
      for (int64_t i = 1; i <= total; ++i) offs[i] = offs[i - 1] + r.Byte() % 20;
      if (r.Byte() == 7) offs[static_cast<size_t>(total / 2)] += 5;  // sometimes not monotonic
      uint8_t* o = Offsets(ar, r, offs, wide);
      int64_t max = 0;
      for (int64_t v : offs) max = v > max ? v : max;
      *s_out = NewSchema(ar, wide ? (r.Byte() & 1 ? "U" : "Z") : (r.Byte() & 1 ? "u" : "z"), name, {});
      *a_out = NewArray(ar, rows, offset, {validity, o, ar.Buf(static_cast<size_t>(max), r)}, {}, null_count);
      return;
    }
    case 4: {  // string view with 1-2 data buffers and their sizes
      const int nbuf = 1 + r.Byte() % 2;
      std::vector<int64_t> sizes;
      std::vector<const void*> bufs{validity, ar.Buf(static_cast<size_t>(total) * 16, r)};
      for (int b = 0; b < nbuf; ++b) {
        sizes.push_back(r.Byte());
        bufs.push_back(ar.Buf(static_cast<size_t>(sizes.back()), r));
      }
      uint8_t* sz = ar.Buf(sizes.size() * 8, r);
      std::memcpy(sz, sizes.data(), sizes.size() * 8);
      bufs.push_back(sz);
      *s_out = NewSchema(ar, r.Byte() & 1 ? "vu" : "vz", name, {});
      *a_out = NewArray(ar, rows, offset, std::move(bufs), {}, null_count);
      return;
    }
    case 5: {  // list<scalar>, offsets into a child
      const bool wide = r.Byte() & 1;
      std::vector<int64_t> offs(static_cast<size_t>(total + 1));
      for (int64_t i = 1; i <= total; ++i) offs[i] = offs[i - 1] + r.Byte() % 5;
      uint8_t* o = Offsets(ar, r, offs, wide);
      const int64_t child_len = offs[static_cast<size_t>(total)] + r.Byte() % 3;
      ArrowSchema* cs;
      ArrowArray* ca;
      MakeColumn(ar, r, child_len, depth + 1, &cs, &ca);
      *s_out = NewSchema(ar, wide ? "+L" : "+l", name, {cs});
      *a_out = NewArray(ar, rows, offset, {validity, o}, {ca}, null_count);
      return;
    }
    case 6: {  // fixed-size list (maybe a tensor extension)
      const int64_t n = 1 + r.Byte() % 4;
      ArrowSchema* cs;
      ArrowArray* ca;
      MakeColumn(ar, r, total * n, depth + 1, &cs, &ca);
      const char* meta = nullptr;
      if (r.Byte() & 1) {
        std::string ext = "arrow.fixed_shape_tensor";
        std::string shape = "{\"shape\":[" + std::to_string(r.Byte() % 5) + "," + std::to_string(r.Byte() % 5) + "]}";
        std::string m;
        auto put = [&](const std::string& s) {
          const int32_t l = static_cast<int32_t>(s.size());
          m.append(reinterpret_cast<const char*>(&l), 4);
          m += s;
        };
        const int32_t two = 2;
        m.append(reinterpret_cast<const char*>(&two), 4);
        put("ARROW:extension:name");
        put(ext);
        put("ARROW:extension:metadata");
        put(shape);
        meta = ar.Str(m);
      }
      *s_out = NewSchema(ar, ar.Str("+w:" + std::to_string(n)), name, {cs}, meta);
      *a_out = NewArray(ar, rows, offset, {validity}, {ca}, null_count);
      return;
    }
    default: {  // dictionary: int8/int32 indices from the input into a small dictionary
      const bool wide = r.Byte() & 1;
      const int64_t dict_len = r.Byte() % 6;
      ArrowSchema* ds;
      ArrowArray* da;
      MakeColumn(ar, r, dict_len, depth + 1, &ds, &da);
      *s_out = NewSchema(ar, wide ? "i" : "c", name, {});
      (*s_out)->dictionary = ds;
      *a_out = NewArray(ar, rows, offset, {validity, ar.Buf(static_cast<size_t>(total) * (wide ? 4 : 1), r)}, {},
                        null_count);
      (*a_out)->dictionary = da;
      return;
    }
  }
}

uint64_t Touch(const Column& c) {
  if (!c.Validate("fuzz").ok()) __builtin_trap();
  uint64_t h = static_cast<uint64_t>(c.null_count);
  for (int64_t i = 0; i < c.length; ++i) {
    h += c.IsValid(i);
    if (c.type.is_fixed_width()) {
      const uint8_t* row = c.FixedRow(i);
      for (size_t k = 0; k < c.type.fixed_width(); ++k) h = h * 31 + row[k];
    } else {
      const int64_t* o = c.offsets_data();
      const size_t es = c.type.id == TypeId::kList ? flywheel::format::ScalarSize(c.type.elem) : 1;
      for (int64_t k = o[i] * static_cast<int64_t>(es); k < o[i + 1] * static_cast<int64_t>(es); ++k) {
        h = h * 31 + c.values.data[k];
      }
    }
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  Arena ar;
  const int64_t rows = r.Byte() % 40;
  const int ncols = 1 + r.Byte() % 3;
  std::vector<ArrowSchema*> schemas;
  std::vector<ArrowArray*> arrays;
  for (int i = 0; i < ncols; ++i) {
    ArrowSchema* s;
    ArrowArray* a;
    MakeColumn(ar, r, rows, 0, &s, &a);
    s->name = ar.Str("col" + std::to_string(i));
    schemas.push_back(s);
    arrays.push_back(a);
  }
  ArrowSchema* top_s = NewSchema(ar, "+s", "", schemas);
  ArrowArray* top = NewArray(ar, rows, 0, {nullptr}, arrays, 0);
  auto batch = flywheel::format::ImportBatch(top, *top_s);
  if (!batch.ok()) return 0;
  uint64_t h = 0;
  for (const Column& c : batch->columns) h += Touch(c);
  // Export and import again: the same values.
  ArrowSchema s2{};
  ArrowArray a2{};
  if (!flywheel::format::ExportSchema(batch->schema, &s2).ok()) __builtin_trap();
  if (!flywheel::format::ExportBatch(*batch, &a2).ok()) __builtin_trap();
  auto again = flywheel::format::ImportBatch(&a2, s2);
  s2.release(&s2);
  if (!again.ok()) __builtin_trap();
  uint64_t h2 = 0;
  for (const Column& c : again->columns) h2 += Touch(c);
  if (h != h2) __builtin_trap();
  return 0;
}
