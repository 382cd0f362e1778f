// Fuzzes the WebDataset source (src/flywheel/interop/wds): tar headers,
// pax/GNU metadata, gzip streams, sample grouping and column building.
//
// Input: byte 0 picks the options and how the rest is wrapped, the rest is
// the archive.
//   bits 0-1: 0 = as is (gzip only when it starts with 1f 8b),
//             1 = gzip-compressed in one member,
//             2 = gzip-compressed in two members split at byte 1's position,
//             3 = as is with a trailing gzip member appended
//   bit 2:    skip_bad_entries
//   bits 3-4: batch_rows - 1
//   bit 5:    columns = {"txt", "cls", "jpg"}
//   bit 6:    rewrite the checksum of every non-zero 512-byte block of the
//             archive (before wrapping), so mutated headers get past the
//             checksum and reach the parsers behind it
// The reader must return batches that validate, or an error; never crash,
// hang or allocate without bound.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "flywheel/interop/wds/tar.h"
#include "flywheel/interop/wds/wds_reader.h"
#include "flywheel/io/file_system.h"

namespace {

std::string Gzip(std::string_view data) {
  z_stream s{};
  if (deflateInit2(&s, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::string out(deflateBound(&s, data.size()) + 64, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  if (deflate(&s, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

void FixChecksums(std::string& tar) {
  for (size_t off = 0; off + 512 <= tar.size(); off += 512) {
    char* h = tar.data() + off;
    bool zero = true;
    for (size_t i = 0; i < 512 && zero; ++i) zero = h[i] == 0;
    if (zero) continue;
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += static_cast<uint8_t>(h[i]);
    std::snprintf(h + 148, 8, "%06o", sum & 0777777);
    h[155] = ' ';
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::string fixed(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (mode & 64) FixChecksums(fixed);
  const std::string_view body = fixed;
  std::string bytes;
  switch (mode & 3) {
    case 0:
      bytes = std::string(body);
      break;
    case 1:
      bytes = Gzip(body);
      break;
    case 2: {
      const size_t split = body.empty() ? 0 : static_cast<uint8_t>(body[0]) * body.size() / 256;
      bytes = Gzip(body.substr(0, split)) + Gzip(body.substr(split));
      break;
    }
    default:
      bytes = std::string(body) + Gzip("tail");
      break;
  }
  flywheel::interop::WdsReadOptions options;
  options.skip_bad_entries = (mode & 4) != 0;
  options.batch_rows = 1 + ((mode >> 3) & 3);
  if (mode & 32) options.columns = {"txt", "cls", "jpg"};

  auto file = flywheel::io::NewMemoryFile("fuzz.tar", std::move(bytes));
  auto reader = flywheel::interop::internal_wds::OpenWebDatasetFile(file, options);
  if (!reader.ok()) return 0;
  if (!(*reader)->schema().Validate().ok()) std::abort();
  int64_t rows = 0;
  for (;;) {
    auto batch = (*reader)->Next();
    if (!batch.ok() || !batch->has_value()) break;
    if (!(*batch)->Validate().ok()) std::abort();
    if ((*batch)->num_rows < 1 || (*batch)->num_rows > options.batch_rows) std::abort();
    rows += (*batch)->num_rows;
  }
  if ((*reader)->bytes_read() < 0) std::abort();
  (void)rows;
  return 0;
}
