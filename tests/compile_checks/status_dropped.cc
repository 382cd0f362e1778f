// Must NOT compile: a Status dropped on the floor (tests/compile_checks/check.cmake).
#include "flywheel/base/status.h"

flywheel::Status MightFail();

void Caller() { MightFail(); }
