// The extension's exception mapping (C++ errors to modelmem._errors' classes), Ctrl-C during a
// long search, and the checks of Python arguments that pybind11 would refuse without a word.
#include <pybind11/stl.h>

#include <chrono>
#include <exception>

#include "common.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::python {

namespace {

// Thrown through a solver by the progress callback when Python has a pending signal.
struct Interrupted {};

py::object error_class(const char* name) {
  return py::module_::import("modelmem._errors").attr(name);
}

void set_error(const char* cls, const char* message) {
  py::object type = error_class(cls);
  PyErr_SetString(type.ptr(), message);
}

}  // namespace

void register_errors(py::module_&) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const QuotaExceeded& e) {
      set_error("QuotaExceededError", e.what());
    } catch (const OutOfMemory& e) {
      set_error("OutOfMemoryError", e.what());
    } catch (const InvalidInput& e) {
      set_error("InvalidInputError", e.what());
    } catch (const Unsupported& e) {
      set_error("UnsupportedError", e.what());
    } catch (const Error& e) {
      set_error("Error", e.what());
    }
  });
}

void raise(const char* cls, const std::string& message) {
  set_error(cls, message.c_str());
  throw py::error_already_set();
}

py::dict stats_dict(const alloc::Stats& s) {
  py::dict d;
  auto counters = [&](const char* name, const alloc::CounterSet& c) {
    const std::pair<const char*, const alloc::Counter*> pools[] = {
        {"all", &c.all}, {"small_pool", &c.small}, {"large_pool", &c.large}};
    for (const auto& [pool, counter] : pools) {
      const std::string prefix = std::string(name) + "." + pool + ".";
      d[py::str(prefix + "current")] = counter->current;
      d[py::str(prefix + "peak")] = counter->peak;
      d[py::str(prefix + "allocated")] = counter->allocated;
      d[py::str(prefix + "freed")] = counter->freed;
    }
  };
  counters("active", s.active);
  counters("active_bytes", s.active_bytes);
  counters("allocated_bytes", s.allocated_bytes);
  counters("allocation", s.allocation);
  counters("inactive_split", s.inactive_split);
  counters("inactive_split_bytes", s.inactive_split_bytes);
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  d["num_ooms"] = s.num_ooms;
  counters("requested_bytes", s.requested_bytes);
  counters("reserved_bytes", s.reserved_bytes);
  counters("segment", s.segment);
  d["largest_free_block"] = s.largest_free_block;
  return d;
}

plan::SolveOptions interruptible_options(double time_limit_s) {
  if (!(time_limit_s > 0)) throw InvalidInput("time_limit must be a positive number of seconds");
  plan::SolveOptions o;
  o.time_limit = std::chrono::duration<double>(time_limit_s);
  o.progress = [](std::size_t, double) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw Interrupted{};
  };
  return o;
}

void run_interruptible(const std::function<void()>& f) {
  bool interrupted = false;
  {
    py::gil_scoped_release nogil;
    try {
      f();
    } catch (const Interrupted&) {
      interrupted = true;
    }
  }
  if (interrupted) throw py::error_already_set();  // PyErr_CheckSignals set KeyboardInterrupt
}

config::Config parse_config(const std::string& text) {
  try {
    return config::parse_config(text);
  } catch (const InvalidInput& e) {
    raise("ConfigError", e.what());
  }
}

std::size_t whole_arg(const py::object& value, const std::string& what, std::size_t lo,
                      std::size_t hi, const std::string& range) {
  if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value))
    throw InvalidInput(what + ": expected an int, got " + py::repr(value).cast<std::string>());
  // Compared as Python ints: 10**30 does not fit a size_t, and pybind11's cast would say only
  // "Unable to cast Python instance to C++ type".
  const py::int_ n = value.cast<py::int_>();
  if (n < py::int_(lo) || n > py::int_(hi))
    throw InvalidInput(what + " " + py::str(value).cast<std::string>() +
                       " is out of range: " + range);
  return value.cast<std::size_t>();
}

py::object json_loads(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}

}  // namespace modelmem::python
