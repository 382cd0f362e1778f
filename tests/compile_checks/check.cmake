# ctest compile_checks: the compiler and flags of the build reject a dropped
# Status or Result (-Werror and their [[nodiscard]]) and accept used ones.
#   cmake -DCXX=... -DSRC=<repo>/src -DDIR=<this folder> -P check.cmake
foreach(kind status result)
  foreach(case used dropped)
    execute_process(COMMAND ${CXX} -std=c++20 -I${SRC} -Wall -Wextra -Werror -fsyntax-only ${DIR}/${kind}_${case}.cc
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(case STREQUAL "used" AND NOT rc EQUAL 0)
      message(FATAL_ERROR "${kind}_used.cc should compile:\n${err}")
    endif()
    if(case STREQUAL "dropped")
      if(rc EQUAL 0)
        message(FATAL_ERROR "${kind}_dropped.cc compiled: a dropped flywheel ${kind} is not caught")
      endif()
      if(NOT err MATCHES "nodiscard")
        message(FATAL_ERROR "${kind}_dropped.cc failed for another reason:\n${err}")
      endif()
    endif()
  endforeach()
endforeach()
message(STATUS "a dropped Status or Result does not compile; used ones do")
