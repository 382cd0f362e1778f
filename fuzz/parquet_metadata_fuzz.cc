// Fuzzes the Parquet metadata parsers (flywheel/interop/parquet/metadata.h)
// and the Thrift compact reader beneath them (thrift.h).
//
// Every input goes to ParseFileMetaData, ParsePageHeader and a generic
// CompactReader skip. Beyond "no crash, no leak, no UB": whatever parses must
// serialize back to bytes that parse to an equal value and serialize to the
// same bytes, so the parser never accepts what it cannot represent.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flywheel/interop/parquet/metadata.h"
#include "flywheel/interop/parquet/thrift.h"

namespace {

using flywheel::interop::parquet::CompactReader;
using flywheel::interop::parquet::CompactType;
using flywheel::interop::parquet::ParseFileMetaData;
using flywheel::interop::parquet::ParsePageHeader;
using flywheel::interop::parquet::SerializeFileMetaData;
using flywheel::interop::parquet::SerializePageHeader;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

void FuzzFileMetaData(const uint8_t* data, size_t size) {
  auto m = ParseFileMetaData(data, size);
  if (!m.ok()) {
    Check(!m.status().message().empty());
    return;
  }
  Check(!m->schema.empty());
  const std::string bytes = SerializeFileMetaData(*m);
  auto again = ParseFileMetaData(Bytes(bytes), bytes.size());
  Check(again.ok());
  Check(again->num_rows == m->num_rows);
  Check(again->schema.size() == m->schema.size());
  Check(again->row_groups.size() == m->row_groups.size());
  Check(*again == *m);
  Check(SerializeFileMetaData(*again) == bytes);
}

void FuzzPageHeader(const uint8_t* data, size_t size) {
  size_t consumed = 0;
  auto h = ParsePageHeader(data, size, &consumed);
  if (!h.ok()) return;
  Check(consumed > 0 && consumed <= size);
  Check(h->uncompressed_page_size >= 0 && h->compressed_page_size >= 0);
  const std::string bytes = SerializePageHeader(*h);
  size_t consumed_again = 0;
  auto again = ParsePageHeader(Bytes(bytes), bytes.size(), &consumed_again);
  Check(again.ok());
  Check(consumed_again == bytes.size());
  Check(again->type == h->type);
  Check(*again == *h);
  Check(SerializePageHeader(*again) == bytes);
}

void FuzzSkip(const uint8_t* data, size_t size) {
  CompactReader r(data, size);
  if (r.Skip(CompactType::kStruct).ok()) {
    Check(r.offset() <= size);
    Check(r.depth() == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzFileMetaData(data, size);
  FuzzPageHeader(data, size);
  FuzzSkip(data, size);
  return 0;
}
