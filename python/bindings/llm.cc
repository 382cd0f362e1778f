// flywheel._core.llm: the rollout engine (src/flywheel/llm/engine.h) for
// flywheel.llm.Engine. Every call that computes releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "flywheel/llm/engine.h"
#include "status.h"

namespace py = pybind11;

namespace flywheel::python {
namespace {

using llm::Completion;
using llm::Engine;
using llm::EngineOptions;
using llm::GenerationRequest;
using llm::SamplingParams;

py::dict ToDict(const Completion& c) {
  py::dict d;
  d["request_id"] = c.request_id;
  d["sample"] = c.sample;
  d["tokens"] = c.tokens;
  d["logprobs"] = c.logprobs;
  d["versions"] = c.versions;
  d["finish_reason"] = llm::FinishReasonName(c.finish);
  d["error"] = c.error;
  d["preemptions"] = c.preemptions;
  d["queue_seconds"] = c.queue_seconds;
  d["first_token_seconds"] = c.first_token_seconds;
  d["total_seconds"] = c.total_seconds;
  return d;
}

SamplingParams Params(int64_t max_new_tokens, double temperature, int64_t top_k, double top_p, int64_t n, uint64_t seed,
                      std::vector<int64_t> stop_ids, bool ignore_eos, bool abort_on_weight_update) {
  SamplingParams p;
  p.max_new_tokens = max_new_tokens;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.n = n;
  p.seed = seed;
  p.stop_ids = std::move(stop_ids);
  p.ignore_eos = ignore_eos;
  p.abort_on_weight_update = abort_on_weight_update;
  return p;
}

}  // namespace

void RegisterLlm(py::module_& m) {
  py::module_ sub = m.def_submodule("llm", "the rollout engine (flywheel.llm.Engine)");
  py::class_<Engine>(sub, "Engine")
      .def(py::init([](const std::string& dir, const std::string& dtype, int64_t kv_cache_bytes, int block_tokens,
                       int64_t max_step_tokens, int64_t max_running, int threads, const std::string& isa,
                       bool recompute_on_swap, int64_t version) {
             EngineOptions o;
             if (dtype == "bf16" || dtype == "bfloat16") {
               o.weight_dtype = llm::DType::kBF16;
             } else if (dtype == "int8") {
               o.weight_dtype = llm::DType::kI8;
             } else if (dtype != "f32" && dtype != "float32") {
               ThrowIfError(absl::InvalidArgumentError("dtype must be f32, bf16 or int8, got '" + dtype + "'"));
             }
             o.kv_cache_bytes = kv_cache_bytes;
             o.block_tokens = block_tokens;
             o.max_step_tokens = max_step_tokens;
             o.max_running = max_running;
             o.threads = threads;
             o.isa = isa;
             o.recompute_on_swap = recompute_on_swap;
             Result<std::unique_ptr<Engine>> e = [&] {
               py::gil_scoped_release release;
               return Engine::Open(dir, o, version);
             }();
             return ValueOrThrow(std::move(e));
           }),
           py::arg("checkpoint"), py::arg("dtype") = "f32", py::arg("kv_cache_bytes") = int64_t{512} << 20,
           py::arg("block_tokens") = 16, py::arg("max_step_tokens") = 256, py::arg("max_running") = 256,
           py::arg("threads") = 0, py::arg("isa") = "", py::arg("recompute_on_swap") = false, py::arg("version") = 0)
      .def(
          "generate",
          [](Engine& e, const std::vector<std::vector<int64_t>>& prompts, int64_t max_new_tokens, double temperature,
             int64_t top_k, double top_p, int64_t n, uint64_t seed, std::vector<int64_t> stop_ids, bool ignore_eos) {
            std::vector<GenerationRequest> reqs;
            for (size_t i = 0; i < prompts.size(); ++i) {
              // One seed per prompt: seed + i, so prompts draw independently.
              reqs.push_back({prompts[i], Params(max_new_tokens, temperature, top_k, top_p, n, seed + i, stop_ids,
                                                 ignore_eos, false)});
            }
            std::vector<Completion> out;
            {
              py::gil_scoped_release release;
              out = e.Generate(reqs);
            }
            py::list l;
            for (const Completion& c : out) l.append(ToDict(c));
            return l;
          },
          py::arg("prompts"), py::arg("max_new_tokens") = 16, py::arg("temperature") = 1.0, py::arg("top_k") = 0,
          py::arg("top_p") = 1.0, py::arg("n") = 1, py::arg("seed") = 0, py::arg("stop_ids") = std::vector<int64_t>{},
          py::arg("ignore_eos") = false)
      .def(
          "submit",
          [](Engine& e, std::vector<int64_t> prompt, int64_t max_new_tokens, double temperature, int64_t top_k,
             double top_p, int64_t n, uint64_t seed, std::vector<int64_t> stop_ids, bool ignore_eos,
             bool abort_on_weight_update) {
            return ValueOrThrow(e.Submit({std::move(prompt), Params(max_new_tokens, temperature, top_k, top_p, n, seed,
                                                                    std::move(stop_ids), ignore_eos,
                                                                    abort_on_weight_update)}));
          },
          py::arg("prompt"), py::arg("max_new_tokens") = 16, py::arg("temperature") = 1.0, py::arg("top_k") = 0,
          py::arg("top_p") = 1.0, py::arg("n") = 1, py::arg("seed") = 0, py::arg("stop_ids") = std::vector<int64_t>{},
          py::arg("ignore_eos") = false, py::arg("abort_on_weight_update") = false)
      .def("step",
           [](Engine& e) {
             Status s;
             {
               py::gil_scoped_release release;
               s = e.Step();
             }
             ThrowIfError(s);
           })
      .def("idle", &Engine::Idle)
      .def("take_finished",
           [](Engine& e) {
             py::list l;
             for (const Completion& c : e.TakeFinished()) l.append(ToDict(c));
             return l;
           })
      .def(
          "update_weights",
          [](Engine& e, const std::string& dir, int64_t version) {
            Status s;
            {
              py::gil_scoped_release release;
              s = e.UpdateWeights(dir, version);
            }
            ThrowIfError(s);
          },
          py::arg("checkpoint"), py::arg("version"))
      .def(
          "update_weights_from_arrays",
          [](Engine& e, const py::dict& arrays, int64_t version) {
            // Views of the arrays (float32, float16 or bfloat16 as uint16 is
            // not accepted: numpy has no bfloat16), read during the call.
            std::vector<llm::TensorView> views;
            std::vector<py::array> keep;
            views.reserve(arrays.size());
            for (const auto& [k, v] : arrays) {
              py::array a = py::array::ensure(v, py::array::c_style);
              const std::string name = py::cast<std::string>(k);
              if (!a) throw py::type_error("tensor '" + name + "': expected an array");
              llm::TensorView t;
              t.name = name;
              if (a.dtype().kind() == 'f' && a.itemsize() == 4) {
                t.dtype = llm::DType::kF32;
              } else if (a.dtype().kind() == 'f' && a.itemsize() == 2) {
                t.dtype = llm::DType::kF16;
              } else {
                throw py::type_error("tensor '" + name + "': dtype must be float32 or float16");
              }
              t.shape.assign(a.shape(), a.shape() + a.ndim());
              t.data = static_cast<const uint8_t*>(a.data());
              t.bytes = static_cast<uint64_t>(a.nbytes());
              views.push_back(std::move(t));
              keep.push_back(std::move(a));
            }
            std::vector<const llm::TensorView*> ptrs;
            for (const auto& t : views) ptrs.push_back(&t);
            Status s;
            {
              py::gil_scoped_release release;
              s = e.UpdateWeights(ptrs, version);
            }
            ThrowIfError(s);
          },
          py::arg("arrays"), py::arg("version"))
      .def_property_readonly("weight_version", &Engine::weight_version)
      .def("prompt_logits",
           [](Engine& e, const std::vector<std::vector<int64_t>>& prompts) {
             Result<std::vector<std::vector<float>>> r;
             {
               py::gil_scoped_release release;
               r = e.PromptLogits(prompts);
             }
             auto rows = ValueOrThrow(std::move(r));
             const int64_t vocab = e.config().vocab_size;
             py::list out;
             for (auto& v : rows) {
               py::array_t<float> a({static_cast<int64_t>(v.size()) / vocab, vocab});
               std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(float));
               out.append(a);
             }
             return out;
           })
      .def("stats",
           [](const Engine& e) {
             const llm::EngineStats s = e.stats();
             py::dict d;
             d["steps"] = s.steps;
             d["tokens_generated"] = s.tokens_generated;
             d["tokens_prefilled"] = s.tokens_prefilled;
             d["preemptions"] = s.preemptions;
             d["blocks_total"] = s.blocks_total;
             d["blocks_free"] = s.blocks_free;
             d["running"] = s.running;
             d["waiting"] = s.waiting;
             d["weight_version"] = s.weight_version;
             d["kernels"] = e.kernels_name();
             return d;
           })
      .def_property_readonly("vocab_size", [](const Engine& e) { return e.config().vocab_size; })
      .def_property_readonly("max_position", [](const Engine& e) { return e.config().max_position; });
}

}  // namespace flywheel::python
