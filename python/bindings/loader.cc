// flywheel._core.Loader: the C++ loader (src/flywheel/loader/loader.h) for
// python/flywheel/loader.py, which holds the public API and its docs.
//
// A batch crosses as (epoch, position, columns, indices, tables): `columns`
// maps each name to a column tuple (arrays.h), whose arrays are writable
// views into the loader-owned batch buffers; each view's base capsule holds a
// reference to the batch, so the buffers live as long as any array over them
// (zero-copy, no Python copy). Next() releases the GIL while it waits.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "arrow.h"
#include "flywheel/base/metrics.h"
#include "flywheel/catalog/read_policy.h"
#include "flywheel/loader/loader.h"
#include "flywheel/loader/transforms/packing.h"
#include "status.h"

namespace flywheel::python {
namespace py = pybind11;

namespace {

using loader::Batch;
using loader::BatchColumn;
using loader::Loader;
using loader::LoaderOptions;
using loader::LoaderStats;
using loader::TableRef;

// A format::Column over one batch column's buffers, owned by the batch.
template <typename T>
py::array CopyVector(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

// (epoch, position, {name: column tuple}, indices, tables, ArrowBatch): the
// ArrowBatch exports the same buffers through the Arrow C data interface.
py::object BatchToPython(std::shared_ptr<const Batch> batch, const format::Schema& schema) {
  std::shared_ptr<const void> owner = batch;
  py::dict columns;
  format::RecordBatch arrow;
  arrow.num_rows = batch->num_rows;
  for (const BatchColumn& bc : batch->columns) {
    // Writable: a batch's buffers belong to it alone once handed out, so
    // the consumer may write into them (normalise in place) and
    // torch.from_numpy / DLPack take them without a copy.
    format::Column c = bc.View(batch->num_rows, owner);
    columns[py::str(bc.name)] = ColumnToPython(c, /*writable=*/true);
    const int fi = schema.FieldIndex(bc.name);
    format::Field f = fi >= 0 ? schema.fields[static_cast<size_t>(fi)] : format::Field{bc.name, bc.type, true};
    f.type = bc.type;  // a transform may have changed it (decoded images)
    f.nullable = f.nullable || !c.validity.empty();
    arrow.schema.fields.push_back(std::move(f));
    arrow.columns.push_back(std::move(c));
  }
  return py::make_tuple(batch->epoch, batch->position, std::move(columns), CopyVector(batch->indices),
                        CopyVector(batch->tables), WrapBatch(std::move(arrow)));
}

py::dict StatsToPython(const LoaderStats& s) {
  py::dict d;
  d["batches"] = s.batches;
  d["rows"] = s.rows;
  d["bytes"] = s.bytes;
  d["pages_fetched"] = s.pages_fetched;
  d["page_cache_hits"] = s.page_cache_hits;
  d["page_views"] = s.page_views;
  d["uring_pages"] = s.uring_pages;
  d["uring_batches"] = s.uring_batches;
  d["uring_unavailable"] = s.uring_unavailable;
  d["page_bytes_fetched"] = s.page_bytes_fetched;
  d["io_seconds"] = s.io_seconds;
  d["decode_seconds"] = s.decode_seconds;
  d["assemble_seconds"] = s.assemble_seconds;
  d["consumer_wait_seconds"] = s.consumer_wait_seconds;
  d["idle_seconds"] = s.idle_seconds;
  d["readahead_batches"] = s.readahead_batches;
  d["skipped_rows"] = s.skipped_rows;
  d["transform_seconds"] = s.transform_seconds;
  d["indexed_images"] = s.indexed_images;
  return d;
}

// ImageOptions from the dict flywheel.transforms.DecodeImage builds (keys as
// there; unknown keys are a ValueError).
loader::ImageOptions ImageOptionsFrom(const std::string& column, const py::dict& d) {
  loader::ImageOptions o;
  for (auto item : d) {
    const std::string k = py::str(item.first);
    py::handle v = item.second;
    if (k == "height") o.height = v.cast<int>();
    else if (k == "width") o.width = v.cast<int>();
    else if (k == "crop") {
      const std::string c = v.cast<std::string>();
      if (c == "random_resized") o.crop = loader::CropMode::kRandomResized;
      else if (c == "center") o.crop = loader::CropMode::kCenter;
      else if (c == "full") o.crop = loader::CropMode::kFull;
      else throw py::value_error("DecodeImage('" + column + "'): crop='" + c + "': expected 'random_resized', 'center' or 'full'");
    } else if (k == "scale") {
      auto t = v.cast<std::pair<double, double>>();
      o.min_scale = t.first;
      o.max_scale = t.second;
    } else if (k == "ratio") {
      auto t = v.cast<std::pair<double, double>>();
      o.min_ratio = t.first;
      o.max_ratio = t.second;
    } else if (k == "max_attempts") o.max_attempts = v.cast<int>();
    else if (k == "center_fraction") o.center_fraction = v.cast<double>();
    else if (k == "flip") o.flip_probability = v.cast<double>();
    else if (k == "layout") {
      const std::string l = v.cast<std::string>();
      if (l == "hwc") o.layout = loader::ImageLayout::kHWC;
      else if (l == "chw") o.layout = loader::ImageLayout::kCHW;
      else throw py::value_error("DecodeImage('" + column + "'): layout='" + l + "': expected 'hwc' or 'chw'");
    } else if (k == "dtype") {
      const std::string t = v.cast<std::string>();
      if (t == "uint8") o.dtype = loader::PixelType::kUint8;
      else if (t == "float32") o.dtype = loader::PixelType::kFloat32;
      else throw py::value_error("DecodeImage('" + column + "'): dtype='" + t + "': expected 'uint8' or 'float32'");
    } else if (k == "mean") o.mean = v.cast<std::array<float, 3>>();
    else if (k == "std") o.std = v.cast<std::array<float, 3>>();
    else if (k == "max_pixels") o.max_pixels = v.cast<int64_t>();
    else if (k == "scaled_decode") o.scaled_decode = v.cast<bool>();
    else if (k == "fast_dct") o.fast_dct = v.cast<bool>();
    else if (k == "fast_upsample") o.fast_upsample = v.cast<bool>();
    else if (k == "allow_warnings") o.allow_warnings = v.cast<bool>();
    else if (k == "crop_decode") o.crop_decode = v.cast<bool>();
    else if (k == "index_cache_mb") o.index_cache_mb = v.cast<int64_t>();
    else if (k == "fast_huffman") o.fast_huffman = v.cast<bool>();
    else throw py::value_error("DecodeImage('" + column + "'): unknown option '" + k + "'");
  }
  return o;
}

py::dict PackTokens(py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
                    py::array_t<int32_t, py::array::c_style | py::array::forcecast> values, int64_t seq_len,
                    bool split_documents, std::optional<int32_t> eos_token, int32_t pad_token,
                    bool positions_continue) {
  loader::PackingOptions o;
  o.seq_len = seq_len;
  o.split_documents = split_documents;
  o.eos_token = eos_token;
  o.pad_token = pad_token;
  o.positions_continue_across_blocks = positions_continue;
  std::span<const int64_t> off(offsets.data(), static_cast<size_t>(offsets.size()));
  std::span<const int32_t> val(values.data(), static_cast<size_t>(values.size()));
  // Pack without the GIL, then take the blocks straight into numpy arrays.
  std::unique_ptr<loader::TokenPacker> packer;
  {
    py::gil_scoped_release nogil;
    packer = ValueOrThrow(loader::TokenPacker::Create(o));
    ThrowIfError(packer->Add(off, val));
    packer->Finish();
  }
  const py::ssize_t k = packer->ready(), L = seq_len;
  py::array_t<int32_t> tokens({k, L}), segment_ids({k, L}), positions({k, L});
  py::array_t<uint8_t> mask({k, L});
  py::array_t<int64_t> first_document(k);
  const loader::PackedBlocksView view{tokens.mutable_data(), segment_ids.mutable_data(),
                                      positions.mutable_data(), mask.mutable_data(),
                                      first_document.mutable_data()};
  {
    py::gil_scoped_release nogil;
    packer->Take(k, view);
  }
  const int64_t truncated = packer->truncated_tokens();
  py::dict d;
  d["tokens"] = tokens;
  d["segment_ids"] = segment_ids;
  d["positions"] = positions;
  d["mask"] = mask;
  d["first_document"] = first_document;
  d["truncated_tokens"] = truncated;
  return d;
}

std::unique_ptr<Loader> OpenLoader(const std::vector<std::tuple<std::string, std::optional<int64_t>,
                                                                std::optional<std::string>>>& tables,
                                   const std::vector<std::string>& columns, int64_t batch_size, bool shuffle,
                                   const std::string& shuffle_mode, int64_t block_rows, int64_t window_blocks,
                                   uint64_t seed, int64_t epoch, int rank, int world_size, bool drop_last,
                                   int num_threads, int64_t prefetch_bytes,
                                   const std::vector<double>& mixture_weights, int64_t samples_per_epoch,
                                   const std::vector<std::pair<std::string, py::dict>>& images,
                                   const std::string& on_error, bool use_io_uring,
                                   int64_t consumer_spin_us, std::shared_ptr<catalog::ReadGuard> guard) {
  std::vector<TableRef> refs;
  for (const auto& [uri, version, tag] : tables) refs.push_back(TableRef{uri, version, tag});
  LoaderOptions o;
  o.columns = columns;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.shuffle_mode = ValueOrThrow(loader::ParseShuffleMode(shuffle_mode));
  o.block_rows = block_rows;
  o.window_blocks = window_blocks;
  o.seed = seed;
  o.epoch = epoch;
  o.rank = rank;
  o.world_size = world_size;
  o.drop_last = drop_last;
  o.num_threads = num_threads;
  o.prefetch_bytes = prefetch_bytes;
  o.mixture_weights = mixture_weights;
  o.samples_per_epoch = samples_per_epoch;
  o.use_io_uring = use_io_uring;
  o.consumer_spin_us = consumer_spin_us;
  o.batch_transform = std::move(guard);  // the catalog's column rules, applied in every Next
  for (const auto& [column, options] : images) {
    o.images.push_back(loader::ImageColumn{column, ImageOptionsFrom(column, options)});
  }
  if (on_error == "fail") o.on_error = loader::OnError::kFail;
  else if (on_error == "skip") o.on_error = loader::OnError::kSkip;
  else throw py::value_error("on_error='" + on_error + "': expected 'fail' or 'skip'");
  py::gil_scoped_release nogil;
  return ValueOrThrow(Loader::Open(refs, o));
}

}  // namespace

void RegisterLoader(py::module_& m) {
  py::class_<Loader>(m, "Loader")
      .def_static("open", &OpenLoader, py::arg("tables"), py::arg("columns"), py::arg("batch_size"),
                  py::arg("shuffle"), py::arg("shuffle_mode"), py::arg("block_rows"), py::arg("window_blocks"),
                  py::arg("seed"), py::arg("epoch"), py::arg("rank"), py::arg("world_size"), py::arg("drop_last"),
                  py::arg("num_threads"), py::arg("prefetch_bytes"), py::arg("mixture_weights"),
                  py::arg("samples_per_epoch"), py::arg("images"), py::arg("on_error"),
                  py::arg("use_io_uring"), py::arg("consumer_spin_us") = -1, py::arg("guard") = py::none())
      .def(
          "next",
          [](Loader& l, std::optional<double> timeout_s) -> py::object {
            const absl::Duration timeout =
                timeout_s ? absl::Seconds(*timeout_s) : absl::InfiniteDuration();
            std::shared_ptr<const Batch> batch;
            {
              py::gil_scoped_release nogil;
              batch = ValueOrThrow(l.Next(timeout));
            }
            if (!batch) return py::none();
            return BatchToPython(std::move(batch), l.schema());
          },
          py::arg("timeout") = py::none())
      .def("state", [](const Loader& l) { return l.state().ToJson(); })
      .def("restore",
           [](Loader& l, const std::string& json) {
             loader::LoaderState s = ValueOrThrow(loader::LoaderState::FromJson(json));
             py::gil_scoped_release nogil;
             ThrowIfError(l.Restore(s));
           })
      .def("set_epoch",
           [](Loader& l, int64_t epoch) {
             py::gil_scoped_release nogil;
             ThrowIfError(l.SetEpoch(epoch));
           })
      .def("cancel", &Loader::Cancel)
      .def("stats", [](const Loader& l) { return StatsToPython(l.stats()); })
      .def("schema",
           [](const Loader& l) {
             py::list out;
             for (const format::Field& f : l.schema().fields) {
               out.append(py::make_tuple(f.name, f.type.ToString(), f.nullable));
             }
             return out;
           })
      .def("batches_per_epoch", &Loader::batches_per_epoch)
      .def("epoch_size", &Loader::epoch_size);
  m.def("metrics_text", [] { return Metrics().ExpositionText(); },
        "Prometheus text exposition of the process's flywheel metrics");
  m.def("pack_tokens", &PackTokens, py::arg("offsets"), py::arg("values"), py::arg("seq_len"),
        py::arg("split_documents"), py::arg("eos_token"), py::arg("pad_token"), py::arg("positions_continue"));
}

}  // namespace flywheel::python
