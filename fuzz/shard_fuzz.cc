// libFuzzer target for the shard reader (docs/format/shard.md).
//
// Each input is treated as a whole shard file and read twice:
//  1. as is, with checksums verified: the path real files take;
//  2. with the trailer's footer checksum recomputed and page checksums off,
//     so mutations get past the checksums and reach the footer decoder, the
//     page index checks, the decompressors and the page body checks.
// Either way the reader must return an error or columns that pass
// Column::Validate and whose every byte can be read; never crash, leak or hang.
// Seeds include files with nested columns (struct, list, map pages).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "flywheel/base/checksum.h"
#include "flywheel/format/json_column.h"
#include "flywheel/format/shard.h"
#include "flywheel/io/file_system.h"

namespace {

using flywheel::format::Column;
using flywheel::format::ShardReader;
using flywheel::format::ShardReaderOptions;

// Reads every byte a caller could reach through `c` so ASan sees any
// out-of-bounds view. Bounded so huge (valid) pages do not stall the fuzzer.
uint64_t Touch(const Column& c) {
  if (!c.Validate("fuzz").ok()) __builtin_trap();  // the reader returned a broken column
  uint64_t h = static_cast<uint64_t>(c.null_count);
  const int64_t n = c.length < (1 << 14) ? c.length : (1 << 14);
  if (c.type.is_nested()) {
    // Every value of every child, as JSON text.
    for (int64_t i = 0; i < n; ++i) h += flywheel::format::ValueToJson(c, i).size();
    return h;
  }
  for (int64_t i = 0; i < n; ++i) {
    h += c.IsValid(i);
    if (c.type.is_fixed_width()) {
      const uint8_t* row = c.FixedRow(i);
      for (size_t k = 0; k < c.type.fixed_width() && k < 256; ++k) h = h * 31 + row[k];
    } else {
      const int64_t* o = c.offsets_data();
      const size_t esize = c.type.id == flywheel::format::TypeId::kList
                               ? flywheel::format::ScalarSize(c.type.elem)
                               : 1;
      const size_t len = static_cast<size_t>(o[i + 1] - o[i]) * esize;
      const uint8_t* p = c.values.data + o[i] * esize;
      for (size_t k = 0; k < len && k < 256; ++k) h = h * 31 + p[k];
      if (len > 0) h += p[len - 1];
    }
  }
  return h;
}

void Exercise(const std::string& bytes, bool verify) {
  auto reader = ShardReader::Open(flywheel::io::NewMemoryFile("fuzz.fws", bytes),
                                  ShardReaderOptions{.mmap = true, .verify_checksums = verify});
  if (!reader.ok()) return;
  const ShardReader& r = **reader;
  const int64_t rows = r.num_rows();
  volatile uint64_t sink = 0;
  for (int c = 0; c < r.schema().num_fields(); ++c) {
    for (int p = 0; p < static_cast<int>(r.pages(c).size()); ++p) {
      auto page = r.ReadPage(c, p);
      if (page.ok()) sink = sink + Touch(*page);
    }
    if (rows == 0) continue;
    const int64_t take[] = {0, rows - 1, rows / 2, rows / 3, 0};
    auto taken = r.Take(c, take, 5);
    if (taken.ok()) sink = sink + Touch(*taken);
    const int64_t start = rows / 4;
    const int64_t len = (rows - start) < 4096 ? (rows - start) : 4096;
    auto range = r.Read(c, start, len);
    if (range.ok()) sink = sink + Touch(*range);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Exercise(bytes, /*verify=*/true);
  // Trailer: footer_offset u64, footer_size u64, footer_checksum u64, ... (last 32 bytes).
  if (size >= 48) {
    uint64_t footer_offset, footer_size;
    std::memcpy(&footer_offset, data + size - 32, 8);
    std::memcpy(&footer_size, data + size - 24, 8);
    if (footer_offset <= size - 32 && footer_size <= size - 32 - footer_offset) {
      const uint64_t sum = flywheel::Checksum64(data + footer_offset, footer_size);
      std::memcpy(bytes.data() + size - 16, &sum, 8);
      Exercise(bytes, /*verify=*/false);
    }
  }
  return 0;
}
