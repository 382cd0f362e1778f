// A rewrite of every batch a Loader hands out, set by the layer above the
// loader (LoaderOptions::batch_transform). The catalog's read policy
// (catalog/read_policy.h) is one: it refuses columns at Open and masks
// columns in every batch. The loader knows only this interface, so loader/
// does not depend on catalog/.
//
// Thread-safety: Check and Apply are const and may be called from any
// thread; an implementation must allow concurrent calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::loader {

struct Batch;

class BatchTransform {
 public:
  virtual ~BatchTransform() = default;
  // Called once when the loader opens, with the columns it will read (all of
  // them when LoaderOptions::columns is empty); an error fails the open.
  virtual Status Check(const std::vector<std::string>& columns) const = 0;
  // The batch handed to the consumer in place of `batch` (on the consumer's
  // thread, inside Loader::Next): `batch` itself when nothing changes, or a
  // new Batch whose `keep_alive` holds `batch` and any new buffers. Column
  // names, order and row count stay; types stay; nullability may widen.
  virtual Result<std::shared_ptr<const Batch>> Apply(std::shared_ptr<const Batch> batch) const = 0;
};

}  // namespace flywheel::loader
