// Leaving rows out of an assembled loader batch in place: the step after
// the gather when a transform failed on rows under OnError::kSkip
// (docs/loader.md, "Errors").
//
// Thread-safety: works on one batch, owned by the calling thread.
#pragma once

#include <cstdint>
#include <vector>

#include "flywheel/loader/loader.h"

namespace flywheel::internal_loader {

// Leaves the rows with drop[i] != 0 out of `b`: fixed-width values, offsets
// and values of variable-length columns, validity bits (null_count
// recounted; no validity when no null is left), indices and tables are
// compacted in order. The column buffers must be writable (the loader's own
// slot buffers). REQUIRES: drop.size() >= b.num_rows.
void DropRows(loader::Batch& b, const std::vector<uint8_t>& drop);

}  // namespace flywheel::internal_loader
