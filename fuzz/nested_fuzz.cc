// libFuzzer target for nested types (docs/format/types.md, shard.md 3.3):
// the type grammar, the JSON column builder, and the nested page encoder
// and decoder.
//
// Input: the first line is a type; every further line one JSON value. The
// type must parse or fail cleanly; a parsed type must print as text that
// parses back to the same type; rows must build or fail cleanly; a built
// column must validate, encode into a page that decodes back to the same
// values, and survive every single-byte corruption of that page with an
// error or a column that validates. Never a crash, a leak or a hang.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "flywheel/format/column.h"
#include "flywheel/format/internal/nested_page.h"
#include "flywheel/format/json_column.h"
#include "flywheel/format/types.h"

namespace {

using flywheel::format::Buffer;
using flywheel::format::Column;
using flywheel::format::DataType;
using flywheel::format::Field;
using flywheel::format::JsonColumnBuilder;
using flywheel::format::ValueToJson;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  auto type = DataType::Parse(in.substr(0, nl));
  if (!type.ok()) return 0;
  auto again = DataType::Parse(type->ToString());
  if (!again.ok() || !(*again == *type)) __builtin_trap();  // printing must round-trip
  if (nl == std::string_view::npos) return 0;
  const Field field{"f", *type, true};
  JsonColumnBuilder b(field);
  std::string_view rest = in.substr(nl + 1);
  int rows = 0;
  while (!rest.empty() && rows < 64) {
    const size_t e = rest.find('\n');
    if (!b.AppendText(rest.substr(0, e)).ok()) return 0;
    rows++;
    if (e == std::string_view::npos) break;
    rest.remove_prefix(e + 1);
  }
  const Column c = b.Finish();
  if (!c.Validate("f").ok()) __builtin_trap();
  if (!type->is_nested()) return 0;
  std::string body;
  flywheel::internal_format::EncodeNestedPage(c, 0, c.length, &body);
  auto decoded = flywheel::internal_format::DecodeNestedPage(field, c.length, c.null_count,
                                                             Buffer::Copy(body.data(), body.size()), true);
  if (!decoded.ok() || !decoded->Validate("f").ok()) __builtin_trap();
  for (int64_t i = 0; i < c.length; ++i) {
    if (ValueToJson(*decoded, i) != ValueToJson(c, i)) __builtin_trap();
  }
  for (size_t i = 0; i < body.size() && i < 4096; ++i) {
    std::string bad = body;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    auto r = flywheel::internal_format::DecodeNestedPage(field, c.length, c.null_count,
                                                         Buffer::Copy(bad.data(), bad.size()), true);
    if (r.ok()) {
      if (!r->Validate("f").ok()) __builtin_trap();
      for (int64_t k = 0; k < r->length; ++k) (void)ValueToJson(*r, k).size();
    }
  }
  return 0;
}
