# One-line target helpers. Our own code builds with -Wall -Wextra -Werror.
set(FLYWHEEL_WARNINGS -Wall -Wextra -Werror -Wno-missing-field-initializers)

# flywheel_cc_library(NAME name SRCS a.cc b.cc DEPS dep...)
# Defines target flywheel_<name>, includes rooted at src/.
function(flywheel_cc_library)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(flywheel_${A_NAME} STATIC ${A_SRCS})
  target_include_directories(flywheel_${A_NAME} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
                                                       $<INSTALL_INTERFACE:include>)
  target_compile_options(flywheel_${A_NAME} PRIVATE ${FLYWHEEL_WARNINGS})
  target_link_libraries(flywheel_${A_NAME} PUBLIC ${A_DEPS})
  # `make install` exports it as flywheel::<name> (cmake/FlywheelInstall.cmake);
  # test and benchmark helpers and the CLI's internals stay out.
  set_target_properties(flywheel_${A_NAME} PROPERTIES EXPORT_NAME ${A_NAME})
  if(NOT A_NAME MATCHES "testing$|^bench_|^cli_lib$")
    set_property(GLOBAL APPEND PROPERTY FLYWHEEL_INSTALL_LIBS flywheel_${A_NAME})
  endif()
endfunction()

# flywheel_cc_test(NAME name SRCS a_test.cc DEPS dep... [TIMEOUT s])
# Skipped in fuzz builds, which do not look for GoogleTest (FlywheelDeps.cmake).
function(flywheel_cc_test)
  if(NOT FLYWHEEL_BUILD_TESTS OR FLYWHEEL_FUZZ)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE ${FLYWHEEL_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  # Label: the subsystem folder under src/flywheel (`ctest -L replay`);
  # tests/ holds the cross-subsystem tests (label `integration`).
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/src/flywheel ${CMAKE_CURRENT_SOURCE_DIR})
  if(rel MATCHES "^\\.\\.")
    set(label integration)
  else()
    string(REGEX REPLACE "/.*" "" label "${rel}")
  endif()
  set_tests_properties(${A_NAME} PROPERTIES TIMEOUT ${A_TIMEOUT} LABELS ${label})
endfunction()

# flywheel_cc_bench(NAME name SRCS a_bench.cc DEPS dep...)
function(flywheel_cc_bench)
  if(NOT FLYWHEEL_BUILD_BENCH)
    return()
  endif()
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  # Not part of the default build (`make test` runs no benchmark): `make bench`
  # builds the `benches` target.
  add_executable(${A_NAME} EXCLUDE_FROM_ALL ${A_SRCS})
  target_compile_options(${A_NAME} PRIVATE ${FLYWHEEL_WARNINGS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS})
  if(NOT TARGET benches)
    add_custom_target(benches)
  endif()
  add_dependencies(benches ${A_NAME})
endfunction()

# flywheel_grpc_proto(NAME target PROTO path/to/x.proto)
# Compiles a .proto with protoc + the gRPC plugin into the build dir and
# builds the generated code into static library `target` (no -Werror: it is
# generated), whose include directory holds x.pb.h and x.grpc.pb.h.
function(flywheel_grpc_proto)
  cmake_parse_arguments(A "" "NAME;PROTO" "" ${ARGN})
  get_filename_component(_dir ${A_PROTO} DIRECTORY)
  get_filename_component(_base ${A_PROTO} NAME_WE)
  set(_gen ${CMAKE_CURRENT_BINARY_DIR}/gen)
  set(_srcs ${_gen}/${_base}.pb.cc ${_gen}/${_base}.grpc.pb.cc)
  add_custom_command(
    OUTPUT ${_srcs} ${_gen}/${_base}.pb.h ${_gen}/${_base}.grpc.pb.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_gen}
    COMMAND protobuf::protoc --proto_path=${_dir} --cpp_out=${_gen} --grpc_out=${_gen}
            --plugin=protoc-gen-grpc=${FLYWHEEL_GRPC_CPP_PLUGIN} ${A_PROTO}
    DEPENDS ${A_PROTO}
    COMMENT "protoc ${_base}.proto")
  add_library(${A_NAME} STATIC ${_srcs})
  target_include_directories(${A_NAME} PUBLIC $<BUILD_INTERFACE:${_gen}> $<INSTALL_INTERFACE:include/flywheel/proto>)
  target_link_libraries(${A_NAME} PUBLIC gRPC::grpc++ protobuf::libprotobuf)
  string(REGEX REPLACE "^flywheel_" "" _export ${A_NAME})
  set_target_properties(${A_NAME} PROPERTIES EXPORT_NAME ${_export})
  set_property(GLOBAL APPEND PROPERTY FLYWHEEL_INSTALL_LIBS ${A_NAME})
  set_property(GLOBAL APPEND PROPERTY FLYWHEEL_INSTALL_PROTO_HEADERS ${_gen}/${_base}.pb.h ${_gen}/${_base}.grpc.pb.h)
endfunction()
