// Little-endian fixed-width and varint encoding with a bounds-checked decoder,
// used by the shard footer (docs/format/shard.md, "Encoding").
//
// Thread-safety: Decoder is a value type used by one thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "flywheel/base/status.h"

namespace flywheel::internal_format {

inline void PutFixed16(std::string* out, uint16_t v) { out->append(reinterpret_cast<const char*>(&v), 2); }
inline void PutFixed32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
inline void PutFixed64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
inline void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
inline void PutSigned(std::string* out, int64_t v) {
  PutVarint(out, (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}
inline void PutBytes(std::string* out, std::string_view s) {
  PutVarint(out, s.size());
  out->append(s.data(), s.size());
}

// Reads from a byte range; every read checks bounds and fails with DataLoss
// naming `what` and the byte offset.
class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size, std::string what)
      : data_(data), size_(size), what_(std::move(what)) {}

  size_t position() const { return pos_; }
  bool done() const { return pos_ == size_; }

  Status Fixed64(uint64_t* v) { return Raw(v, 8); }
  Status Fixed32(uint32_t* v) { return Raw(v, 4); }
  Status Fixed16(uint16_t* v) { return Raw(v, 2); }
  Status Byte(uint8_t* v) { return Raw(v, 1); }
  Status Varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
      if (pos_ >= size_) return Error("truncated varint");
      const uint8_t b = data_[pos_++];
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = result;
        return absl::OkStatus();
      }
    }
    return Error("varint longer than 10 bytes");
  }
  // A varint that must be <= limit.
  Status Bounded(uint64_t* v, uint64_t limit, const char* field) {
    FW_RETURN_IF_ERROR(Varint(v));
    if (*v > limit) return Error(absl::StrCat(field, " ", *v, " exceeds limit ", limit));
    return absl::OkStatus();
  }
  Status Signed(int64_t* v) {
    uint64_t u = 0;
    FW_RETURN_IF_ERROR(Varint(&u));
    *v = static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
    return absl::OkStatus();
  }
  Status Bytes(std::string* s) {
    uint64_t n = 0;
    FW_RETURN_IF_ERROR(Varint(&n));
    if (n > size_ - pos_) return Error(absl::StrCat("string of ", n, " bytes is truncated"));
    s->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return absl::OkStatus();
  }
  Status Error(std::string_view msg) const {
    return absl::DataLossError(absl::StrCat(what_, " at byte ", pos_, ": ", AsAbsl(msg)));
  }

 private:
  Status Raw(void* v, size_t n) {
    if (n > size_ - pos_) return Error("truncated");
    std::memcpy(v, data_ + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace flywheel::internal_format
