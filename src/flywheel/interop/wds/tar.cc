// Tar header layout (POSIX ustar, with the GNU differences noted):
//
//   offset size field
//        0  100 name          (NUL-terminated unless full)
//      100    8 mode
//      108    8 uid
//      116    8 gid
//      124   12 size          (octal, or GNU base-256 when byte 0 has 0x80)
//      136   12 mtime
//      148    8 chksum        (octal; computed with this field as 8 spaces)
//      156    1 typeflag
//      157  100 linkname
//      257    6 magic         ("ustar\0" POSIX; "ustar " GNU)
//      263    2 version       ("00" POSIX; " \0" GNU)
//      265   32 uname, 297 32 gname, 329 8 devmajor, 337 8 devminor
//      345  155 prefix        (POSIX only; GNU keeps atime/ctime/sparse here)
//      482    1 isextended    (GNU 'S' entries: sparse extension blocks follow)
#include "flywheel/interop/wds/tar.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace flywheel::interop::internal_wds {
namespace {

constexpr size_t kNameOff = 0, kNameLen = 100;
constexpr size_t kSizeOff = 124, kSizeLen = 12;
constexpr size_t kChksumOff = 148, kChksumLen = 8;
constexpr size_t kTypeOff = 156;
constexpr size_t kLinkOff = 157, kLinkLen = 100;
constexpr size_t kMagicOff = 257;
constexpr size_t kPrefixOff = 345, kPrefixLen = 155;
constexpr size_t kGnuIsExtendedOff = 482;
constexpr size_t kGnuSparseExtIsExtendedOff = 504;  // in each sparse extension block

constexpr size_t kIoChunk = 256 << 10;

std::string_view CField(const uint8_t* block, size_t off, size_t len) {
  const char* p = reinterpret_cast<const char*>(block) + off;
  const void* nul = std::memchr(p, '\0', len);
  return {p, nul == nullptr ? len : static_cast<size_t>(static_cast<const char*>(nul) - p)};
}

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// Type flags whose size field does not announce data blocks.
bool IsHeaderOnly(char type) {
  return type == '1' || type == '2' || type == '3' || type == '4' || type == '5' || type == '6';
}

// A plain file, read forwards through a buffer.
class FileSource final : public ByteSource {
 public:
  explicit FileSource(std::shared_ptr<io::RandomAccessFile> file)
      : file_(std::move(file)), size_(file_->size()) {}

  Result<size_t> Read(void* dst, size_t n) override {
    char* out = static_cast<char*>(dst);
    size_t got = 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - pos_));
    while (got < n) {
      if (pos_ >= buf_start_ && pos_ < buf_start_ + buf_.size()) {
        const size_t at = static_cast<size_t>(pos_ - buf_start_);
        const size_t k = std::min(n - got, buf_.size() - at);
        std::memcpy(out + got, buf_.data() + at, k);
        got += k;
        pos_ += k;
      } else if (n - got >= kIoChunk) {
        // Large reads go straight to the destination.
        const size_t k = n - got;
        FW_RETURN_IF_ERROR(file_->ReadAt(pos_, k, out + got));
        got += k;
        pos_ += k;
      } else {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(kIoChunk, size_ - pos_));
        buf_.resize(k);
        FW_RETURN_IF_ERROR(file_->ReadAt(pos_, k, buf_.data()));
        buf_start_ = pos_;
      }
    }
    return got;
  }

  Result<uint64_t> Skip(uint64_t n) override {
    const uint64_t k = std::min<uint64_t>(n, size_ - pos_);
    pos_ += k;
    return k;
  }

  uint64_t input_bytes() const override { return pos_; }
  std::optional<uint64_t> remaining() const override { return size_ - pos_; }

 private:
  std::shared_ptr<io::RandomAccessFile> file_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::vector<char> buf_;
  uint64_t buf_start_ = 0;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string_view data) : data_(data) {}
  Result<size_t> Read(void* dst, size_t n) override {
    const size_t k = std::min(n, data_.size() - pos_);
    if (k > 0) std::memcpy(dst, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  Result<uint64_t> Skip(uint64_t n) override {
    const uint64_t k = std::min<uint64_t>(n, data_.size() - pos_);
    pos_ += static_cast<size_t>(k);
    return k;
  }
  uint64_t input_bytes() const override { return pos_; }
  std::optional<uint64_t> remaining() const override { return data_.size() - pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

// gzip decompression of a file (RFC 1952), member after member.
class GzipSource final : public ByteSource {
 public:
  explicit GzipSource(std::shared_ptr<io::RandomAccessFile> file)
      : file_(std::move(file)), size_(file_->size()) {}
  ~GzipSource() override {
    if (initialized_) inflateEnd(&strm_);
  }
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  Status Init() {
    std::memset(&strm_, 0, sizeof(strm_));
    // 15 + 32: 32 KiB window, gzip or zlib header detected automatically.
    if (inflateInit2(&strm_, 15 + 32) != Z_OK) {
      return absl::InternalError("gzip: inflateInit2 failed");
    }
    initialized_ = true;
    in_member_ = true;
    return absl::OkStatus();
  }

  Result<size_t> Read(void* dst, size_t n) override {
    uint8_t* out = static_cast<uint8_t*>(dst);
    size_t got = 0;
    while (got < n && !eof_) {
      if (strm_.avail_in == 0) {
        FW_RETURN_IF_ERROR(Refill());
        if (strm_.avail_in == 0) {
          if (in_member_) {
            return absl::InvalidArgumentError(
                absl::StrCat("gzip stream truncated at compressed offset ", consumed(),
                             " (member not finished)"));
          }
          eof_ = true;
          break;
        }
      }
      if (!in_member_) {
        // Between members: another member, zero padding, or garbage.
        const uint8_t b = *strm_.next_in;
        if (b == 0) {
          ++strm_.next_in;
          --strm_.avail_in;
          continue;
        }
        if (b != 0x1f) {
          return absl::InvalidArgumentError(absl::StrCat(
              "unexpected data after a gzip member at compressed offset ", consumed()));
        }
        if (inflateReset(&strm_) != Z_OK) return absl::InternalError("gzip: inflateReset failed");
        in_member_ = true;
      }
      const uint64_t at = consumed();
      strm_.next_out = out + got;
      const size_t want = std::min<size_t>(n - got, std::numeric_limits<uInt>::max());
      strm_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&strm_, Z_NO_FLUSH);
      got += want - strm_.avail_out;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
      } else if (rc == Z_BUF_ERROR) {
        // No progress possible: needs more input (the loop refills).
        if (strm_.avail_in != 0 && strm_.avail_out != 0) {
          return absl::InternalError("gzip: inflate made no progress");
        }
      } else if (rc != Z_OK) {
        return absl::InvalidArgumentError(
            absl::StrCat("corrupt gzip data near compressed offset ", at, ": ",
                         strm_.msg != nullptr ? strm_.msg : "inflate error", " (", rc, ")"));
      }
    }
    return got;
  }

  Result<uint64_t> Skip(uint64_t n) override {
    if (scratch_.empty()) scratch_.resize(kIoChunk);
    uint64_t skipped = 0;
    while (skipped < n) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(n - skipped, scratch_.size()));
      FW_ASSIGN_OR_RETURN(const size_t k, Read(scratch_.data(), want));
      skipped += k;
      if (k < want) break;
    }
    return skipped;
  }

  uint64_t input_bytes() const override { return consumed(); }

 private:
  uint64_t consumed() const { return in_pos_ - strm_.avail_in; }

  Status Refill() {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(kIoChunk, size_ - in_pos_));
    if (k == 0) return absl::OkStatus();
    in_.resize(kIoChunk);
    FW_RETURN_IF_ERROR(file_->ReadAt(in_pos_, k, in_.data()));
    in_pos_ += k;
    strm_.next_in = in_.data();
    strm_.avail_in = static_cast<uInt>(k);
    return absl::OkStatus();
  }

  std::shared_ptr<io::RandomAccessFile> file_;
  uint64_t size_;
  uint64_t in_pos_ = 0;  // file offset of the next compressed read
  std::vector<uint8_t> in_;
  std::vector<uint8_t> scratch_;
  z_stream strm_{};
  bool initialized_ = false;
  bool in_member_ = false;
  bool eof_ = false;
};

Result<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty()) return absl::InvalidArgumentError("empty number");
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(absl::StrCat("not a decimal number: \"", AsAbsl(s), "\""));
    }
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - d) / 10) {
      return absl::InvalidArgumentError(absl::StrCat("number too large: \"", AsAbsl(s), "\""));
    }
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

Result<uint64_t> ParseTarNumber(std::string_view field) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!field.empty() && (static_cast<uint8_t>(field[0]) & 0x80) != 0) {
    // GNU base-256: big-endian two's complement with the top bit as marker.
    if (static_cast<uint8_t>(field[0]) != 0x80) {
      return absl::InvalidArgumentError("negative or oversized base-256 number");
    }
    uint64_t v = 0;
    for (size_t i = 1; i < field.size(); ++i) {
      if (v > (kMax >> 8)) return absl::InvalidArgumentError("base-256 number too large");
      v = (v << 8) | static_cast<uint8_t>(field[i]);
    }
    return v;
  }
  size_t i = 0;
  while (i < field.size() && field[i] == ' ') ++i;
  uint64_t v = 0;
  for (; i < field.size(); ++i) {
    const char c = field[i];
    if (c == '\0' || c == ' ') break;
    if (c < '0' || c > '7') {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid octal digit 0x", absl::Hex(static_cast<uint8_t>(c))));
    }
    if (v > (kMax >> 3)) return absl::InvalidArgumentError("octal number too large");
    v = (v << 3) | static_cast<uint64_t>(c - '0');
  }
  // Only terminators may follow the digits.
  for (; i < field.size(); ++i) {
    if (field[i] != '\0' && field[i] != ' ') {
      return absl::InvalidArgumentError("garbage after octal number");
    }
  }
  return v;
}

Result<PaxRecords> ParsePaxRecords(std::string_view data) {
  PaxRecords out;
  size_t pos = 0;
  while (pos < data.size()) {
    // Trailing NUL padding is tolerated (some writers pad the data).
    if (data[pos] == '\0' && data.find_first_not_of('\0', pos) == std::string_view::npos) break;
    const size_t space = data.find(' ', pos);
    if (space == std::string_view::npos || space == pos || space - pos > 20) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed pax record at byte ", pos, ": no length"));
    }
    auto len = ParseDecimal(data.substr(pos, space - pos));
    if (!len.ok() || *len < space - pos + 3 || *len > data.size() - pos) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed pax record at byte ", pos, ": bad length"));
    }
    const std::string_view rec = data.substr(space + 1, pos + *len - space - 1);
    if (rec.back() != '\n') {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed pax record at byte ", pos, ": no newline"));
    }
    const size_t eq = rec.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed pax record at byte ", pos, ": no key"));
    }
    const std::string_view key = rec.substr(0, eq);
    const std::string_view value = rec.substr(eq + 1, rec.size() - eq - 2);
    if (key == "path") {
      // An empty value removes an earlier (global) setting: no override.
      if (value.empty())
        out.path.reset();
      else
        out.path = std::string(value);
    } else if (key == "linkpath") {
      out.link_path = std::string(value);
    } else if (key == "size") {
      auto v = ParseDecimal(value);
      if (!v.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("pax record size at byte ", pos, ": ", v.status().message()));
      }
      out.size = *v;
    } else if (key.substr(0, 11) == "GNU.sparse.") {
      out.sparse = true;
    }
    pos += *len;
  }
  return out;
}

Result<bool> IsGzipFile(const io::RandomAccessFile& file) {
  if (file.size() < 2) return false;
  uint8_t magic[2];
  FW_RETURN_IF_ERROR(file.ReadAt(0, 2, magic));
  return magic[0] == 0x1f && magic[1] == 0x8b;
}

Result<std::unique_ptr<ByteSource>> OpenTarStream(std::shared_ptr<io::RandomAccessFile> file) {
  FW_ASSIGN_OR_RETURN(const bool gzip, IsGzipFile(*file));
  if (!gzip) return std::unique_ptr<ByteSource>(std::make_unique<FileSource>(std::move(file)));
  auto source = std::make_unique<GzipSource>(std::move(file));
  FW_RETURN_IF_ERROR(source->Init());
  return std::unique_ptr<ByteSource>(std::move(source));
}

std::unique_ptr<ByteSource> NewMemorySource(std::string_view data) {
  return std::make_unique<MemorySource>(data);
}

std::string TarReader::Where() const {
  return absl::StrCat("tar entry ", ctx_index_, " at offset ", ctx_offset_);
}

Status TarReader::Error(std::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat(Where(), ": ", AsAbsl(why)));
}

Status TarReader::ReadExact(void* dst, size_t n, std::string_view what) {
  FW_ASSIGN_OR_RETURN_CTX(const size_t got, stream_->Read(dst, n), Where());
  pos_ += got;
  if (got < n) {
    return Error(absl::StrCat("archive truncated in ", AsAbsl(what), " (", got, " of ", n,
                              " bytes at offset ", pos_ - got, ")"));
  }
  return absl::OkStatus();
}

Status TarReader::SkipExact(uint64_t n, std::string_view what) {
  FW_ASSIGN_OR_RETURN_CTX(const uint64_t got, stream_->Skip(n), Where());
  pos_ += got;
  if (got < n) {
    return Error(absl::StrCat("archive truncated in ", AsAbsl(what), " (", got, " of ", n,
                              " bytes at offset ", pos_ - got, ")"));
  }
  return absl::OkStatus();
}

Status TarReader::SkipRest() {
  if (!have_entry_) return absl::OkStatus();
  have_entry_ = false;
  ctx_index_ = entry_.index;  // errors below belong to the current entry
  ctx_offset_ = entry_.offset;
  FW_RETURN_IF_ERROR(SkipExact(data_left_, "entry data"));
  data_left_ = 0;
  FW_RETURN_IF_ERROR(SkipExact(pad_left_, "entry padding"));
  pad_left_ = 0;
  return absl::OkStatus();
}

Status TarReader::ReadData(std::string* dst) {
  if (!have_entry_) return absl::FailedPreconditionError("TarReader::ReadData without an entry");
  have_entry_ = false;
  ctx_index_ = entry_.index;
  ctx_offset_ = entry_.offset;
  const uint64_t need = data_left_;
  if (auto left = stream_->remaining(); left.has_value() && *left < need) {
    return Error(absl::StrCat("archive truncated in entry data (", *left, " of ", need,
                              " bytes at offset ", pos_, ")"));
  }
  const size_t base = dst->size();
  uint64_t done = 0;
  while (done < need) {
    // Grow in chunks so a lying size field cannot allocate more than exists.
    const size_t k = static_cast<size_t>(std::min<uint64_t>(need - done, 16 << 20));
    dst->resize(base + done + k);
    FW_ASSIGN_OR_RETURN_CTX(const size_t got, stream_->Read(dst->data() + base + done, k), Where());
    pos_ += got;
    done += got;
    if (got < k) {
      dst->resize(base + done);
      return Error(absl::StrCat("archive truncated in entry data (", done, " of ", need,
                                " bytes at offset ", pos_ - done, ")"));
    }
  }
  data_left_ = 0;
  FW_RETURN_IF_ERROR(SkipExact(pad_left_, "entry padding"));
  pad_left_ = 0;
  return absl::OkStatus();
}

Result<const TarEntry*> TarReader::Next() {
  if (done_) return nullptr;
  FW_RETURN_IF_ERROR(SkipRest());

  std::optional<std::string> long_name;  // GNU 'L'
  std::optional<std::string> long_link;  // GNU 'K'
  PaxRecords pax;
  bool have_meta = false;
  uint8_t block[kTarBlock];
  for (;;) {
    ctx_index_ = next_index_;
    ctx_offset_ = pos_;
    FW_ASSIGN_OR_RETURN_CTX(const size_t got, stream_->Read(block, kTarBlock), Where());
    pos_ += got;
    if (got == 0) {
      if (have_meta) return Error("archive ends after a metadata header, before its entry");
      done_ = true;  // no end-of-archive blocks: accepted on an entry boundary
      return nullptr;
    }
    if (got < kTarBlock) {
      return Error(absl::StrCat("archive truncated in a header (", got, " of 512 bytes)"));
    }
    if (AllZero(block, kTarBlock)) {
      if (have_meta) return Error("end-of-archive block after a metadata header");
      // The end is two zero blocks; a lone one followed by a header would
      // hide the rest of a concatenated archive, so it is an error.
      FW_ASSIGN_OR_RETURN_CTX(const size_t got2, stream_->Read(block, kTarBlock), Where());
      pos_ += got2;
      if (!AllZero(block, got2)) {
        return Error(
            "a single zero block followed by data (concatenated archives are not supported)");
      }
      done_ = true;
      return nullptr;
    }

    // Checksum: all 512 bytes with the checksum field read as spaces.
    // Historic writers summed signed chars; both are accepted.
    uint64_t unsigned_sum = 0;
    int64_t signed_sum = 0;
    for (size_t i = 0; i < kTarBlock; ++i) {
      const uint8_t b = (i >= kChksumOff && i < kChksumOff + kChksumLen) ? ' ' : block[i];
      unsigned_sum += b;
      signed_sum += static_cast<int8_t>(b);
    }
    auto stored = ParseTarNumber(
        std::string_view(reinterpret_cast<const char*>(block) + kChksumOff, kChksumLen));
    if (!stored.ok()) return Error(absl::StrCat("bad checksum field: ", stored.status().message()));
    if (*stored != unsigned_sum && static_cast<int64_t>(*stored) != signed_sum) {
      return Error(absl::StrCat("header checksum mismatch (stored ", *stored, ", computed ",
                                unsigned_sum, "): not a tar archive or corrupt"));
    }

    auto size =
        ParseTarNumber(std::string_view(reinterpret_cast<const char*>(block) + kSizeOff, kSizeLen));
    if (!size.ok()) return Error(absl::StrCat("bad size field: ", size.status().message()));
    char type = static_cast<char>(block[kTypeOff]);
    if (type == '\0') type = '0';

    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
      if (*size > kMaxTarMetadataSize) {
        return Error(absl::StrCat("metadata entry '", std::string(1, type), "' of ", *size,
                                  " bytes exceeds the limit of ", kMaxTarMetadataSize));
      }
      std::string data(static_cast<size_t>(*size), '\0');
      FW_RETURN_IF_ERROR(ReadExact(data.data(), data.size(), "a metadata entry"));
      FW_RETURN_IF_ERROR(
          SkipExact((kTarBlock - *size % kTarBlock) % kTarBlock, "metadata padding"));
      if (type == 'L' || type == 'K') {
        const size_t nul = data.find('\0');
        if (nul != std::string::npos) data.resize(nul);
        (type == 'L' ? long_name : long_link) = std::move(data);
      } else {
        auto records = ParsePaxRecords(data);
        if (!records.ok()) {
          return Error(absl::StrCat("pax header: ", records.status().message()));
        }
        // Global ('g') records are validated and otherwise ignored.
        if (type == 'x') pax = std::move(*records);
      }
      have_meta = true;
      continue;
    }

    TarEntry& e = entry_;
    e.index = next_index_;
    e.offset = ctx_offset_;
    e.type = type;
    e.sparse = pax.sparse || type == 'S';
    if (pax.path.has_value()) {
      e.name = std::move(*pax.path);
    } else if (long_name.has_value()) {
      e.name = std::move(*long_name);
    } else {
      const std::string_view name = CField(block, kNameOff, kNameLen);
      const bool posix = std::memcmp(block + kMagicOff, "ustar\0", 6) == 0;
      const std::string_view prefix =
          posix ? CField(block, kPrefixOff, kPrefixLen) : std::string_view();
      e.name = prefix.empty() ? std::string(name) : absl::StrCat(AsAbsl(prefix), "/", AsAbsl(name));
    }
    if (pax.link_path.has_value())
      e.link_name = std::move(*pax.link_path);
    else if (long_link.has_value())
      e.link_name = std::move(*long_link);
    else
      e.link_name = std::string(CField(block, kLinkOff, kLinkLen));

    if (type == 'S' && block[kGnuIsExtendedOff] != 0) {
      // Old GNU sparse: extension blocks of sparse map entries follow the
      // header, each ending with its own "more follow" flag.
      for (;;) {
        FW_RETURN_IF_ERROR(ReadExact(block, kTarBlock, "a GNU sparse extension header"));
        if (block[kGnuSparseExtIsExtendedOff] == 0) break;
      }
    }
    e.size = IsHeaderOnly(type) ? 0 : pax.size.value_or(*size);
    data_left_ = e.size;
    pad_left_ = (kTarBlock - e.size % kTarBlock) % kTarBlock;
    have_entry_ = true;
    ++next_index_;
    return &entry_;
  }
}

}  // namespace flywheel::interop::internal_wds
