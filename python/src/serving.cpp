// modelmem.plan_serving(): the serving plan of a decoder LLM (`modelmem plan --serve`), as the
// dict of its --json output, from the library's own renderer.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/kv_cache.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/sizing/serving.hpp"

namespace modelmem::python {
namespace {

std::size_t size_of(const py::object& v, const std::string& what) {
  if (py::isinstance<py::int_>(v)) {
    const long long n = v.cast<long long>();
    if (n < 0) throw InvalidInput(what + ": must not be negative");
    return static_cast<std::size_t>(n);
  }
  return parse_size(py::str(v).cast<std::string>(), what);
}

py::object plan_serving(const std::filesystem::path& model, const py::object& device_memory,
                        std::int64_t context, std::int64_t block_size,
                        std::int64_t max_batched_tokens, std::int64_t max_num_seqs,
                        const std::optional<std::string>& dtype,
                        const std::optional<std::string>& kv_dtype, int tp,
                        const py::object& overhead,
                        const std::optional<std::filesystem::path>& lengths,
                        std::optional<double> mean_context, const std::vector<std::string>& kv,
                        const std::optional<std::filesystem::path>& onnx,
                        const std::string& runtime, const std::optional<std::string>& strategy,
                        const std::string& device_kind, const std::vector<std::string>& kv_window,
                        const std::optional<std::string>& engine, bool ignore_model_limits) {
  sizing::ServeOptions o;
  o.device_memory = size_of(device_memory, "device_memory");
  o.context = context;
  o.block_size = block_size;
  o.max_batched_tokens = max_batched_tokens;
  o.max_num_seqs = max_num_seqs;
  o.dtype = dtype.value_or("");
  o.kv_dtype = kv_dtype.value_or("");
  o.tp = tp;
  if (!overhead.is_none())
    o.overhead = py::isinstance<py::int_>(overhead) ? std::to_string(size_of(overhead, "overhead"))
                                                    : py::str(overhead).cast<std::string>();
  o.strategy = strategy.value_or("");
  o.backend = sizing::parse_backend(device_kind);
  if (lengths) o.lengths_path = lengths->string();
  o.mean_context = mean_context;
  for (const auto& k : kv) o.kv_pairs.push_back(model::parse_kv_pair(k));
  for (const auto& w : kv_window) o.kv_windows.push_back(model::parse_kv_window(w));
  if (onnx) o.onnx = onnx->string();
  o.runtime = runtime;
  o.engine = engine.value_or("");
  o.ignore_model_limits = ignore_model_limits;
  std::string text;
  {
    py::gil_scoped_release nogil;
    text = sizing::render_json_text(sizing::plan_serving(model.string(), o));
  }
  return json_loads(text);
}

}  // namespace

void bind_serving(py::module_& m) {
  m.def(
      "plan_serving", &plan_serving, py::arg("model"), py::arg("device_memory"),
      py::arg("context") = 0, py::arg("block_size") = 16, py::arg("max_batched_tokens") = 8192,
      py::arg("max_num_seqs") = 256, py::arg("dtype") = py::none(),
      py::arg("kv_dtype") = py::none(), py::arg("tp") = 1, py::arg("overhead") = py::none(),
      py::arg("lengths") = py::none(), py::arg("mean_context") = py::none(),
      py::arg("kv") = std::vector<std::string>{}, py::arg("onnx") = py::none(),
      py::arg("runtime") = "eager", py::arg("strategy") = py::none(),
      py::arg("device_kind") = "cuda", py::arg("kv_window") = std::vector<std::string>{},
      py::arg("engine") = py::none(), py::arg("ignore_model_limits") = false,
      R"(The serving plan of a decoder LLM (what `modelmem plan --serve MODEL` prints), as the dict
of its --json: weights_bytes, activation_bytes (decode_ and prefill_activation_bytes),
kv_bytes_per_token, kv_tokens, max_concurrency, max_context, engines (per engine, a dict of
setting -> value) and the rest. model: an ONNX decoder exported with its KV cache or a Hugging
Face checkpoint folder; device_memory: bytes or "64GiB"; context 0: the model's max positions
(an export's position table rows, else 8192), never more unless ignore_model_limits; engine:
one engine's settings ("vllm", "sglang", "tensorrt_llm"; None: all); kv: ["INPUT=OUTPUT", ...] names the KV pairs of an export; kv_window: ["N"] or ["NAME=N", ...]
gives sliding windows (else found in the export's graph); onnx: with a
checkpoint, the export its step activations are planned from; strategy, overhead and
device_kind as for plan(): the weights and the steps are sized on the strategy that serves them
(need_bytes), the overhead defaults per device kind (cuda 1 GiB). Raises InvalidInputError for a bad
model or argument, or when nothing is left for the KV cache.)");
}

}  // namespace modelmem::python
