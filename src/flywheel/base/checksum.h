// Checksums for everything flywheel writes to storage.
//
// XXH3-64 (xxhash): ~20 GB/s on one core, so verifying a page costs far less
// than reading it. Stored little-endian as a uint64 wherever a format says
// "checksum" (docs/format/shard.md, docs/format/table.md).
//
// Thread-safety: stateless functions; Hasher is not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace flywheel {

uint64_t Checksum64(const void* data, size_t size);
inline uint64_t Checksum64(std::string_view s) { return Checksum64(s.data(), s.size()); }

// Streaming form of Checksum64: the digest of the concatenated updates equals
// Checksum64 of the whole.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;
};

}  // namespace flywheel
