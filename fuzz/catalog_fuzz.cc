// Catalog and erasure parsers: lineage node names, dataset names, privilege
// and mask names, the SQL placeholder rewriter, and erase key index files.
// The first byte picks the parser; the rest is its input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "flywheel/catalog/catalog.h"
#include "flywheel/catalog/sql.h"
#include "flywheel/table/internal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace flywheel;
  switch (data[0] % 4) {
    case 0: {
      auto n = catalog::Node::Parse(text);
      if (n.ok()) {
        // What prints must parse back to the same node (files and artifacts
        // are made absolute on parse, so compare their printed forms).
        auto again = catalog::Node::Parse(n->ToString());
        if (!again.ok() || again->ToString() != n->ToString()) __builtin_trap();
      }
      break;
    }
    case 1: {
      std::string out = catalog::internal_catalog::NumberPlaceholders(text);
      // Each '?' outside quotes becomes "$<n>": never shorter.
      if (out.size() < text.size()) __builtin_trap();
      break;
    }
    case 2:
      (void)catalog::Catalog::ValidateDatasetName(text);
      (void)catalog::ParsePrivilege(text);
      (void)catalog::ParseMaskMode(text);
      break;
    case 3:
      (void)table::KeyIndexMayContain(text, 0x9e3779b97f4a7c15ull);
      break;
  }
  return 0;
}
