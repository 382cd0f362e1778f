#include "flywheel/llm/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flywheel/io/file_system.h"
#include "nlohmann/json.hpp"

namespace flywheel::llm {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // as the safetensors library
constexpr int kMaxRank = 16;
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

struct DTypeInfo {
  DType d;
  const char* name;
  size_t bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2}, {DType::kF64, "F64", 8},
    {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4}, {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},   {DType::kBool, "BOOL", 1},
};

}  // namespace

std::string_view DTypeName(DType d) {
  for (const auto& i : kDTypes) {
    if (i.d == d) return i.name;
  }
  return "?";
}

size_t DTypeBytes(DType d) {
  for (const auto& i : kDTypes) {
    if (i.d == d) return i.bytes;
  }
  return 0;
}

Result<DType> ParseDType(std::string_view name) {
  for (const auto& i : kDTypes) {
    if (name == i.name) return i.d;
  }
  return absl::UnimplementedError(absl::StrCat("dtype '", AsAbsl(name), "' is not supported"));
}

int64_t TensorView::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::~SafetensorsFile() = default;

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  FW_ASSIGN_OR_RETURN(auto file, io::PosixFileSystem()->OpenRead(path));
  std::unique_ptr<SafetensorsFile> s(new SafetensorsFile());
  const uint8_t* p = file->mapped_data();
  if (p == nullptr) {
    s->owned_.resize(static_cast<size_t>(file->size()));
    FW_RETURN_IF_ERROR(file->ReadAt(0, s->owned_.size(), s->owned_.data()));
    p = reinterpret_cast<const uint8_t*>(s->owned_.data());
  }
  FW_RETURN_IF_ERROR_CTX(s->ParseAll(p, static_cast<size_t>(file->size())), path);
  s->file_ = std::move(file);
  return s;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(std::string bytes) {
  std::unique_ptr<SafetensorsFile> s(new SafetensorsFile());
  s->owned_ = std::move(bytes);
  FW_RETURN_IF_ERROR(s->ParseAll(reinterpret_cast<const uint8_t*>(s->owned_.data()), s->owned_.size()));
  return s;
}

Status SafetensorsFile::ParseAll(const uint8_t* p, size_t size) {
  if (size < 8) return absl::DataLossError(absl::StrCat("a safetensors file needs 8 bytes of header length, has ", size));
  uint64_t n;
  std::memcpy(&n, p, 8);
  if (n > size - 8 || n > kMaxHeaderBytes) {
    return absl::DataLossError(absl::StrCat("header length ", n, " exceeds the file's ", size - 8,
                                            " bytes after it (or the 100 MB limit)"));
  }
  nlohmann::json h = nlohmann::json::parse(p + 8, p + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) return absl::DataLossError("the header is not a JSON object");
  const uint8_t* data = p + 8 + n;
  const uint64_t data_bytes = size - 8 - n;
  struct Extent {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Extent> extents;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return absl::DataLossError("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return absl::DataLossError(absl::StrCat("__metadata__ '", m.key(), "' is not a string"));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](std::string_view what) {
      return absl::DataLossError(absl::StrCat("tensor '", name, "': ", AsAbsl(what)));
    };
    if (!v.is_object()) return bad("entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return bad("missing string \"dtype\"");
    if (sh == v.end() || !sh->is_array()) return bad("missing array \"shape\"");
    if (off == v.end() || !off->is_array() || off->size() != 2) return bad("missing \"data_offsets\" [begin, end]");
    TensorView t;
    t.name = name;
    FW_ASSIGN_OR_RETURN_CTX(t.dtype, ParseDType(dt->get<std::string>()), "tensor '", name, "'");
    if (sh->size() > kMaxRank) return bad(absl::StrCat("rank ", sh->size(), " exceeds ", kMaxRank));
    uint64_t elements = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return bad("shape holds a value that is not a non-negative integer");
      const uint64_t x = d.get<uint64_t>();
      if (x != 0 && elements > (uint64_t{1} << 56) / x) return bad("shape overflows");
      elements *= x;
      t.shape.push_back(static_cast<int64_t>(x));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) return bad("data_offsets are not integers");
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_bytes) {
      return bad(absl::StrCat("data_offsets [", begin, ", ", end, ") lie outside the ", data_bytes, " data bytes"));
    }
    const uint64_t want = elements * DTypeBytes(t.dtype);
    if (end - begin != want) {
      return bad(absl::StrCat(AsAbsl(DTypeName(t.dtype)), " ", sh->dump(), " takes ", want, " bytes, data_offsets give ",
                              end - begin));
    }
    t.data = data + begin;
    t.bytes = want;
    extents.push_back({begin, end, tensors_.size()});
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  // The tensors tile the data: no overlap, no hole.
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const Extent& e : extents) {
    if (e.begin != at) {
      return absl::DataLossError(absl::StrCat("tensor '", tensors_[e.index].name, "' starts at data byte ", e.begin,
                                              ", expected ", at, e.begin < at ? " (overlap)" : " (a hole)"));
    }
    at = e.end;
  }
  if (at != data_bytes) {
    return absl::DataLossError(absl::StrCat("the tensors cover ", at, " of the ", data_bytes, " data bytes"));
  }
  return absl::OkStatus();
}

const TensorView* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  auto c = std::make_unique<Checkpoint>();
  auto fs = io::PosixFileSystem();
  const std::string single = dir + "/" + kSingle;
  const std::string index = dir + "/" + kIndex;
  FW_ASSIGN_OR_RETURN(const bool has_single, fs->Exists(single));
  std::map<std::string, std::string> expect;  // tensor -> shard (from the index)
  std::vector<std::string> files;
  if (has_single) {
    files.push_back(single);
  } else {
    FW_ASSIGN_OR_RETURN(const bool has_index, fs->Exists(index));
    if (!has_index) {
      return absl::NotFoundError(absl::StrCat(dir, " holds neither ", kSingle, " nor ", kIndex));
    }
    FW_ASSIGN_OR_RETURN(std::string text, fs->ReadFile(index));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::DataLossError(absl::StrCat(index, ": not a JSON object with a \"weight_map\" object"));
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) return absl::DataLossError(absl::StrCat(index, ": '", it.key(), "' maps to a non-string"));
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        return absl::DataLossError(absl::StrCat(index, ": shard name '", shard, "' is not a file name in ", dir));
      }
      expect[it.key()] = shard;
      if (std::find(files.begin(), files.end(), shard) == files.end()) files.push_back(shard);
    }
    std::sort(files.begin(), files.end());
    for (std::string& f : files) f = dir + "/" + f;
  }
  for (const std::string& f : files) {
    FW_ASSIGN_OR_RETURN(auto s, SafetensorsFile::Open(f));
    const std::string base = f.substr(dir.size() + 1);
    for (const TensorView& t : s->tensors()) {
      if (!c->by_name_.emplace(t.name, &t).second) {
        return absl::DataLossError(absl::StrCat("tensor '", t.name, "' is in two files (", f, ")"));
      }
      if (!has_single) {
        auto e = expect.find(t.name);
        if (e == expect.end() || e->second != base) {
          return absl::DataLossError(absl::StrCat("tensor '", t.name, "' is in ", base, " but the index ",
                                                  e == expect.end() ? "does not list it" : "says " + e->second));
        }
      }
    }
    c->files_.push_back(std::move(s));
  }
  for (const auto& [name, shard] : expect) {
    if (!c->by_name_.count(name)) {
      return absl::DataLossError(absl::StrCat("the index lists tensor '", name, "' in ", shard, ", which lacks it"));
    }
  }
  return c;
}

const TensorView* Checkpoint::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const TensorView*> Checkpoint::tensors() const {
  std::vector<const TensorView*> out;
  for (const auto& [name, t] : by_name_) out.push_back(t);
  return out;
}

namespace {

Status WriteOne(const std::string& path, const std::vector<const TensorToWrite*>& tensors,
                const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const TensorToWrite* t : tensors) {
    uint64_t bytes = DTypeBytes(t->dtype);
    for (int64_t d : t->shape) bytes *= static_cast<uint64_t>(d);
    h[t->name] = {{"dtype", std::string(DTypeName(t->dtype))}, {"shape", t->shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-aligned
  const std::string tmp = path + ".tmp";
  {
    FW_ASSIGN_OR_RETURN(auto w, io::PosixFileSystem()->NewWritable(tmp));
    const uint64_t n = header.size();
    FW_RETURN_IF_ERROR(w->Append(&n, 8));
    FW_RETURN_IF_ERROR(w->Append(header.data(), header.size()));
    for (const TensorToWrite* t : tensors) {
      uint64_t bytes = DTypeBytes(t->dtype);
      for (int64_t d : t->shape) bytes *= static_cast<uint64_t>(d);
      if (bytes > 0) FW_RETURN_IF_ERROR(w->Append(t->data, static_cast<size_t>(bytes)));
    }
    FW_RETURN_IF_ERROR(w->Close());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename ", tmp, " -> ", path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

Status WriteCheckpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors, const WriteOptions& options) {
  if (options.max_shard_bytes == 0) return absl::InvalidArgumentError("max_shard_bytes must be positive");
  FW_RETURN_IF_ERROR(io::PosixFileSystem()->CreateDirs(dir));
  std::vector<std::vector<const TensorToWrite*>> shards(1);
  uint64_t size = 0, total = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.shape.size() > kMaxRank) return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' rank too high"));
    uint64_t bytes = DTypeBytes(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has a negative dimension"));
      bytes *= static_cast<uint64_t>(d);
    }
    if (!shards.back().empty() && size + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(&t);
    size += bytes;
    total += bytes;
  }
  if (shards.size() == 1) return WriteOne(dir + "/" + kSingle, shards[0], options.metadata);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", k + 1, shards.size());
    FW_RETURN_IF_ERROR(WriteOne(dir + "/" + name, shards[k], options.metadata));
    for (const TensorToWrite* t : shards[k]) weight_map[t->name] = name;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return io::PosixFileSystem()->Replace(dir + "/" + kIndex, index.dump(2));
}

}  // namespace flywheel::llm
