// Fuzzes the table metadata parsers: manifests (docs/format/table.md,
// "Manifest files") and deletion vectors. The first byte picks the target;
// for manifests, odd selectors wrap the rest in a valid header so mutations
// reach the JSON body past the checksum.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

#include "flywheel/base/checksum.h"
#include "flywheel/table/deletion_vector.h"
#include "flywheel/table/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (selector % 4) {
    case 0: {
      auto m = flywheel::table::Manifest::Decode(body, "fuzz");
      if (m.ok()) {
        // A decoded manifest must re-encode and decode to the same thing.
        auto again = flywheel::table::Manifest::Decode(m->Encode(), "fuzz-again");
        if (!again.ok() || again->Encode() != m->Encode()) __builtin_trap();
      }
      break;
    }
    case 1: {
      char header[96];
      std::snprintf(header, sizeof header, "flywheel-manifest 1 %016" PRIx64 " %zu\n",
                    flywheel::Checksum64(body), body.size());
      auto m = flywheel::table::Manifest::Decode(std::string(header) + body, "fuzz");
      if (m.ok()) {
        auto again = flywheel::table::Manifest::Decode(m->Encode(), "fuzz-again");
        if (!again.ok()) __builtin_trap();
      }
      break;
    }
    default: {
      const int64_t rows = selector * 37;
      auto dv = flywheel::table::DeletionVector::Decode(body, rows, "fuzz");
      if (dv.ok()) {
        for (int64_t r : dv->rows()) {
          if (r < 0 || r >= rows) __builtin_trap();
        }
        if (dv->count() < rows) (void)dv->LiveToPhysical(0);
      }
      break;
    }
  }
  return 0;
}
