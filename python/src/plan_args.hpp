// The arguments modelmem.plan(), modelmem.fit() and modelmem.plan_device() share, turned into the
// library's options exactly as `modelmem plan` turns its flags into them (tools/plan.cpp), so a
// bad value raises the CLI's message (InvalidInputError) and a good one plans the same thing.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "common.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/sizing/plan_need.hpp"

namespace modelmem::python {

/// The Python arguments of a plan (None = the CLI's default).
struct PlanArgs {
  py::object dims = py::none();     ///< {'batch': 8} or ['batch=8'] (--dim)
  py::object dtype = py::none();    ///< 'fp32', 'fp16', 'bf16' (--dtype)
  std::string order = "stored";     ///< 'stored' or 'memory' (--order)
  py::object buckets = py::none();  ///< 'seq=32,64' or {'seq': [32, 64]} (--buckets)
  std::string solver = "best";
  double time_limit = 10;
  std::string runtime = "static";  ///< --runtime
  bool keep_weights_dtype = false;
  std::size_t alignment = 64;
  std::optional<double> safety;
  py::object lengths = py::none();  ///< a path (--lengths)
  bool ignore_model_limits = false;
  py::object strategy = py::none();  ///< --strategy
  py::object overhead = py::none();  ///< a size, bytes or a fraction (--overhead)
  std::string device_kind = "cuda";  ///< --device-kind
};

/// The arguments plan(), fit() and plan_device() share (the others keep their defaults).
PlanArgs plan_args(const py::object& dims, const py::object& dtype, const std::string& runtime,
                   const py::object& strategy, const py::object& overhead,
                   const std::string& device_kind, bool keep_weights_dtype,
                   std::optional<double> safety, const std::string& order,
                   const std::string& solver, double time_limit, bool ignore_model_limits);

/// The options `plan` builds from its flags; the progress hook stops a long search on Ctrl-C
/// (run the planning call inside run_interruptible()).
model::PlanOptions plan_options(const PlanArgs& args);
sizing::SizingOptions sizing_options(const PlanArgs& args);
/// A size as an int (bytes) or text ("16GiB"), read as `--device-memory` reads it.
std::size_t size_arg(const py::object& value, const std::string& flag);
/// A path (str or os.PathLike) or a list of them.
std::vector<std::string> paths_arg(const py::object& value);

}  // namespace modelmem::python
