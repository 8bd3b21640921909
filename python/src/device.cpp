// modelmem.plan_device() and modelmem.fit(): several models sharing a device (each pool's quota
// its need on the strategy) and the largest value of a dim that fits, as `modelmem plan
// --device-memory` and `modelmem plan --fit` compute them (modelmem/sizing/plan_need.hpp,
// fit.hpp). to_json() writes what the CLI's --json writes, through the same renderers.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/sizing/fit.hpp"
#include "modelmem/sizing/plan_need.hpp"
#include "plan_args.hpp"

namespace modelmem::python {
namespace {

using sizing::DeviceNeed;
using sizing::FitResult;

/// The results of fit(..., each=True): one FitResult per model.
struct FitEach {
  std::vector<FitResult> results;
};

py::object write_or_return(const std::string& text, const py::object& path) {
  if (path.is_none()) return py::str(text);
  const std::string file =
      py::str(py::module_::import("os").attr("fspath")(path)).cast<std::string>();
  core::write_file_replacing(file, text);
  return py::none();
}

DeviceNeed plan_device(const py::object& paths, const py::object& device_memory,
                       const PlanArgs& args) {
  const std::vector<std::string> models = paths_arg(paths);
  const model::PlanOptions options = plan_options(args);
  const sizing::SizingOptions sizing = sizing_options(args);
  const std::size_t device = size_arg(device_memory, "--device-memory");
  sizing::validate(sizing, device);
  DeviceNeed out;
  run_interruptible([&] { out = sizing::plan_device(models, options, device, sizing); });
  return out;
}

py::object fit(const py::object& paths, const std::string& dim, const py::object& device_memory,
               bool each, std::int64_t max_value, const PlanArgs& args) {
  sizing::FitRequest r;
  r.models = paths_arg(paths);
  r.options = plan_options(args);
  r.sizing = sizing_options(args);
  r.device_memory = size_arg(device_memory, "--device-memory");
  r.dim = dim;
  r.max_value = max_value;
  if (each) {
    FitEach out;
    run_interruptible([&] { out.results = sizing::fit_each(r); });
    return py::cast(std::move(out));
  }
  FitResult out;
  run_interruptible([&] { out = sizing::fit(r); });
  return py::cast(std::move(out));
}

py::object device_or_none(const FitResult& f) {
  if (!f.found()) return py::none();
  return py::cast(f.at_value);
}

}  // namespace

void bind_device(py::module_& m) {
  py::class_<DeviceNeed>(m, "DevicePlan",
                         "Several models sharing a device (modelmem.plan_device()): each pool's "
                         "quota is its need on the strategy; the process adds the overhead once.")
      .def_property_readonly("device_memory_bytes",
                             [](const DeviceNeed& d) { return d.plan.device_memory; })
      .def_property_readonly(
          "runtime", [](const DeviceNeed& d) { return model::runtime_name(d.plan.runtime); },
          "whose allocation sequence the quotas are sized for")
      .def_property_readonly(
          "strategy",
          [](const DeviceNeed& d) { return d.needs.empty() ? "" : d.needs.front().strategy; })
      .def_property_readonly("fits", &DeviceNeed::fits,
                             "the verdict: the quotas and the overhead fit the device")
      .def_property_readonly("headroom_bytes", &DeviceNeed::headroom,
                             "device memory - total_bytes; negative when it does not fit")
      .def_property_readonly("total_ideal_bytes",
                             [](const DeviceNeed& d) { return d.plan.total_ideal; })
      .def_property_readonly("total_eager_bytes",
                             [](const DeviceNeed& d) { return d.plan.total_eager; })
      .def_property_readonly("total_quota_bytes",
                             [](const DeviceNeed& d) { return d.plan.total_quota; })
      .def_property_readonly("overhead_bytes", [](const DeviceNeed& d) { return d.overhead.bytes; })
      .def_property_readonly("overhead_source",
                             [](const DeviceNeed& d) { return d.overhead.source; })
      .def_readonly("total_bytes", &DeviceNeed::total, "the quotas + the overhead")
      .def_property_readonly(
          "models",
          [](const DeviceNeed& d) -> py::object {
            return json_loads(sizing::render_json(d).dump())["models"];
          },
          "One dict per model, as `plan -o` lists them: model, pool, weights_bytes, "
          "ideal_arena_bytes, eager_peak_bytes, need_bytes, quota_bytes, config, ...")
      .def_property_readonly(
          "configs",
          [](const DeviceNeed& d) {
            std::vector<std::string> out;
            for (std::size_t i = 0; i < d.plan.models.size(); ++i)
              out.push_back(d.plan.config_string(i));
            return out;
          },
          "each model's configuration string (MODELMEM_ALLOC_CONF for a process of its own)")
      .def_property_readonly(
          "config", [](const DeviceNeed& d) { return d.plan.config_string_all(); },
          "one configuration string for a process serving every model: pools:[name:MiB,...], "
          "which MODELMEM_ALLOC_CONF and modelmem.pool(name) take")
      .def(
          "report", [](const DeviceNeed& d) { return sizing::render_text(d); },
          "What `modelmem plan MODEL... --device-memory SIZE` prints.")
      .def(
          "to_json",
          [](const DeviceNeed& d, const py::object& path) {
            return write_or_return(sizing::render_json(d).dump(1) + "\n", path);
          },
          py::arg("path") = py::none(),
          "What `plan --device-memory SIZE -o FILE` writes: to path, or returned as a str.")
      .def("__repr__", [](const DeviceNeed& d) {
        return fmt::format(
            "<modelmem.DevicePlan {} models on {}: {}, headroom {}>", d.plan.models.size(),
            format_bytes(d.plan.device_memory), d.fits() ? "fits" : "does not fit",
            d.headroom() < 0 ? "-" + format_bytes(-d.headroom()) : format_bytes(d.headroom()));
      });

  py::class_<FitResult>(m, "Fit", "The largest value of a dim that fits (modelmem.fit()).")
      .def_readonly("dim", &FitResult::dim)
      .def_property_readonly(
          "model",
          [](const FitResult& f) -> py::object {
            return f.model.empty() ? py::object(py::none()) : py::str(f.model);
          },
          "the model (None: every model together)")
      .def_readonly("value", &FitResult::value, "the largest value that fits; 0 when 1 does not")
      .def_property_readonly("found", &FitResult::found)
      .def_readonly("need_bytes", &FitResult::need_bytes,
                    "total at value (the quotas and the overhead); 0 when nothing fits")
      .def_readonly("next_need_bytes", &FitResult::next_need_bytes,
                    "total at value + 1; 0 when the model stops it")
      .def_readonly("limit", &FitResult::limit,
                    "what stops it: 'memory', \"model: table 'T' has N rows (NODE)\", or "
                    "'search: ...'")
      .def_readonly("probes", &FitResult::probes, "plans made")
      .def_readonly("checked_above", &FitResult::checked_above,
                    "values above value + 1 planned too, none of which fits (list of int)")
      .def_readonly("not_monotone", &FitResult::not_monotone,
                    "'DIM=A fits although DIM=B does not' where the need fell with a larger "
                    "value; '' otherwise")
      .def_readonly("refused_below", &FitResult::refused_below,
                    "the smallest value below value planned that does not fit (so not every "
                    "value up to value fits); 0 when none was met, which proves nothing either")
      .def_readonly("every_value", &FitResult::every_value,
                    "the largest E such that every value from 1 to E was planned and fits (what "
                    "a server that batches dynamically takes); 0 when not searched")
      .def_readonly("every_complete", &FitResult::every_complete,
                    "True when every value from 1 to value fits (every_value == value)")
      .def_readonly("every_refused", &FitResult::every_refused,
                    "the first value above every_value that does not fit; 0 when none")
      .def_readonly("every_probes", &FitResult::every_probes,
                    "plans the every-value scan made beyond the search's")
      .def_readonly("every_peak_value", &FitResult::every_peak_value,
                    "among 1..every_value, the value whose need is the largest")
      .def_readonly("seconds", &FitResult::seconds)
      .def_property_readonly("device", &device_or_none,
                             "the DevicePlan at value (its quotas and configuration strings); "
                             "None when nothing fits")
      .def(
          "report", [](const FitResult& f) { return sizing::render_text(f); },
          "What `modelmem plan ... --fit DIM` prints.")
      .def(
          "to_json",
          [](const FitResult& f, const py::object& path) {
            return write_or_return(sizing::render_json(f).dump(1) + "\n", path);
          },
          py::arg("path") = py::none(),
          "What `plan --fit DIM -o FILE` writes: to path, or returned as a str.")
      .def("__repr__", [](const FitResult& f) {
        return fmt::format("<modelmem.Fit {}={} ({}), limit {}>", f.dim, f.value,
                           f.model.empty() ? "every model together" : f.model, f.limit);
      });

  py::class_<FitEach>(m, "FitEach", "Each model's largest value alone (modelmem.fit(each=True)).")
      .def_readonly("results", &FitEach::results, "one Fit per model")
      .def("__len__", [](const FitEach& e) { return e.results.size(); })
      .def("__getitem__",
           [](const FitEach& e, std::size_t i) {
             if (i >= e.results.size()) throw py::index_error();
             return e.results[i];
           })
      .def(
          "__iter__",
          [](const FitEach& e) { return py::make_iterator(e.results.begin(), e.results.end()); },
          py::keep_alive<0, 1>())
      .def(
          "report",
          [](const FitEach& e) {
            std::string out;
            for (const auto& f : e.results) out += sizing::render_text(f);
            return out;
          },
          "What `modelmem plan ... --fit DIM --fit-each` prints.")
      .def(
          "to_json",
          [](const FitEach& e, const py::object& path) {
            return write_or_return(sizing::render_json(e.results).dump(1) + "\n", path);
          },
          py::arg("path") = py::none(),
          "What `plan --fit DIM --fit-each -o FILE` writes: to path, or returned as a str.");

  m.def(
      "plan_device",
      [](const py::object& paths, const py::object& device_memory, const py::object& dims,
         const py::object& dtype, const std::string& runtime, const py::object& strategy,
         const py::object& overhead, const std::string& device_kind, bool keep_weights_dtype,
         std::optional<double> safety, const std::string& order, const std::string& solver,
         double time_limit, bool ignore_model_limits) {
        return plan_device(
            paths, device_memory,
            plan_args(dims, dtype, runtime, strategy, overhead, device_kind, keep_weights_dtype,
                      safety, order, solver, time_limit, ignore_model_limits));
      },
      py::arg("paths"), py::arg("device_memory"), py::arg("dims") = py::none(),
      py::arg("dtype") = py::none(), py::arg("runtime") = "eager", py::arg("strategy") = py::none(),
      py::arg("overhead") = py::none(), py::arg("device_kind") = "cuda",
      py::arg("keep_weights_dtype") = false, py::arg("safety") = py::none(),
      py::arg("order") = "stored", py::arg("solver") = "best", py::arg("time_limit") = 10.0,
      py::arg("ignore_model_limits") = false,
      R"(Shares a device among models, as `modelmem plan MODEL... --device-memory SIZE` does: each
model's pool gets its need on the strategy as quota, the process adds the overhead once.

paths: a model path or a list of them; device_memory: bytes (an int) or '16GiB'; dims apply to the
models that have them; the other arguments are plan()'s. Returns a DevicePlan: fits, headroom_bytes,
models (one dict per model), configs and config (the pools:[...] strings MODELMEM_ALLOC_CONF and
modelmem.pool(name) take), report(), to_json(). Raises InvalidInputError with the CLI's message.)");

  m.def(
      "fit",
      [](const py::object& paths, const std::string& dim, const py::object& device_memory,
         const py::object& dims, const py::object& dtype, const std::string& runtime,
         const py::object& strategy, const py::object& overhead, const std::string& device_kind,
         bool each, bool keep_weights_dtype, std::optional<double> safety, const std::string& order,
         const std::string& solver, double time_limit, std::int64_t max_value) {
        return fit(paths, dim, device_memory, each, max_value,
                   plan_args(dims, dtype, runtime, strategy, overhead, device_kind,
                             keep_weights_dtype, safety, order, solver, time_limit, false));
      },
      py::arg("paths"), py::arg("dim"), py::arg("device_memory"), py::arg("dims") = py::none(),
      py::arg("dtype") = py::none(), py::arg("runtime") = "eager", py::arg("strategy") = py::none(),
      py::arg("overhead") = py::none(), py::arg("device_kind") = "cuda", py::arg("each") = false,
      py::arg("keep_weights_dtype") = false, py::arg("safety") = py::none(),
      py::arg("order") = "stored", py::arg("solver") = "best", py::arg("time_limit") = 10.0,
      py::arg("max_value") = std::int64_t{1} << 24,
      R"(The largest value of dim (batch, seq, ...) whose need fits device_memory, as `modelmem plan
MODEL... --fit DIM --device-memory SIZE` finds it: exact plans at each probe, the value found fits
and the next one does not, or the model stops it (a position table's rows).

paths: a model path or a list (every model together; each=True: each model alone, --fit-each);
dims: the other dims (not dim); the other arguments are plan()'s. Returns a Fit (value, need_bytes,
next_need_bytes, limit, device: the DevicePlan at value) or, with each=True, a FitEach of them;
report() and to_json() print and write what the CLI does. Raises InvalidInputError with the CLI's
message.)");
}

}  // namespace modelmem::python
