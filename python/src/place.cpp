// modelmem.place(): many models on many devices (modelmem/sizing/placement.hpp), the Placement
// result object and the requests it emits (modelmem/sizing/requests.hpp): the library's code,
// as `modelmem place` runs it.
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <variant>

#include "common.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/sizing/placement.hpp"
#include "modelmem/sizing/requests.hpp"

namespace modelmem::python {
namespace {

using sizing::Placement;

Placement place(const std::variant<std::string, std::vector<std::string>>& models,
                const std::string& devices, const std::map<std::string, std::int64_t>& dims,
                const std::string& dtype, const std::optional<std::string>& runtime, int replicas,
                std::size_t exact_limit, bool templates, bool spread,
                const std::optional<std::string>& strategy,
                const std::optional<std::string>& overhead) {
  std::vector<sizing::ModelSpec> specs;
  if (const auto* file = std::get_if<std::string>(&models)) {
    if (!dims.empty() || dtype != "fp32" || runtime || replicas != 1)
      throw InvalidInput(
          "dims, dtype, runtime and replicas go with a list of ONNX files; a models file gives "
          "them per model");
    specs = sizing::read_models(*file);
  } else {
    specs = sizing::models_from_files(std::get<std::vector<std::string>>(models), dims, dtype,
                                      model::parse_runtime(runtime.value_or("eager")), replicas);
  }
  sizing::PlaceOptions o;
  o.strategy = strategy.value_or("");  // None: not given (as "", kept for old callers)
  o.overhead = overhead.value_or("");
  sizing::validate_sizing({}, o);
  o.exact_limit = exact_limit;
  o.templates = templates;
  o.spread = spread;
  const std::vector<sizing::Device> devs = sizing::devices_from(devices);
  Placement out;
  {
    py::gil_scoped_release nogil;
    out = sizing::place(specs, devs, o);
  }
  return out;
}

py::list replicas(const Placement& pl) {
  py::list out;
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const auto& r = pl.replicas[i];
    py::dict d;
    d["name"] = pl.replica_name(i);
    d["model"] = pl.models[r.model].name;
    d["number"] = r.number;
    d["device"] = r.device >= 0 ? py::object(py::str(pl.devices[r.device].name())) : py::none();
    const bool placed = r.device >= 0;
    d["need"] = placed ? py::object(py::int_(pl.need_of(i).need)) : py::none();
    d["overhead"] = placed ? py::object(py::int_(pl.need_of(i).overhead.bytes)) : py::none();
    d["strategy"] = placed ? py::object(py::str(pl.need_of(i).strategy)) : py::none();
    d["request"] = r.request;
    d["charge"] = r.charge;
    d["template"] = r.template_name.empty() ? py::object(py::none()) : py::str(r.template_name);
    out.append(d);
  }
  return out;
}

py::list devices(const Placement& pl) {
  py::list out;
  for (std::size_t b = 0; b < pl.devices.size(); ++b) {
    py::dict d;
    d["name"] = pl.devices[b].name();
    d["node"] = pl.devices[b].node;
    d["kind"] = pl.devices[b].kind;
    d["memory"] = pl.devices[b].bytes;
    d["used"] = pl.used(b);
    d["headroom"] = pl.headroom(b);
    out.append(d);
  }
  return out;
}

py::dict cap(const Placement& pl, std::size_t replica, const std::string& target) {
  const sizing::ContainerCap c = sizing::container_cap(pl, replica, sizing::parse_target(target));
  py::dict d;
  d["visible"] = c.visible;
  d["request"] = c.request;
  d["need"] = c.need;
  d["fraction"] = c.fraction;
  d["MODELMEM_ALLOC_CONF"] = c.modelmem_conf;
  if (!c.torch_var.empty()) d[py::str(c.torch_var)] = c.torch_conf;  // none on a cpu budget
  for (const auto& [var, value] : c.engine_env) d[py::str(var)] = value;
  return d;
}

}  // namespace

void bind_place(py::module_& m) {
  py::class_<Placement>(m, "Placement",
                        "Every replica of several models on a device (modelmem.place()).")
      .def_property_readonly("fits", &Placement::fits, "True when every replica has a device.")
      .def_property_readonly(
          "method", [](const Placement& p) { return p.packing.method; },
          "How it was packed (exact search, proven or not; best-fit "
          "decreasing).")
      .def_property_readonly("replicas", &replicas,
                             "One dict per replica: name, model, number, device (None when it "
                             "found no room), need (the pool's quota), overhead, strategy, "
                             "request (need + overhead), charge (bytes), template.")
      .def_property_readonly("devices", &devices,
                             "One dict per device: name, node, kind, memory, used, headroom.")
      .def_property_readonly(
          "messages", [](const Placement& p) { return p.messages; },
          "One line per replica that found no device: where it came closest "
          "and by how much it is short.")
      .def(
          "report", [](const Placement& p) { return sizing::render_text(p); },
          "What `modelmem place` prints.")
      .def(
          "emit",
          [](const Placement& p, const std::string& target, bool pods, const std::string& ns,
             const std::string& dra_driver, const std::string& dra_capacity,
             const std::string& ray_app) {
            sizing::EmitOptions o;
            o.pods = pods;
            o.ns = ns;
            o.dra_driver = dra_driver;
            o.dra_capacity = dra_capacity;
            o.ray_app = ray_app;
            return sizing::emit(p, sizing::parse_target(target), o);
          },
          py::arg("target"), py::arg("pods") = false, py::arg("namespace") = "",
          py::arg("dra_driver") = "", py::arg("dra_capacity") = "memory",
          py::arg("ray_app") = "app:build",
          "What `modelmem place --emit TARGET` prints (hami, vnpu, dra, ray): YAML text.")
      .def("cap", &cap, py::arg("replica"), py::arg("target"),
           "The cap inside replica i's container under target: visible, request, fraction and "
           "the two environment variables.")
      .def("__repr__", [](const Placement& p) {
        return "<modelmem.Placement " + std::to_string(p.replicas.size()) + " replicas on " +
               std::to_string(p.devices.size()) + " devices, " +
               (p.fits() ? "fits" : "does not fit") + ">";
      });
  m.def("place", &place, py::arg("models"), py::arg("devices"),
        py::arg("dims") = std::map<std::string, std::int64_t>{}, py::arg("dtype") = "fp32",
        py::arg("runtime") = py::none(), py::arg("replicas") = 1, py::arg("exact_limit") = 12,
        py::arg("templates") = true, py::arg("spread") = true, py::arg("strategy") = py::none(),
        py::arg("overhead") = py::none(),
        R"(Places every replica of several models on devices, as `modelmem place` does.
models: a models file (YAML or JSON) or a list of ONNX files (with dims, dtype, runtime and
replicas for all of them); devices: "8x910A", "8x64GiB", "2x8x910A", "1x512MiB:cpu", or a nodes
file; strategy and overhead: every model's unless its entry gives its own (None: not given). Returns a
Placement (fits, replicas, devices, messages, report(), emit(target), cap(i, target)). Raises
InvalidInputError for a bad model, device list or option.)");
}

}  // namespace modelmem::python
