// Shared helpers for the loader's tests: a table row generator whose every
// column is derived from the row id, and a byte dump of a batch for
// comparing batches exactly. Test-only; header-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flywheel/format/column.h"
#include "flywheel/loader/loader.h"

namespace flywheel::loader::testing_util {

// Row i: id = base + i; emb = 4 floats from id; name = "r<id>" (null when
// id % 7 == 0); tokens = id % 5 ints from id.
inline format::RecordBatch Rows(int64_t base, int64_t n) {
  format::RecordBatch b;
  b.schema = *format::Schema::Parse("id:int64, emb:float32[4], name:string?, tokens:list<int32>");
  b.num_rows = n;
  std::vector<int64_t> ids(n);
  std::vector<float> emb(n * 4);
  std::vector<std::string> names(n);
  std::vector<bool> valid(n);
  std::vector<std::vector<int32_t>> tokens(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = base + i;
    ids[i] = id;
    for (int k = 0; k < 4; ++k) emb[i * 4 + k] = static_cast<float>(id) + 0.25f * k;
    names[i] = "r" + std::to_string(id);
    valid[i] = id % 7 != 0;
    for (int k = 0; k < id % 5; ++k) tokens[i].push_back(static_cast<int32_t>(id + k));
  }
  b.columns.push_back(format::MakeFixedColumn(format::DataType::Scalar(format::TypeId::kInt64), std::move(ids)));
  b.columns.push_back(
      format::MakeFixedColumn(format::DataType::Tensor(format::TypeId::kFloat32, {4}), std::move(emb)));
  format::Column nc = format::MakeStringColumn(names);
  format::SetValidity(nc, valid);
  b.columns.push_back(std::move(nc));
  b.columns.push_back(format::MakeListColumn<int32_t>(format::TypeId::kInt32, tokens));
  return b;
}

// Everything a batch holds, as bytes (validity bits only up to num_rows).
inline std::string BatchBytes(const Batch& b) {
  std::string s = std::to_string(b.epoch) + "/" + std::to_string(b.position) + "/" +
                  std::to_string(b.num_rows);
  s.append(reinterpret_cast<const char*>(b.indices.data()), b.indices.size() * 8);
  for (const auto& c : b.columns) {
    s.append(reinterpret_cast<const char*>(c.values), c.values_size);
    if (c.offsets) s.append(reinterpret_cast<const char*>(c.offsets), (b.num_rows + 1) * 8);
    for (int64_t i = 0; i < b.num_rows; ++i) {
      s.push_back(c.validity == nullptr || ((c.validity[i >> 3] >> (i & 7)) & 1) ? '1' : '0');
    }
  }
  return s;
}

}  // namespace flywheel::loader::testing_util
