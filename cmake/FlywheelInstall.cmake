# `make install PREFIX=...` (cmake --install): flywheel for C++ users.
#   PREFIX/include/flywheel/...            public headers (and the generated
#                                          gRPC/protobuf headers under proto/)
#   PREFIX/lib/libflywheel_*.a             the static libraries
#   PREFIX/lib/cmake/flywheel/             the package: find_package(flywheel)
#                                          gives targets flywheel::table,
#                                          flywheel::loader, flywheel::replay, ...
#   PREFIX/bin/flywheel                    the CLI
# The package finds the same Debian libraries the build used
# (cmake/flywheelConfig.cmake.in); tests/install/ builds a consumer against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_libs GLOBAL PROPERTY FLYWHEEL_INSTALL_LIBS)
get_property(_proto_headers GLOBAL PROPERTY FLYWHEEL_INSTALL_PROTO_HEADERS)

install(TARGETS ${_libs} EXPORT flywheelTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET flywheel AND NOT SKBUILD)
  install(TARGETS flywheel RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/flywheel/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flywheel
        FILES_MATCHING PATTERN "*.h"
        PATTERN "*_testing.h" EXCLUDE PATTERN "dashboard" EXCLUDE)
if(_proto_headers)
  install(FILES ${_proto_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flywheel/proto)
endif()
install(EXPORT flywheelTargets NAMESPACE flywheel:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flywheel)

set(FLYWHEEL_HAVE_URING ${URING_FOUND})
if(NOT FLYWHEEL_HAVE_URING)
  set(FLYWHEEL_HAVE_URING 0)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/flywheelConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flywheelConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flywheel)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flywheelConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flywheelConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/flywheelConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flywheel)
