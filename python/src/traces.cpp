// modelmem.Trace: reading traces (modelmem CSV, the shared PyTorch traces, PyTorch / torch_npu
// snapshot pickles), their analysis, replay under a config, and the Perfetto / HTML exports.
#include <fmt/format.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/export.hpp"
#include "modelmem/trace/replay.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "modelmem/trace/trace.hpp"
#include "modelmem/trace/viz.hpp"
#include "py_trace.hpp"

namespace modelmem::python {

namespace {

py::object json_to_python(const nlohmann::json& j) {
  return json_loads(j.dump());
}

std::ofstream open_out(const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InvalidInput(fmt::format("{}: cannot open for writing", path));
  return out;
}

void finish(std::ofstream& out, const std::string& path) {
  out.flush();
  if (!out) throw Error(fmt::format("{}: write failed", path));
}

py::dict replay_dict(const trace::ReplayResult& r) {
  py::dict d;
  d["strategy"] = r.strategy;
  d["description"] = r.description;
  d["allocs"] = r.allocs;
  d["frees"] = r.frees;
  d["peak_live"] = r.peak_live;
  d["peak_allocated"] = r.peak_allocated;
  d["peak_reserved"] = r.peak_reserved;
  d["reserved_per_live"] = r.reserved_per_live();
  d["fragmentation_at_peak"] = r.fragmentation_at_peak;
  d["device_calls"] = r.device_calls;
  d["mean_ns"] = r.mean_ns;
  d["p99_ns"] = r.p99_ns;
  d["ooms"] = r.ooms;
  d["skipped_frees"] = r.skipped_frees;
  d["notes"] = r.notes;
  return d;
}

}  // namespace

std::shared_ptr<PyAnalysis> analyze_trace(const trace::Trace& t, const std::string& solver,
                                          double time_limit) {
  if (!(time_limit > 0)) throw InvalidInput("time_limit must be a positive number of seconds");
  trace::AnalyzeOptions options;
  options.solver = solver;
  options.time_limit_s = time_limit;
  py::gil_scoped_release nogil;
  return std::make_shared<PyAnalysis>(
      PyAnalysis{trace::analyze(t, options), trace::allocation_sites(t)});
}

void bind_traces(py::module_& m) {
  py::class_<trace::Advice>(m, "Advice", "One finding of Trace.analyze() and what to do about it.")
      .def_readonly("topic", &trace::Advice::topic)
      .def_readonly("message", &trace::Advice::message)
      .def_readonly("config", &trace::Advice::config,
                    "a complete config string modelmem.config accepts (empty when none)")
      .def_readonly("mindspore", &trace::Advice::mindspore,
                    "for a MindSpore memory-tracker file, the static pool as "
                    "mindspore.runtime.set_memory(...) (empty otherwise)")
      .def("__repr__", [](const trace::Advice& a) {
        return fmt::format("<Advice {}: {}>", a.topic, a.message);
      });
  py::class_<trace::StepStats>(m, "StepStats", "One step of a trace (marked or detected).")
      .def_property_readonly("begin", [](const trace::StepStats& s) { return s.window.begin; })
      .def_property_readonly("end", [](const trace::StepStats& s) { return s.window.end; })
      .def_readonly("allocs", &trace::StepStats::allocs)
      .def_readonly("bytes_allocated", &trace::StepStats::bytes_allocated)
      .def_readonly("peak_live", &trace::StepStats::peak_live)
      .def_readonly("live_in", &trace::StepStats::live_in)
      .def_readonly("group", &trace::StepStats::group)
      .def_readonly("common_size", &trace::StepStats::common_size)
      .def("__repr__", [](const trace::StepStats& s) {
        return fmt::format("<StepStats events {}..{} allocs={} peak_live={}>", s.window.begin,
                           s.window.end, s.allocs, s.peak_live);
      });
  py::class_<trace::AllocationSite>(m, "AllocationSite",
                                    "Allocations of one site (a snapshot frame, a logged caller).")
      .def_readonly("site", &trace::AllocationSite::site)
      .def_readonly("allocs", &trace::AllocationSite::allocs)
      .def_readonly("bytes", &trace::AllocationSite::bytes)
      .def_readonly("live_at_end", &trace::AllocationSite::live_at_end)
      .def("__repr__", [](const trace::AllocationSite& s) {
        return fmt::format("<AllocationSite {}: {} allocs, {} B>", s.site, s.allocs, s.bytes);
      });
  py::class_<PyAnalysis, std::shared_ptr<PyAnalysis>>(
      m, "Analysis", "What a trace says about a program's memory (Trace.analyze()).")
      .def_property_readonly("advice", [](const PyAnalysis& h) { return h.analysis.advice; })
      .def_property_readonly("steps", [](const PyAnalysis& h) { return h.analysis.steps; })
      .def_property_readonly(
          "summary",
          [](const PyAnalysis& h) { return json_to_python(trace::to_json(h.analysis)["summary"]); },
          "the summary of `modelmem analyze --json` (to_dict()['summary']): one serialisation")
      .def_property_readonly(
          "sites", [](const PyAnalysis& h) { return h.sites; },
          "top allocation sites, most bytes first")
      .def_property_readonly("skipped", [](const PyAnalysis& h) { return h.analysis.skipped; })
      .def(
          "to_dict",
          [](const PyAnalysis& h) { return json_to_python(trace::to_json(h.analysis, h.sites)); },
          "The analysis as `modelmem analyze --json` prints it.")
      .def("__str__",
           [](const PyAnalysis& h) {
             auto* a = &h;
             return trace::to_text(a->analysis) + trace::sites_text(a->sites);
           })
      .def("__repr__", [](const PyAnalysis& h) {
        const auto& a = h.analysis;
        return fmt::format(
            "<modelmem.Analysis of {}: {} allocs, peak live {}, {} steps, {} advice>", a.name,
            a.allocs, format_bytes(a.peak_live), a.steps.size(), a.advice.size());
      });

  py::class_<trace::Trace, std::shared_ptr<trace::Trace>>(
      m, "Trace", "An allocation trace: modelmem CSV, the shared PyTorch traces or a snapshot.")
      .def_static(
          "load",
          [](const std::filesystem::path& path, bool skip_bad) {
            trace::ReadOptions o;
            o.skip_bad = skip_bad;
            py::gil_scoped_release nogil;
            return std::make_shared<trace::Trace>(trace::read_trace(path, o));
          },
          py::arg("path"), py::arg("skip_bad") = false,
          R"(Reads a trace: the modelmem trace CSV, the shared PyTorch traces, or a PyTorch /
torch_npu memory snapshot pickle (read safely: nothing in it is executed). A malformed line
raises ValueError naming file and line; skip_bad: skip such lines with a warning instead.)")
      .def_readonly("name", &trace::Trace::name)
      .def_readonly("warnings", &trace::Trace::warnings, "what reading skipped or found odd")
      .def_readonly("dropped", &trace::Trace::dropped, "events the recorder lost")
      .def("__len__", [](const trace::Trace& t) { return t.events.size(); })
      .def(
          "analyze",
          [](const trace::Trace& t, const std::string& solver, double time_limit) {
            return analyze_trace(t, solver, time_limit);
          },
          py::arg("solver") = "", py::arg("time_limit") = 2.0,
          "Summary, steps, advice with config keys and top allocation sites (`modelmem analyze`).")
      .def(
          "replay",
          [](const trace::Trace& t, const std::string& config, const py::object& repeat_arg,
             bool touch) {
            const std::size_t repeat =
                whole_arg(repeat_arg, "repeat", 1, trace::ReplayOptions::kMaxRepeat,
                          fmt::format("from 1 to {} replays", trace::ReplayOptions::kMaxRepeat));
            trace::check_repeat(repeat, trace::match_blocks(t).blocks.size());
            std::shared_ptr<alloc::Allocator> allocator;
            try {
              // A snapshot replays on its device, simulated: none of this machine's memory.
              allocator = trace::allocator_from_config(config, trace::replay_device(t, 0));
            } catch (const InvalidInput& e) {
              raise("ConfigError", e.what());
            }
            trace::ReplayOptions o;
            o.repeat = repeat;
            o.touch = touch && !t.snapshot;  // a snapshot's device memory is not the host's
            trace::ReplayResult r;
            {
              py::gil_scoped_release nogil;
              r = trace::replay(t, *allocator, o);
            }
            r.strategy = config;
            return replay_dict(r);
          },
          py::arg("config") = "", py::arg("repeat") = 1, py::arg("touch") = true,
          "Runs the trace through the allocator a config string builds; returns its statistics.")
      .def(
          "to_perfetto",
          [](const trace::Trace& t, const std::filesystem::path& fpath) {
            const std::string path = fpath.string();
            auto out = open_out(path);
            trace::write_perfetto_json(t, out);
            finish(out, path);
          },
          py::arg("path"), "Writes Chrome / Perfetto trace-event JSON (ui.perfetto.dev).")
      .def(
          "to_html",
          [](const trace::Trace& t, const std::filesystem::path& fpath, std::size_t max_blocks) {
            const std::string path = fpath.string();
            auto out = open_out(path);
            trace::VizOptions o;
            o.max_blocks = max_blocks;
            trace::write_viz_html(t, out, o);
            finish(out, path);
          },
          py::arg("path"), py::arg("max_blocks") = 200000,
          "Writes the self-contained HTML viewer (`modelmem viz`); sites show on hover.")
      .def(
          "save",
          [](const trace::Trace& t, const std::filesystem::path& fpath) {
            trace::write_csv(t, fpath);
          },
          py::arg("path"), "Writes the modelmem trace CSV.")
      .def("__repr__", [](const trace::Trace& t) {
        return fmt::format(
            "<modelmem.Trace {}: {} events{}>", t.name, t.events.size(),
            t.warnings.empty() ? "" : fmt::format(", {} warnings", t.warnings.size()));
      });
}

}  // namespace modelmem::python
