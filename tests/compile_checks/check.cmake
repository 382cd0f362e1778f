# ctest compile_checks: the compiler and flags of the build reject a dropped
# Status (-Werror and flywheel::Status's [[nodiscard]]) and accept a used one.
#   cmake -DCXX=... -DSRC=<repo>/src -DDIR=<this folder> -P check.cmake
foreach(case used dropped)
  execute_process(COMMAND ${CXX} -std=c++20 -I${SRC} -Wall -Wextra -Werror -fsyntax-only ${DIR}/status_${case}.cc
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(case STREQUAL "used" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "status_used.cc should compile:\n${err}")
  endif()
  if(case STREQUAL "dropped")
    if(rc EQUAL 0)
      message(FATAL_ERROR "status_dropped.cc compiled: a dropped flywheel::Status is not caught")
    endif()
    if(NOT err MATCHES "nodiscard")
      message(FATAL_ERROR "status_dropped.cc failed for another reason:\n${err}")
    endif()
  endif()
endforeach()
message(STATUS "a dropped Status does not compile; a used one does")
