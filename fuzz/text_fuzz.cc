// Fuzzes the text parsers users feed flywheel: schema strings, delete
// predicates, and JSON-lines rows for `flywheel table append`.
#include <cstdint>
#include <sstream>
#include <string>

#include "flywheel/cli/json_rows.h"
#include "flywheel/format/types.h"
#include "flywheel/table/table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto schema = flywheel::format::Schema::Parse(text);
  if (schema.ok()) {
    // The printed form parses back to the same schema.
    auto again = flywheel::format::Schema::Parse(schema->ToString());
    if (!again.ok() || !(*again == *schema)) __builtin_trap();
  }
  (void)flywheel::table::Predicate::Parse(text);
  static const flywheel::format::Schema kRows = *flywheel::format::Schema::Parse(
      "id:int64, v:float32[2], h:float16?, s:string?, b:binary?, t:list<int16>?, ok:bool?, u:uint8?");
  std::istringstream in(text);
  auto batch = flywheel::cli::ReadJsonLines(in, "fuzz", kRows);
  if (batch.ok()) {
    if (!batch->Validate().ok()) __builtin_trap();
    for (int64_t r = 0; r < batch->num_rows; ++r) (void)flywheel::cli::RowToJson(*batch, r);
  }
  return 0;
}
