// The loader's C++ transforms (src/flywheel/loader/transforms, docs/
// transforms.md), each next to its limit or peer measured in the same run.
//
// Workloads:
//   packing/seq<L>    TokenPacker: Add variable-length int32 documents
//                     (lengths log-uniform in [1, 8192], EOS on, split mode)
//                     and Take blocks of L into a reused batch buffer of 8
//                     blocks (tokens, segment ids, positions, mask); tokens/s.
//                     Limit: memcpy of the same token bytes (tokens/s).
//   jpeg/rrc-flip-64  ImagePipeline on one thread: decode + RandomResizedCrop
//                     + flip(0.5) -> 64x64 uint8 HWC into a batch slot, on a
//                     corpus of --images synthetic ~256x256 JPEGs (quality 90,
//                     4:2:0; jpeg_testing.h); images/s. Peer: the same
//                     pipeline in PIL (bench/jpeg_pil_baseline.py, torchvision
//                     semantics, one process) on the same files; and PIL with
//                     draft() (its scaled decode), which torchvision does not use.
//                     Entropy indexes off (index_cache_mb = 0) in this and
//                     the rows below unless named.
//   jpeg/rrc-flip-64-indexed      the same with entropy indexes (jpeg_index.h)
//                                 built beforehand: every later epoch of a
//                                 training run; peer: jpeg/rrc-flip-64.
//   jpeg/rrc-flip-64-index-build  the epoch that builds the indexes (the
//                                 images' second sighting): index + decode;
//                                 peer: jpeg/rrc-flip-64.
//   jpeg/rrc-flip-64-libjpeg-huffman  fast_huffman = false: libjpeg-turbo's
//                                 Huffman decoder instead of flywheel's;
//                                 peer: jpeg/rrc-flip-64.
//   jpeg/rrc-flip-64-indexed-libjpeg-huffman  indexed, with libjpeg-turbo
//                                 decoding a spliced JPEG (Splice); peer:
//                                 jpeg/rrc-flip-64-indexed.
//   jpeg/index-build, jpeg/splice BuildJpegIndex and JpegSplicer::Splice of
//                                 a random-resized crop's MCUs alone.
//   jpeg/rrc-flip-64-nocrop       the same with crop_decode = false (every
//                                 row and column decoded, as before crop
//                                 decoding); peer: jpeg/rrc-flip-64.
//   jpeg/rrc-flip-64-fulldecode   the same without scaled decoding.
//   jpeg/center-64-f32-chw        eval mode: centre crop, ImageNet-normalized
//                                 float32 CHW.
//   jpeg/decode-only  tjDecompress2 of every image at full size to RGB: the
//                     decode cost the pipeline saves with scaled decoding.
// Every figure is the best of --repeats runs of about --seconds.
// Results: bench/results/transforms.json (docs/transforms.md, "Figures").
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench_util.h"
#include "flywheel/base/rng.h"
#include "flywheel/loader/transforms/image.h"
#include "flywheel/loader/transforms/jpeg_index.h"
#include "flywheel/loader/transforms/jpeg_testing.h"
#include "flywheel/loader/transforms/packing.h"

namespace flywheel::bench {
namespace {

using loader::ImageOptions;
using loader::ImagePipeline;

// ---- packing ----

struct Docs {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> values;
};

// Lengths log-uniform in [1, 8192] (mean ~940): many short documents, a
// few longer than any block.
Docs MakeDocs(int64_t tokens, uint64_t seed) {
  Docs d;
  d.values.reserve(tokens + 8192);
  SplitMix64 rng(seed);
  while (static_cast<int64_t>(d.values.size()) < tokens) {
    const int64_t len = static_cast<int64_t>(std::exp(rng.UniformDouble() * std::log(8192.0)));
    for (int64_t k = 0; k < len; ++k) d.values.push_back(static_cast<int32_t>(rng.Next() & 0xFFFF));
    d.offsets.push_back(static_cast<int64_t>(d.values.size()));
  }
  return d;
}

double PackOnce(const Docs& d, int64_t seq_len) {
  loader::PackingOptions o;
  o.seq_len = seq_len;
  o.eos_token = 0;
  auto packer = CheckResult(loader::TokenPacker::Create(o), "packer");
  constexpr int64_t kBatch = 8;
  std::vector<int32_t> tok(kBatch * seq_len), seg(tok.size()), pos(tok.size());
  std::vector<uint8_t> mask(tok.size());
  std::vector<int64_t> first(kBatch);
  const loader::PackedBlocksView view{tok.data(), seg.data(), pos.data(), mask.data(),
                                      first.data()};
  const size_t docs = d.offsets.size() - 1;
  constexpr size_t kChunk = 256;  // documents per Add (a column page's worth)
  const double start = Now();
  int64_t blocks = 0;
  for (size_t i = 0; i < docs; i += kChunk) {
    const size_t n = std::min(kChunk, docs - i);
    Check(packer->Add({&d.offsets[i], n + 1}, d.values), "add");
    while (packer->ready() >= kBatch) blocks += packer->Take(kBatch, view);
  }
  packer->Finish();
  while (packer->ready() > 0) blocks += packer->Take(kBatch, view);
  const double elapsed = Now() - start;
  if (tok[0] == 0x7fffffff) std::puts("");  // keep the output observable
  return static_cast<double>(d.values.size()) / elapsed;
}

double MemcpyOnce(const Docs& d) {
  std::vector<int32_t> dst(d.values.size());
  const double start = Now();
  std::memcpy(dst.data(), d.values.data(), d.values.size() * sizeof(int32_t));
  const double elapsed = Now() - start;
  if (dst[d.values.size() / 2] == 0x7fffffff) std::puts("");
  return static_cast<double>(d.values.size()) / elapsed;
}

// ---- JPEG ----

// With `cache` null: no entropy indexes.
double PipelineOnce(const std::vector<std::vector<uint8_t>>& corpus, const ImageOptions& o,
                    double seconds, uint64_t* key,
                    std::shared_ptr<loader::JpegIndexCache> cache = nullptr) {
  auto p = CheckResult(ImagePipeline::Create(o, std::move(cache)), "pipeline");
  constexpr int kBatch = 256;
  std::vector<float> batch(p->output_bytes() * kBatch / sizeof(float) + 1);
  uint8_t* slots = reinterpret_cast<uint8_t*>(batch.data());
  int64_t done = 0;
  const double start = Now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (const auto& jpeg : corpus) {
      uint8_t* slot = slots + (done % kBatch) * p->output_bytes();
      Check(p->Run(jpeg, Mix64((*key)++), {slot, p->output_bytes()}), "run");
      ++done;
    }
    elapsed = Now() - start;
  }
  return static_cast<double>(done) / elapsed;
}

// One pass over the corpus by a pipeline with a fresh index cache that has
// seen every image once: the pass that builds the indexes (images/s).
double IndexBuildEpoch(const std::vector<std::vector<uint8_t>>& corpus, const ImageOptions& o,
                       uint64_t* key) {
  auto cache = std::make_shared<loader::JpegIndexCache>(int64_t{1} << 30);
  for (const auto& jpeg : corpus) cache->Find(loader::JpegIndexCache::KeyOf(jpeg), nullptr);
  auto p = CheckResult(ImagePipeline::Create(o, cache), "pipeline");
  std::vector<uint8_t> slot(p->output_bytes());
  const double start = Now();
  for (const auto& jpeg : corpus) Check(p->Run(jpeg, Mix64((*key)++), slot), "run");
  const double elapsed = Now() - start;
  Check(cache->stats().built == static_cast<int64_t>(corpus.size())
            ? absl::OkStatus()
            : absl::InternalError("not every image was indexed"),
        "index build");
  return static_cast<double>(corpus.size()) / elapsed;
}

// BuildJpegIndex alone (images/s).
double IndexOnlyOnce(const std::vector<std::vector<uint8_t>>& corpus, double seconds) {
  int64_t done = 0;
  size_t bytes = 0;
  const double start = Now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (const auto& jpeg : corpus) {
      bytes += CheckResult(loader::BuildJpegIndex(jpeg), "index").bytes();
      ++done;
    }
    elapsed = Now() - start;
  }
  if (bytes == 0) std::puts("");
  return static_cast<double>(done) / elapsed;
}

// JpegSplicer::Splice of a random crop's MCUs (a quarter of each side to
// the whole image), images/s.
double SpliceOnlyOnce(const std::vector<std::vector<uint8_t>>& corpus, double seconds) {
  std::vector<loader::JpegIndex> indexes;
  for (const auto& jpeg : corpus) indexes.push_back(CheckResult(loader::BuildJpegIndex(jpeg), "index"));
  loader::JpegSplicer splicer;
  SplitMix64 rng(1);
  int64_t done = 0;
  size_t bytes = 0;
  const double start = Now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (size_t i = 0; i < corpus.size(); ++i) {
      const auto& ix = indexes[i];
      loader::McuRect r;
      const int w = 1 + static_cast<int>(rng.Uniform(ix.mcus_x)), h = 1 + static_cast<int>(rng.Uniform(ix.mcus_y));
      r.x0 = static_cast<int>(rng.Uniform(ix.mcus_x - w + 1));
      r.y0 = static_cast<int>(rng.Uniform(ix.mcus_y - h + 1));
      r.x1 = r.x0 + w;
      r.y1 = r.y0 + h;
      bytes += CheckResult(splicer.Splice(corpus[i], ix, r), "splice").size();
      ++done;
    }
    elapsed = Now() - start;
  }
  if (bytes == 0) std::puts("");
  return static_cast<double>(done) / elapsed;
}

double DecodeOnlyOnce(const std::vector<std::vector<uint8_t>>& corpus, double seconds) {
  tjhandle h = tjInitDecompress();
  std::vector<uint8_t> buf(300 * 300 * 3);
  int64_t done = 0;
  const double start = Now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (const auto& jpeg : corpus) {
      int w = 0, hh = 0, ss = 0, cs = 0;
      if (tjDecompressHeader3(h, jpeg.data(), jpeg.size(), &w, &hh, &ss, &cs) != 0 ||
          static_cast<size_t>(w) * hh * 3 > buf.size() ||
          tjDecompress2(h, jpeg.data(), jpeg.size(), buf.data(), w, w * 3, hh, TJPF_RGB,
                        TJFLAG_ACCURATEDCT) != 0) {
        Check(absl::InternalError(tjGetErrorStr2(h)), "decode");
      }
      ++done;
    }
    elapsed = Now() - start;
  }
  tjDestroy(h);
  return static_cast<double>(done) / elapsed;
}

nlohmann::json RunPil(const Flags& flags, const std::string& corpus_dir) {
  const std::string cmd = absl::StrCat("'", flags.Str("python"), "' '", SourceDir(),
                                       "/bench/jpeg_pil_baseline.py' --corpus='", corpus_dir,
                                       "' --size=64 --seconds=", flags.Double("seconds"),
                                       " --repeats=", flags.Int("repeats"));
  std::fprintf(stderr, "transforms_bench: %s\n", cmd.c_str());
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return nullptr;
  std::string out;
  char buf[4096];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
  const int rc = ::pclose(p);
  if (rc != 0) {
    std::fprintf(stderr, "transforms_bench: the PIL peer failed (status %d); no ratio\n", rc);
    return nullptr;
  }
  auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

void RunPacking(const Flags& flags, Report& report) {
  const Docs d = MakeDocs(flags.Int("tokens"), 1);
  const int64_t repeats = flags.Int("repeats");
  std::vector<double> copy;
  for (int64_t r = 0; r < repeats; ++r) copy.push_back(MemcpyOnce(d));
  for (const auto& s : flags.List("seq_lens")) {
    const int64_t seq = std::stoll(s);
    std::vector<double> rates;
    for (int64_t r = 0; r < repeats; ++r) rates.push_back(PackOnce(d, seq));
    report.Add({absl::StrCat("packing/seq", seq),
                "tokens/s",
                Best(rates),
                "memcpy of the tokens",
                Best(copy),
                0,
                "Add + Take into a reused 8-block batch (tokens, segment ids, positions, mask)",
                {{"tokens", d.values.size()},
                 {"documents", d.offsets.size() - 1},
                 {"samples", rates},
                 {"memcpy_samples", copy}}});
  }
}

void RunJpeg(const Flags& flags, Report& report) {
  const auto corpus =
      loader::testing_util::SyntheticJpegCorpus(static_cast<int>(flags.Int("images")));
  size_t bytes = 0;
  for (const auto& j : corpus) bytes += j.size();
  TempDir dir(flags.Str("tmp"), "fw_transforms_bench");
  for (size_t i = 0; i < corpus.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "img_%05zu.jpg", i);
    std::ofstream(dir.Sub(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(corpus[i].data()),
               static_cast<std::streamsize>(corpus[i].size()));
  }
  const double seconds = flags.Double("seconds");
  const int64_t repeats = flags.Int("repeats");

  ImageOptions rrc;
  rrc.height = rrc.width = 64;
  rrc.index_cache_mb = 0;
  // Indexes built by two passes (first sighting, second), outside the timing.
  auto cache = std::make_shared<loader::JpegIndexCache>(int64_t{1} << 30);
  {
    uint64_t k = 0;
    auto p = CheckResult(ImagePipeline::Create(rrc, cache), "pipeline");
    std::vector<uint8_t> slot(p->output_bytes());
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& jpeg : corpus) Check(p->Run(jpeg, Mix64(k++), slot), "run");
    }
  }
  ImageOptions libjpeg_huffman = rrc;
  libjpeg_huffman.fast_huffman = false;
  ImageOptions nocrop = rrc;
  nocrop.crop_decode = false;
  ImageOptions fastup = rrc;
  fastup.fast_upsample = true;
  ImageOptions fast = fastup;
  fast.fast_dct = true;
  ImageOptions full = rrc;
  full.scaled_decode = false;
  ImageOptions eval = rrc;
  eval.crop = loader::CropMode::kCenter;
  eval.flip_probability = 0;
  eval.dtype = loader::PixelType::kFloat32;
  eval.layout = loader::ImageLayout::kCHW;
  eval.mean = loader::kImageNetMean;
  eval.std = loader::kImageNetStd;

  // Alternate the workloads' runs (and the PIL peer's) so load bursts hit all.
  std::vector<double> r_rrc, r_libjpeg_huffman, r_indexed_libjpeg, r_nocrop, r_full, r_eval, r_decode, r_fastup, r_fast, r_indexed,
      r_build_epoch, r_index, r_splice;
  uint64_t key = 0;
  for (int64_t r = 0; r < repeats; ++r) {
    r_rrc.push_back(PipelineOnce(corpus, rrc, seconds, &key));
    r_indexed.push_back(PipelineOnce(corpus, rrc, seconds, &key, cache));
    r_libjpeg_huffman.push_back(PipelineOnce(corpus, libjpeg_huffman, seconds, &key));
    r_indexed_libjpeg.push_back(PipelineOnce(corpus, libjpeg_huffman, seconds, &key, cache));
    r_build_epoch.push_back(IndexBuildEpoch(corpus, rrc, &key));
    r_index.push_back(IndexOnlyOnce(corpus, seconds));
    r_splice.push_back(SpliceOnlyOnce(corpus, seconds));
    r_nocrop.push_back(PipelineOnce(corpus, nocrop, seconds, &key));
    r_fastup.push_back(PipelineOnce(corpus, fastup, seconds, &key));
    r_fast.push_back(PipelineOnce(corpus, fast, seconds, &key));
    r_full.push_back(PipelineOnce(corpus, full, seconds, &key));
    r_eval.push_back(PipelineOnce(corpus, eval, seconds, &key));
    r_decode.push_back(DecodeOnlyOnce(corpus, seconds));
  }
  const nlohmann::json pil = RunPil(flags, dir.path());
  const double pil_rate = pil.is_object() ? pil["pil"]["images_per_s"].get<double>() : 0;
  const double pil_draft = pil.is_object() ? pil["pil_draft"]["images_per_s"].get<double>() : 0;
  const nlohmann::json details = {
      {"images", corpus.size()}, {"mean_jpeg_bytes", bytes / corpus.size()}, {"threads", 1}};
  auto with = [&](const std::vector<double>& samples) {
    nlohmann::json j = details;
    j["samples"] = samples;
    return j;
  };
  report.Add({"jpeg/rrc-flip-64", "images/s", Best(r_rrc), "PIL (torchvision transforms)", pil_rate,
              0, "decode + RandomResizedCrop + flip -> 64x64 uint8 HWC, 1 thread", with(r_rrc)});
  report.Add({"jpeg/rrc-flip-64-vs-pil-draft", "images/s", Best(r_rrc),
              "PIL with draft() scaled decode", pil_draft, 0,
              "as above; PIL peer uses JPEG draft mode", with(r_rrc)});
  report.Add({"jpeg/rrc-flip-64-indexed", "images/s", Best(r_indexed), "no indexes (jpeg/rrc-flip-64)",
              Best(r_rrc), 0, "entropy indexes built beforehand (every epoch after the second)",
              with(r_indexed)});
  report.Add({"jpeg/rrc-flip-64-indexed-vs-pil-draft", "images/s", Best(r_indexed),
              "PIL with draft() scaled decode", pil_draft, 0, "as above; PIL peer uses JPEG draft mode",
              with(r_indexed)});
  report.Add({"jpeg/rrc-flip-64-libjpeg-huffman", "images/s", Best(r_libjpeg_huffman),
              "flywheel's Huffman decoder (jpeg/rrc-flip-64)", Best(r_rrc), 0,
              "fast_huffman = false: libjpeg-turbo's Huffman decoder", with(r_libjpeg_huffman)});
  report.Add({"jpeg/rrc-flip-64-indexed-libjpeg-huffman", "images/s", Best(r_indexed_libjpeg),
              "flywheel's Huffman decoder (jpeg/rrc-flip-64-indexed)", Best(r_indexed), 0,
              "indexed, fast_huffman = false: libjpeg-turbo decodes a spliced JPEG",
              with(r_indexed_libjpeg)});
  report.Add({"jpeg/rrc-flip-64-index-build", "images/s", Best(r_build_epoch),
              "no indexes (jpeg/rrc-flip-64)", Best(r_rrc), 0,
              "the pass that builds every image's index (second sighting), one pass of the corpus",
              with(r_build_epoch)});
  report.Add({"jpeg/index-build", "images/s", Best(r_index), "full-size tjDecompress2 only",
              Best(r_decode), 0, "BuildJpegIndex alone", with(r_index)});
  report.Add({"jpeg/splice", "images/s", Best(r_splice), "no indexes (jpeg/rrc-flip-64)", Best(r_rrc), 0,
              "JpegSplicer::Splice of a random rectangle of MCUs alone", with(r_splice)});
  report.Add({"jpeg/rrc-flip-64-fast-upsample", "images/s", Best(r_fastup), "the default (jpeg/rrc-flip-64)",
              Best(r_rrc), 0, "fast_upsample = true: merged chroma upsampling", with(r_fastup)});
  report.Add({"jpeg/rrc-flip-64-fast", "images/s", Best(r_fast), "PIL (torchvision transforms)", pil_rate, 0,
              "fast_upsample + fast_dct", with(r_fast)});
  report.Add({"jpeg/rrc-flip-64-nocrop", "images/s", Best(r_nocrop),
              "crop_decode (jpeg/rrc-flip-64)", Best(r_rrc), 0,
              "crop_decode = false: every row and column decoded", with(r_nocrop)});
  report.Add({"jpeg/rrc-flip-64-fulldecode", "images/s", Best(r_full),
              "PIL (torchvision transforms)", pil_rate, 0, "scaled_decode = false", with(r_full)});
  report.Add({"jpeg/center-64-f32-chw", "images/s", Best(r_eval), "full-size tjDecompress2 only",
              Best(r_decode), 0, "eval: centre crop 0.875, ImageNet-normalized float32 CHW",
              with(r_eval)});
  report.Add({"jpeg/decode-only", "images/s", Best(r_decode), "PIL (torchvision transforms)",
              pil_rate, 0, "tjDecompress2 at full size to RGB, nothing else", with(r_decode)});
  report.extra()["pil"] = pil;
}

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel::bench;
  Flags flags(argc, argv,
              {{"tokens", "16000000"},
               {"seq_lens", "2048,8192"},
               {"images", "256"},
               {"seconds", "1.0"},
               {"repeats", "3"},
               {"only", "packing,jpeg"},
               {"python", "/usr/bin/python3"},
               {"tmp", "/tmp"},
               {"out", SourceDir() + "/bench/results"}},
              "transforms_bench [--tokens=16000000] [--seq_lens=2048,8192] [--images=256] "
              "[--seconds=1.0] [--repeats=3] [--only=packing,jpeg] [--python=/usr/bin/python3] "
              "[--tmp=/tmp] [--out=DIR]");
  Report report("transforms", "Loader transforms: token packing and the JPEG pipeline (1 thread)");
  for (const auto& what : flags.List("only")) {
    if (what == "packing") RunPacking(flags, report);
    if (what == "jpeg") RunJpeg(flags, report);
  }
  TempDir tmp(flags.Str("tmp"));
  report.Write(flags.Str("out"), MachineInfo(tmp.path()), flags.ToJson());
  return 0;
}
