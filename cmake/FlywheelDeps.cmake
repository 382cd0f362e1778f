# Third-party dependencies, all from Debian packages installed by `make deps`.
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(LZ4 REQUIRED IMPORTED_TARGET liblz4)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# Parquet codecs (src/flywheel/interop/parquet): libsnappy-dev, libbrotli-dev, zlib1g-dev.
find_package(Snappy CONFIG REQUIRED)
pkg_check_modules(BROTLI REQUIRED IMPORTED_TARGET libbrotlidec libbrotlienc)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
# The catalog (src/flywheel/catalog): libsqlite3-dev, libpq-dev.
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3)
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)
# The catalog's audit chain (SHA-256): libssl-dev.
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
if(NOT FLYWHEEL_FUZZ)
  find_package(CLI11 REQUIRED)
  if(FLYWHEEL_BUILD_TESTS)
    find_package(GTest REQUIRED)
  endif()
  if(FLYWHEEL_BUILD_BENCH)
    find_package(benchmark REQUIRED)
  endif()
endif()

# The replay gRPC service (src/flywheel/replay/service, proto/replay.proto).
# gRPC 1.51 / protobuf 3.21 from Debian: libgrpc++-dev protobuf-compiler-grpc
# libprotobuf-dev protobuf-compiler.
# Fuzz builds need it too (fuzz/replay_wire_fuzz.cc).
option(FLYWHEEL_BUILD_GRPC "Build the replay gRPC service" ON)
if(FLYWHEEL_BUILD_GRPC)
  find_package(Protobuf REQUIRED)
  find_package(gRPC CONFIG REQUIRED)
  find_program(FLYWHEEL_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
endif()
