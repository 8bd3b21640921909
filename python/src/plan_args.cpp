// The shared arguments of modelmem.plan(), fit() and plan_device() (plan_args.hpp).
#include "plan_args.hpp"

#include <fmt/format.h>

#include <map>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/buckets.hpp"

namespace modelmem::python {

namespace {

std::map<std::string, std::int64_t> dims_of(const py::object& dims) {
  std::map<std::string, std::int64_t> out;
  if (dims.is_none()) return out;
  if (py::isinstance<py::dict>(dims)) {
    for (auto [k, v] : dims.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k) || !py::isinstance<py::int_>(v) ||
          py::isinstance<py::bool_>(v))
        throw InvalidInput(fmt::format("dims: {}: expected a str name and an int value",
                                       py::repr(k).cast<std::string>()));
      // As --dim NAME=VALUE reads it: the same range and the same message.
      auto [name, value] =
          model::parse_dim(k.cast<std::string>() + "=" + py::str(v).cast<std::string>());
      out[name] = value;
    }
    return out;
  }
  if (py::isinstance<py::str>(dims))
    throw InvalidInput("dims: expected a dict or a list of 'NAME=VALUE'");
  for (auto item : dims) {
    if (!py::isinstance<py::str>(item)) throw InvalidInput("dims: expected 'NAME=VALUE' strings");
    auto [name, value] = model::parse_dim(item.cast<std::string>());
    if (!out.emplace(name, value).second)
      throw InvalidInput(fmt::format("--dim {} given twice", name));
  }
  return out;
}

std::optional<model::BucketSpec> buckets_of(const py::object& buckets) {
  if (buckets.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(buckets)) return model::parse_buckets(buckets.cast<std::string>());
  if (py::isinstance<py::dict>(buckets)) {
    auto d = buckets.cast<py::dict>();
    if (d.size() != 1) throw InvalidInput("buckets: one dim, as {'seq': [32, 64, 128]}");
    for (auto [k, v] : d) {
      std::string text = py::str(k).cast<std::string>() + "=";
      bool first = true;
      for (auto value : v) {
        if (!py::isinstance<py::int_>(value))
          throw InvalidInput("buckets: the values must be ints");
        text += (first ? "" : ",") + py::str(value).cast<std::string>();
        first = false;
      }
      return model::parse_buckets(text);
    }
  }
  throw InvalidInput("buckets: expected 'DIM=V1,V2,...' or {'DIM': [V1, V2, ...]}");
}

std::string text_of(const py::object& value) {
  return value.is_none() ? std::string() : py::str(value).cast<std::string>();
}

std::string path_of(const py::object& value) {
  if (!py::isinstance<py::str>(value) && !py::hasattr(value, "__fspath__"))
    throw InvalidInput(fmt::format("{}: expected a path (str or os.PathLike)",
                                   py::repr(value).cast<std::string>()));
  return py::str(py::module_::import("os").attr("fspath")(value)).cast<std::string>();
}

}  // namespace

model::PlanOptions plan_options(const PlanArgs& a) {
  model::PlanOptions o;
  o.dims = dims_of(a.dims);
  if (a.order != "stored" && a.order != "memory")
    throw InvalidInput(fmt::format("order '{}': expected 'stored' or 'memory'", a.order));
  o.memory_order = a.order == "memory";
  o.dtype = a.dtype.is_none() ? "fp32" : text_of(a.dtype);
  o.keep_weights_dtype = a.keep_weights_dtype;
  o.alignment = a.alignment;
  o.runtime = model::parse_runtime(a.runtime);
  o.buckets = buckets_of(a.buckets);
  if (!a.lengths.is_none()) o.lengths_path = path_of(a.lengths);
  o.time_limit = a.time_limit;
  o.ignore_model_limits = a.ignore_model_limits;
  if (a.solver != "all") plan::make_solver(a.solver);  // an unknown name fails before the model
  o.solver = a.solver;
  model::validate(o);  // before the hook: a bad time limit gets the CLI's message
  o.progress = interruptible_options(a.time_limit).progress;
  return o;
}

sizing::SizingOptions sizing_options(const PlanArgs& a) {
  sizing::SizingOptions s;
  s.strategy = text_of(a.strategy);
  s.overhead = text_of(a.overhead);
  s.backend = sizing::parse_backend(a.device_kind);
  s.safety = a.safety;
  return s;
}

std::size_t size_arg(const py::object& value, const std::string& flag) {
  if (py::isinstance<py::bool_>(value) ||
      !(py::isinstance<py::int_>(value) || py::isinstance<py::str>(value)))
    throw InvalidInput(fmt::format("{} {}: expected bytes (an int) or a size ('16GiB')", flag,
                                   py::repr(value).cast<std::string>()));
  return parse_size(py::str(value).cast<std::string>(), flag);
}

std::vector<std::string> paths_arg(const py::object& value) {
  if (py::isinstance<py::str>(value) || py::hasattr(value, "__fspath__")) return {path_of(value)};
  if (!py::isinstance<py::sequence>(value))
    throw InvalidInput("expected a model path or a list of model paths");
  std::vector<std::string> out;
  for (auto item : value) out.push_back(path_of(py::reinterpret_borrow<py::object>(item)));
  return out;
}

PlanArgs plan_args(const py::object& dims, const py::object& dtype, const std::string& runtime,
                   const py::object& strategy, const py::object& overhead,
                   const std::string& device_kind, bool keep_weights_dtype,
                   std::optional<double> safety, const std::string& order,
                   const std::string& solver, double time_limit, bool ignore_model_limits) {
  PlanArgs a;
  a.dims = dims;
  a.dtype = dtype;
  a.runtime = runtime;
  a.strategy = strategy;
  a.overhead = overhead;
  a.device_kind = device_kind;
  a.keep_weights_dtype = keep_weights_dtype;
  a.safety = safety;
  a.order = order;
  a.solver = solver;
  a.time_limit = time_limit;
  a.ignore_model_limits = ignore_model_limits;
  return a;
}

}  // namespace modelmem::python
