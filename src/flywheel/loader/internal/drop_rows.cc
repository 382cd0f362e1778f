#include "flywheel/loader/internal/drop_rows.h"

#include <cstring>

namespace flywheel::internal_loader {

void DropRows(loader::Batch& b, const std::vector<uint8_t>& drop) {
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < b.num_rows; ++i) {
    if (!drop[i]) keep.push_back(i);
  }
  const int64_t m = static_cast<int64_t>(keep.size());
  // Every move below reads row keep[j] >= j and writes row j, in ascending
  // j, so nothing is overwritten before it is read. The buffers are the
  // slot's own (Batch hands them out const).
  for (loader::BatchColumn& bc : b.columns) {
    if (bc.nested != nullptr) {
      auto kept = std::make_shared<format::Column>(format::TakeColumn(*bc.nested, keep.data(), keep.size()));
      bc.null_count = kept->null_count;
      bc.nested = std::move(kept);
      continue;
    }
    auto* vals = const_cast<uint8_t*>(bc.values);
    if (bc.offsets == nullptr) {
      const size_t w = bc.type.fixed_width();
      for (int64_t j = 0; j < m; ++j) {
        if (keep[j] != j) std::memmove(vals + j * w, vals + keep[j] * w, w);
      }
      bc.values_size = static_cast<size_t>(m) * w;
    } else {
      auto* off = const_cast<int64_t*>(bc.offsets);
      const size_t es = bc.type.id == format::TypeId::kList ? format::ScalarSize(bc.type.elem) : 1;
      int64_t out = 0;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t i = keep[j], begin = off[i], len = off[i + 1] - off[i];
        if (len > 0 && begin != out) std::memmove(vals + out * es, vals + begin * es, len * es);
        off[j] = out;
        out += len;
      }
      off[m] = out;
      bc.values_size = static_cast<size_t>(out) * es;
    }
    if (bc.validity != nullptr) {
      auto* v = const_cast<uint8_t*>(bc.validity);
      int64_t nulls = 0;
      for (int64_t j = 0; j < m; ++j) {
        const bool valid = (v[keep[j] >> 3] >> (keep[j] & 7)) & 1;
        if (valid) {
          v[j >> 3] |= static_cast<uint8_t>(1u << (j & 7));
        } else {
          v[j >> 3] &= static_cast<uint8_t>(~(1u << (j & 7)));
          ++nulls;
        }
      }
      bc.null_count = nulls;
      if (nulls == 0) bc.validity = nullptr;
    }
  }
  for (int64_t j = 0; j < m; ++j) {
    b.indices[j] = b.indices[keep[j]];
    b.tables[j] = b.tables[keep[j]];
  }
  b.indices.resize(m);
  b.tables.resize(m);
  b.num_rows = m;
}

}  // namespace flywheel::internal_loader
