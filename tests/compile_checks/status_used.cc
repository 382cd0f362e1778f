// Must compile: the same call with its Status checked, or dropped on purpose.
#include "flywheel/base/status.h"

flywheel::Status MightFail();

flywheel::Status Caller() {
  MightFail().IgnoreError();
  FW_RETURN_IF_ERROR(MightFail());
  return MightFail();
}
