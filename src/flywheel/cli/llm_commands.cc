// `flywheel llm ...`: language-model checkpoints (docs/llm.md).
//   llm import FILE.gguf DIR   a GGUF file as a Hugging Face checkpoint folder
//   llm inspect FILE           a GGUF file's or checkpoint folder's metadata and tensors
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/io/file_system.h"
#include "flywheel/llm/gguf.h"
#include "flywheel/llm/gguf_import.h"
#include "flywheel/llm/safetensors.h"

namespace flywheel::cli {
namespace {

std::string Dims(const std::vector<uint64_t>& d) { return absl::StrJoin(d.rbegin(), d.rend(), "x"); }

int InspectGguf(const std::string& path, bool all) {
  auto g = llm::GgufFile::Open(path);
  if (!g.ok()) return Fail(g.status());
  std::printf("GGUF v%u, %zu metadata entries, %zu tensors\n", (*g)->version(), (*g)->metadata().size(),
              (*g)->tensors().size());
  for (const auto& [key, v] : (*g)->metadata()) {
    std::string text;
    switch (v.type) {
      case llm::GgufType::kString: text = v.s.size() > 80 ? absl::StrCat(AsAbsl(v.s.substr(0, 77)), "...") : std::string(v.s); break;
      case llm::GgufType::kArray: text = absl::StrCat("[", v.count, " elements]"); break;
      case llm::GgufType::kFloat32:
      case llm::GgufType::kFloat64: text = absl::StrCat(v.f); break;
      default: text = v.is_integer() ? absl::StrCat(*v.AsInt(key)) : absl::StrCat(v.u != 0 ? "true" : "false");
    }
    for (char& c : text) {
      if (c == '\n') c = ' ';
    }
    std::printf("  %-44s %s\n", key.c_str(), text.c_str());
  }
  std::map<std::string, int> types;
  for (const auto& t : (*g)->tensors()) ++types[llm::GgmlTypeName(t.type)];
  std::vector<std::string> parts;
  for (const auto& [name, n] : types) parts.push_back(absl::StrCat(n, " ", name));
  std::printf("tensor types: %s\n", absl::StrJoin(parts, ", ").c_str());
  size_t shown = 0;
  for (const auto& t : (*g)->tensors()) {
    if (!all && shown++ >= 12) {
      std::printf("  ... %zu more (--all lists every tensor)\n", (*g)->tensors().size() - 12);
      break;
    }
    std::printf("  %-40s %-6s %s\n", t.name.c_str(), llm::GgmlTypeName(t.type).c_str(), Dims(t.dims).c_str());
  }
  return 0;
}

int InspectCheckpoint(const std::string& dir, bool all) {
  auto ck = llm::Checkpoint::Open(dir);
  if (!ck.ok()) return Fail(ck.status());
  const auto tensors = (*ck)->tensors();
  int64_t params = 0;
  for (const auto* t : tensors) params += t->elements();
  std::printf("checkpoint %s: %zu tensors, %lld parameters\n", dir.c_str(), tensors.size(),
              static_cast<long long>(params));
  size_t shown = 0;
  for (const auto* t : tensors) {
    if (!all && shown++ >= 12) {
      std::printf("  ... %zu more (--all lists every tensor)\n", tensors.size() - 12);
      break;
    }
    std::printf("  %-52s %-5s %s\n", t->name.c_str(), std::string(llm::DTypeName(t->dtype)).c_str(),
                absl::StrJoin(t->shape, "x").c_str());
  }
  return 0;
}

}  // namespace

void AddLlmCommands(CLI::App& app, int* exit_code) {
  CLI::App* grp = app.add_subcommand("llm", "Language-model checkpoints: import GGUF files, inspect checkpoints");
  grp->require_subcommand(1);
  int* rc = exit_code;
  {
    auto* cmd = grp->add_subcommand(
        "import",
        "Write a Hugging Face-format checkpoint folder (config.json, model.safetensors, tokenizer.json,\n"
        "tokenizer_config.json with the chat template) from a llama-architecture GGUF file; tensors are\n"
        "dequantized (F32, F16, BF16, Q8_0, Q4_0, Q4_1). docs/llm.md");
    auto gguf = std::make_shared<std::string>();
    auto dir = std::make_shared<std::string>();
    auto dtype = std::make_shared<std::string>("f32");
    auto shard = std::make_shared<long long>(5LL << 30);
    auto quiet = std::make_shared<bool>(false);
    cmd->add_option("gguf", *gguf, "The GGUF file")->required();
    cmd->add_option("dir", *dir, "The checkpoint folder to write (created)")->required();
    cmd->add_option("--dtype", *dtype, "Weights in the checkpoint: f32 (default), bf16 or f16")
        ->check(CLI::IsMember({"f32", "bf16", "f16"}));
    cmd->add_option("--max-shard-bytes", *shard, "Split model.safetensors into shards past this many bytes")
        ->check(AtLeast(1));
    cmd->add_flag("--quiet", *quiet, "No progress on stderr");
    cmd->callback([=] {
      llm::ImportOptions o;
      o.dtype = *dtype == "bf16" ? llm::DType::kBF16 : *dtype == "f16" ? llm::DType::kF16 : llm::DType::kF32;
      o.max_shard_bytes = static_cast<uint64_t>(*shard);
      const auto t0 = std::chrono::steady_clock::now();
      if (!*quiet && isatty(2)) {  // a terminal: one line, rewritten
        o.progress = [](size_t done, size_t total, const std::string& name) {
          std::fprintf(stderr, "\rflywheel llm import: %zu/%zu tensors (%s)%-20s", done, total, name.c_str(), "");
          if (done == total) std::fprintf(stderr, "\n");
        };
      }
      auto r = llm::ImportGguf(*gguf, *dir, o);
      if (!r.ok()) return void(*rc = Fail(r.status()));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("imported %s -> %s: %lld tensors, %lld parameters (%s), tokenizer %s, %.1f s\n", gguf->c_str(),
                  dir->c_str(), static_cast<long long>(r->tensors), static_cast<long long>(r->parameters),
                  dtype->c_str(), r->tokenizer.c_str(), s);
    });
  }
  {
    auto* cmd = grp->add_subcommand("inspect", "Show a GGUF file's metadata and tensors, or a checkpoint folder's tensors");
    auto path = std::make_shared<std::string>();
    auto all = std::make_shared<bool>(false);
    cmd->add_option("path", *path, "A .gguf file or a checkpoint folder")->required();
    cmd->add_flag("--all", *all, "List every tensor");
    cmd->callback([=] {
      auto local = io::LocalPath(*path);
      if (!local.ok()) return void(*rc = Fail(local.status()));
      auto st = io::PosixFileSystem()->Stat(*local);
      if (!st.ok()) return void(*rc = Fail(st.status()));
      *rc = st->is_dir ? InspectCheckpoint(*local, *all) : InspectGguf(*local, *all);
    });
  }
}

}  // namespace flywheel::cli
