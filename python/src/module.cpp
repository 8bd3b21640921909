// modelmem._modelmem: the extension behind the `modelmem` package (python/modelmem/).
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/monitor/reader.hpp"
#include "modelmem/monitor/render.hpp"
#include "modelmem/monitor/view.hpp"

namespace modelmem::python {
namespace {

py::dict config_dict(const std::string& text) {
  const config::Config c = parse_config(text);
  py::dict d;
  for (const auto& [k, v] : c.values) d[py::str(k)] = v;
  return d;
}

// What `modelmem config STRING` prints, by the library's own report.
std::string config_report(const std::string& text) {
  try {
    return config::config_report(text, "the argument");
  } catch (const InvalidInput& e) {
    raise("ConfigError", e.what());
  }
}

// What `modelmem info` prints (format "table", "json" or "prometheus"), through the library's
// own view and renderers: the CLI and the package show the same.
std::string info_report(const std::string& format, bool devices, std::optional<std::int64_t> pid) {
  monitor::publish_now();  // this process's own pools as they are now
  monitor::MachineView view;
  {
    py::gil_scoped_release nogil;
    monitor::ScanOptions options;
    options.pid = pid;
    view = monitor::look(options, devices);
  }
  return monitor::info_report(view, format);
}

// The processes of `modelmem info --json`, as Python objects.
py::object info() {
  return json_loads(info_report("json", false, std::nullopt))["processes"];
}

}  // namespace
}  // namespace modelmem::python

PYBIND11_MODULE(_modelmem, m) {
  using namespace modelmem::python;
  m.doc() = "modelmem's C++ library (use the modelmem package, not this module).";
  register_errors(m);
  m.def("config", &config_dict, py::arg("config"),
        R"(The effective value of every configuration key for a config string
("strategy:planned,huge_pages:True", as MODELMEM_ALLOC_CONF). Raises ConfigError (a ValueError)
naming the key for an unknown key or a bad value.)");
  m.def(
      "config_keys",
      [] {
        py::list out;
        for (const auto& k : modelmem::config::config_keys()) {
          py::dict d;
          d["name"] = k.name;
          d["default"] = k.default_value;
          d["values"] = k.values;
          d["meaning"] = k.meaning;
          out.append(d);
        }
        return out;
      },
      "Every configuration key with its default, accepted values and meaning.");
  m.def("config_report", &config_report, py::arg("config"),
        R"(What `modelmem config CONFIG` prints: every key's effective value (* = given), the stack
the string builds, the virtual-memory probe, the fallback taken and the allocator. Raises
ConfigError (an InvalidInputError) for a string the parser or the factory rejects as bad input,
naming the key; UnsupportedError or OutOfMemoryError for the factory's other refusals.)");
  m.def("info", &info,
        R"(The processes and pools the monitor sees: the "processes" of `modelmem info --json`, a
list of dicts with pid, process, command, segment, updates, ... and pools (pool, device, strategy,
budget, reserved, allocated, peak_allocated, ...). This process's own pools are published first.)");
  m.def("info_report", &info_report, py::arg("format") = "table", py::arg("devices") = true,
        py::arg("pid") = py::none(),
        R"(What `modelmem info` prints: format "table" (the default), "json" or "prometheus";
devices=False skips the accelerators, pid keeps one process.)");
  bind_plans(m);
  bind_traces(m);
  bind_torch(m);
  bind_logger(m);
  bind_place(m);
  bind_serving(m);
  bind_device(m);
}
