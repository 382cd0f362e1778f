// Must compile: the same call with its Result used, converted or dropped on purpose.
#include <memory>

#include "flywheel/base/status.h"

struct Base { virtual ~Base() = default; };
struct Derived : Base {};

flywheel::Result<int> MightFail();
flywheel::Result<std::unique_ptr<Derived>> MakeDerived();

flywheel::Result<std::unique_ptr<Base>> Caller() {
  MightFail().IgnoreError();
  FW_ASSIGN_OR_RETURN(int v, MightFail());
  if (v < 0) return flywheel::Status(absl::StatusCode::kInvalidArgument, "negative");
  if (v == 0) return absl::InvalidArgumentError("zero");
  absl::StatusOr<int> plain = MightFail();  // a Result is an absl::StatusOr
  flywheel::Result<int> back = plain;
  if (!back.ok()) return back.status();
  if (v == 1) return std::make_unique<Derived>();
  return MakeDerived();
}
