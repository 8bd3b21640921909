// modelmem._modelmem: the extension behind the `modelmem` package (python/modelmem/).
#include <pybind11/stl.h>

#include "common.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/monitor/reader.hpp"

namespace modelmem::python {
namespace {

py::dict config_dict(const std::string& text) {
  config::Config c;
  try {
    c = config::parse_config(text);
  } catch (const InvalidInput& e) {
    raise("ConfigError", e.what());
  }
  py::dict d;
  for (const auto& [k, v] : c.values) d[py::str(k)] = v;
  return d;
}

py::list info() {
  monitor::publish_now();  // this process's own pools as they are now
  monitor::Scan scan;
  {
    py::gil_scoped_release nogil;
    scan = monitor::scan();
  }
  py::list out;
  for (const auto& p : scan.processes) {
    py::list pools;
    for (const auto& s : p.pools) {
      py::dict d;
      d["name"] = s.name;
      d["device"] = s.device;
      d["strategy"] = s.strategy;
      d["budget"] = s.budget;
      d["reserved"] = s.reserved;
      d["allocated"] = s.allocated;
      d["peak_allocated"] = s.peak_allocated;
      d["peak_reserved"] = s.peak_reserved;
      d["requested"] = s.requested;
      d["largest_free_block"] = s.largest_free_block;
      d["fragmentation"] = s.fragmentation;
      d["oom_count"] = s.oom_count;
      d["alloc_retries"] = s.alloc_retries;
      d["alloc_count"] = s.alloc_count;
      d["segments"] = s.segments;
      d["warning"] = s.warning;
      pools.append(d);
    }
    py::dict proc;
    proc["pid"] = p.pid;
    proc["process"] = p.process_name;
    proc["segment"] = p.segment;
    proc["update_count"] = p.update_count;
    proc["pools"] = pools;
    out.append(proc);
  }
  return out;
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
  m.def("info", &info,
        R"(The processes and pools the monitor sees (what `modelmem info` shows): a list of dicts
with pid, process and pools (name, device, strategy, budget, reserved, allocated, ...).)");
  bind_plans(m);
  bind_traces(m);
  bind_torch(m);
}
