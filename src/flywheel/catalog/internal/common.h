// Pieces shared by the files that implement Catalog (catalog.cc,
// governance.cc, audit.cc). Not for use outside src/flywheel/catalog.
#pragma once

#include <chrono>
#include <cstdint>

namespace flywheel::catalog {

namespace internal_catalog {

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace internal_catalog
}  // namespace flywheel::catalog
