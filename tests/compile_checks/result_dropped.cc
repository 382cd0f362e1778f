// Must NOT compile: a Result dropped on the floor (tests/compile_checks/check.cmake).
#include "flywheel/base/status.h"

flywheel::Result<int> MightFail();

void Caller() { MightFail(); }
