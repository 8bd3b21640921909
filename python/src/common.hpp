// Shared pieces of the modelmem Python extension (modelmem._modelmem): the exception mapping and
// the binding functions of each part. The extension wraps the library's functions and result
// objects; it computes nothing of its own.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "modelmem/alloc/stats.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::python {

namespace py = pybind11;

/// Maps modelmem's C++ exceptions to the Python classes of modelmem/_errors.py:
/// InvalidInput -> InvalidInputError (ValueError), OutOfMemory -> OutOfMemoryError (MemoryError),
/// QuotaExceeded -> QuotaExceededError, Unsupported -> UnsupportedError (NotImplementedError).
void register_errors(py::module_& m);
/// Raises modelmem.<cls>(message) (e.g. "ConfigError").
[[noreturn]] void raise(const char* cls, const std::string& message);

/// config::parse_config, a bad string raised as modelmem.ConfigError (the message names the key).
config::Config parse_config(const std::string& text);

/// A whole number argument: an int (not a bool) from `lo` to `hi`, else InvalidInputError
/// "WHAT VALUE is out of range: RANGE" (or "WHAT: expected an int, got ..."), where pybind11's
/// own conversion of 10**30 says only "Unable to cast Python instance to C++ type".
std::size_t whole_arg(const py::object& value, const std::string& what, std::size_t lo,
                      std::size_t hi, const std::string& range);

/// A JSON text as Python objects (json.loads).
py::object json_loads(const std::string& text);

/// torch.cuda.memory_stats() style dict ("allocated_bytes.all.current", ...).
py::dict stats_dict(const alloc::Stats& stats);

/// Solve options whose progress callback checks for Ctrl-C (the GIL is taken for that only);
/// run_interruptible() runs `f` without the GIL and raises KeyboardInterrupt when it was stopped.
plan::SolveOptions interruptible_options(double time_limit_s);
void run_interruptible(const std::function<void()>& f);

void bind_plans(py::module_& m);
void bind_traces(py::module_& m);
void bind_torch(py::module_& m);
void bind_logger(py::module_& m);
void bind_place(py::module_& m);
void bind_serving(py::module_& m);
void bind_device(py::module_& m);

}  // namespace modelmem::python
