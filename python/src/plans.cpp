// modelmem.plan() and modelmem.solve(): the library's model planner and solvers, and the Plan
// result object both return.
#include <fmt/format.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <fstream>
#include <memory>
#include <optional>

#include "common.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/buckets.hpp"
#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/model/order.hpp"
#include "modelmem/model/render.hpp"
#include "modelmem/model/solve.hpp"
#include "modelmem/plan/plan_io.hpp"
#include "modelmem/plan/problem.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::python {

namespace {

struct Tensor {
  std::string name;
  std::size_t size = 0;
  std::size_t offset = 0;
  std::int64_t first = 0;  ///< first step live (inclusive)
  std::int64_t last = 0;   ///< last step live (inclusive)
};

struct Bucket {
  std::int64_t value = 0;
  std::size_t arena_bytes = 0;
  std::size_t lower_bound = 0;
  std::size_t weights_bytes = 0;
};

struct Plan {
  std::string source;
  std::string solver;
  std::size_t arena_bytes = 0;
  std::size_t weights_bytes = 0;
  std::size_t lower_bound = 0;
  bool proven_optimal = false;
  double seconds = 0;
  std::string note;
  std::vector<Tensor> tensors;
  std::vector<std::size_t> offsets;  ///< one per buffer, in input order
  std::string bucket_dim;
  std::vector<Bucket> buckets;
  std::optional<std::int64_t> peak_step;
  // What the library renders from.
  std::shared_ptr<model::Graph> graph;
  std::shared_ptr<model::SolvedModel> model_plan;
  std::shared_ptr<plan::Problem> problem;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InvalidInput(path + ": cannot open for writing");
  out << text;
  out.flush();
  if (!out) throw Error(path + ": write failed");
}

std::string plan_json_text(const Plan& p) {
  if (p.graph) return model::plan_json(*p.graph, *p.model_plan).dump(1) + "\n";
  nlohmann::json j = {{"source", p.source},
                      {"solver", p.solver},
                      {"arena_bytes", p.arena_bytes},
                      {"lower_bound_bytes", p.lower_bound},
                      {"proven_optimal", p.proven_optimal}};
  nlohmann::json buffers = nlohmann::json::array();
  for (std::size_t i = 0; i < p.problem->buffers.size(); ++i) {
    const auto& b = p.problem->buffers[i];
    buffers.push_back({{"id", b.id},
                       {"size", b.size},
                       {"start", b.start},
                       {"end", b.end},
                       {"offset", p.offsets[i]}});
  }
  j["buffers"] = std::move(buffers);
  return j.dump(1) + "\n";
}

std::string repr(const Plan& p) {
  const double ratio = p.lower_bound ? static_cast<double>(p.arena_bytes) / p.lower_bound : 1.0;
  std::string s =
      fmt::format("<modelmem.Plan of {}\n  arena        {} ({} B) by {} in {:.3f} s{}\n", p.source,
                  format_bytes(p.arena_bytes), p.arena_bytes, p.solver, p.seconds,
                  p.proven_optimal ? ", proven optimal" : "");
  s += fmt::format("  lower bound  {} ({} B), arena / bound = {:.4f}\n",
                   format_bytes(p.lower_bound), p.lower_bound, ratio);
  if (p.graph)
    s += fmt::format("  weights      {} ({} B)\n", format_bytes(p.weights_bytes), p.weights_bytes);
  s += fmt::format("  tensors      {}", p.tensors.size());
  if (p.peak_step) s += fmt::format(", peak at step {}", *p.peak_step);
  for (const Bucket& b : p.buckets)
    s += fmt::format("\n  bucket       {}={}: arena {}", p.bucket_dim, b.value,
                     format_bytes(b.arena_bytes));
  return s + ">";
}

std::map<std::string, std::int64_t> dims_of(const py::object& dims) {
  std::map<std::string, std::int64_t> out;
  if (dims.is_none()) return out;
  if (py::isinstance<py::dict>(dims)) {
    for (auto [k, v] : dims.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k) || !py::isinstance<py::int_>(v) ||
          py::isinstance<py::bool_>(v))
        throw InvalidInput(fmt::format("dims: {}: expected a str name and an int value",
                                       py::repr(k).cast<std::string>()));
      auto value = v.cast<std::int64_t>();
      if (value <= 0)
        throw InvalidInput(
            fmt::format("dims: {}={}: a dim must be positive", k.cast<std::string>(), value));
      out[k.cast<std::string>()] = value;
    }
    return out;
  }
  if (py::isinstance<py::str>(dims))
    throw InvalidInput("dims: expected a dict or a list of 'NAME=VALUE'");
  for (auto item : dims) {
    if (!py::isinstance<py::str>(item)) throw InvalidInput("dims: expected 'NAME=VALUE' strings");
    auto [name, value] = model::parse_dim(item.cast<std::string>());
    if (!out.emplace(name, value).second)
      throw InvalidInput(fmt::format("dims: {} given twice", name));
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

Plan plan_model(const std::filesystem::path& fpath, const py::object& dims, const py::object& dtype,
                const std::string& order, const py::object& buckets, const std::string& solver,
                double time_limit) {
  const std::string path = fpath.string();
  model::LoadOptions load;
  load.dims = dims_of(dims);
  std::optional<model::BucketSpec> spec = buckets_of(buckets);
  if (spec) {
    if (load.dims.count(spec->dim))
      throw InvalidInput(
          fmt::format("buckets {} and dims {} name the same dim", spec->dim, spec->dim));
    load.dims[spec->dim] = spec->values.back();
  }
  model::LifetimeOptions lifetimes;
  std::string dt = dtype.is_none() ? "fp32" : py::str(dtype).cast<std::string>();
  if (dt != "fp32" && dt != "fp16" && dt != "bf16")
    throw InvalidInput(fmt::format("dtype '{}': expected None, 'fp32', 'fp16' or 'bf16'", dt));
  lifetimes.float_bytes = dt == "fp32" ? 4 : 2;
  if (order != "stored" && order != "memory")
    throw InvalidInput(fmt::format("order '{}': expected 'stored' or 'memory'", order));
  plan::make_solver(solver);  // an unknown name fails before the model is read
  plan::SolveOptions options = interruptible_options(time_limit);

  Plan out;
  auto graph = std::make_shared<model::Graph>();
  auto mp = std::make_shared<model::SolvedModel>();
  std::vector<model::BucketPlan> bucket_plans;
  run_interruptible([&] {
    *graph = model::load_onnx(path, load);
    if (order == "memory") lifetimes.order = model::memory_order(*graph, lifetimes).order;
    *mp = model::solve_model(*graph, lifetimes, solver, options);
    if (spec)
      bucket_plans =
          model::plan_buckets(path, load, *spec, lifetimes, solver, options, order == "memory");
  });
  out.source = graph->source;
  out.solver = mp->solve.solver;
  out.arena_bytes = mp->solve.plan->arena_size;
  out.weights_bytes = mp->lifetimes.weights_bytes;
  out.lower_bound = mp->lower_bound;
  out.proven_optimal = mp->solve.proven_optimal;
  out.seconds = mp->solve.seconds;
  out.note = mp->solve.note;
  out.offsets = mp->solve.plan->offsets;
  out.peak_step = mp->peak.step;
  // The tensors as plan_json lists them (the same numbers the runtime's plan: key reads).
  nlohmann::json j = model::plan_json(*graph, *mp);
  for (const auto& t : j.at("tensors"))
    out.tensors.push_back({t.at("name").get<std::string>(), t.at("size").get<std::size_t>(),
                           t.at("offset").get<std::size_t>(), t.at("first").get<std::int64_t>(),
                           t.at("last").get<std::int64_t>()});
  if (spec) {
    out.bucket_dim = spec->dim;
    for (const auto& b : bucket_plans)
      out.buckets.push_back({b.value, b.arena, b.lower_bound, b.weights});
  }
  out.graph = std::move(graph);
  out.model_plan = std::move(mp);
  return out;
}

plan::Problem problem_of(const py::object& problem) {
  if (py::isinstance<py::str>(problem) || py::hasattr(problem, "__fspath__")) {
    std::string path =
        py::str(py::module_::import("os").attr("fspath")(problem)).cast<std::string>();
    return plan::read_problem_csv(path);
  }
  if (!py::isinstance<py::sequence>(problem))
    throw InvalidInput("problem: expected a CSV path or a list of (size, start, end) tuples");
  plan::Problem p;
  p.name = "problem";
  std::size_t i = 0;
  for (auto item : problem) {
    bool ok =
        py::isinstance<py::sequence>(item) && !py::isinstance<py::str>(item) && py::len(item) == 3;
    if (ok)
      for (auto v : item) ok = ok && py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v);
    if (!ok)
      throw InvalidInput(fmt::format("problem[{}]: {}: expected a (size, start, end) tuple of ints",
                                     i, py::repr(item).cast<std::string>()));
    auto t = item.cast<py::sequence>();
    auto size = t[0].cast<std::int64_t>(), start = t[1].cast<std::int64_t>(),
         end = t[2].cast<std::int64_t>();
    if (size <= 0)
      throw InvalidInput(fmt::format("problem[{}]: size {} must be positive", i, size));
    if (start < 0 || end <= start)
      throw InvalidInput(
          fmt::format("problem[{}]: lifetime [{}, {}) must have 0 <= start < end", i, start, end));
    plan::Buffer b;
    b.id = std::to_string(i);
    b.size = static_cast<std::size_t>(size);
    b.start = start;
    b.end = end;
    p.buffers.push_back(std::move(b));
    ++i;
  }
  return p;
}

Plan solve_problem(const py::object& problem, const std::string& solver, const py::object& capacity,
                   double time_limit) {
  auto p = std::make_shared<plan::Problem>(problem_of(problem));
  if (!capacity.is_none()) {
    if (!py::isinstance<py::int_>(capacity) || capacity.cast<py::int_>() < py::int_(1))
      throw InvalidInput("capacity: expected a positive number of bytes or None");
    p->capacity = capacity.cast<std::size_t>();
  }
  plan::check_problem(*p);
  auto s = plan::make_solver(solver);
  plan::SolveOptions options = interruptible_options(time_limit);
  plan::SolveResult r;
  run_interruptible([&] { r = s->solve(*p, options); });
  if (!r.plan) {
    if (p->capacity)
      throw OutOfMemory(
          OomInfo{},
          fmt::format("{}: no plan within the capacity of {} ({})", p->name, *p->capacity,
                      r.proven_infeasible ? "proven: nothing fits" : "none found in time"));
    throw Error(fmt::format("{}: solver {} found no plan ({})", p->name, solver, r.note));
  }
  Plan out;
  out.source = p->name;
  out.solver = r.solver.empty() ? solver : r.solver;
  out.arena_bytes = r.plan->arena_size;
  out.lower_bound = std::max(r.lower_bound, plan::lower_bound(*p));
  out.proven_optimal = r.proven_optimal;
  out.seconds = r.seconds;
  out.note = r.note;
  out.offsets = r.plan->offsets;
  for (std::size_t i = 0; i < p->buffers.size(); ++i) {
    const auto& b = p->buffers[i];
    out.tensors.push_back({b.id, b.size, out.offsets[i], b.start, b.end - 1});
  }
  out.problem = std::move(p);
  return out;
}

}  // namespace

void bind_plans(py::module_& m) {
  py::class_<Tensor>(m, "PlannedTensor", "One tensor (or buffer) of a plan and where it lives.")
      .def_readonly("name", &Tensor::name, "tensor name (model) or buffer id (solve)")
      .def_readonly("size", &Tensor::size, "bytes")
      .def_readonly("offset", &Tensor::offset, "byte offset in the arena")
      .def_readonly("first", &Tensor::first, "first step at which it is live (inclusive)")
      .def_readonly("last", &Tensor::last, "last step at which it is live (inclusive)")
      .def("__repr__", [](const Tensor& t) {
        return fmt::format("<PlannedTensor {} size={} offset={} steps={}..{}>", t.name, t.size,
                           t.offset, t.first, t.last);
      });
  py::class_<Bucket>(m, "BucketPlan", "The plan of one bucket value (plan(..., buckets=...)).")
      .def_readonly("value", &Bucket::value)
      .def_readonly("arena_bytes", &Bucket::arena_bytes)
      .def_readonly("lower_bound", &Bucket::lower_bound)
      .def_readonly("weights_bytes", &Bucket::weights_bytes);
  py::class_<Plan>(m, "Plan", "A solved memory plan: the arena and each tensor's offset.")
      .def_readonly("source", &Plan::source)
      .def_readonly("solver", &Plan::solver, "the solver that produced the plan")
      .def_readonly("arena_bytes", &Plan::arena_bytes, "bytes of the activation arena")
      .def_readonly("weights_bytes", &Plan::weights_bytes, "bytes of the weights (0 for solve())")
      .def_readonly("lower_bound", &Plan::lower_bound, "no plan can use less than this")
      .def_readonly("proven_optimal", &Plan::proven_optimal)
      .def_readonly("seconds", &Plan::seconds)
      .def_readonly("note", &Plan::note)
      .def_readonly("tensors", &Plan::tensors, "list of PlannedTensor")
      .def_readonly("offsets", &Plan::offsets, "one offset per buffer, in input order")
      .def_readonly("buckets", &Plan::buckets, "list of BucketPlan (plan(..., buckets=...))")
      .def(
          "to_json",
          [](const Plan& p, const std::filesystem::path& fpath) {
            write_text(fpath.string(), plan_json_text(p));
          },
          py::arg("path"), "Writes the plan as JSON (for a model: the file the plan: key reads).")
      .def(
          "to_html",
          [](const Plan& p, const std::filesystem::path& fpath) {
            const std::string path = fpath.string();
            if (!p.graph)
              throw Unsupported(
                  "Plan.to_html draws a model's plan (modelmem.plan()); a plan from "
                  "solve() has no model: use to_json()");
            write_text(path,
                       model::plan_html(*p.graph, *p.model_plan, "modelmem plan: " + p.source));
          },
          py::arg("path"), "Writes a self-contained HTML picture of a model's plan.")
      .def("__repr__", &repr);

  m.def("plan", &plan_model, py::arg("path"), py::arg("dims") = py::none(),
        py::arg("dtype") = py::none(), py::arg("order") = "stored", py::arg("buckets") = py::none(),
        py::arg("solver") = "best", py::arg("time_limit") = 10.0,
        R"(Plans the activation memory of an ONNX model ahead of time (what `modelmem plan` does).

dims: {'batch': 8} or ['batch=8'] binds symbolic dims; dtype: None/'fp32', 'fp16' or 'bf16'
plans float32 activations at that width; order: 'stored' or 'memory' (search an order with a
lower peak); buckets: 'seq=32,64,128' or {'seq': [32, 64, 128]} plans each value (the main
plan uses the largest); solver: a name of solver_names(); time_limit: seconds for searching
solvers. Runs without the GIL; Ctrl-C stops it (KeyboardInterrupt). Raises InvalidInputError for
a bad file or argument.)");
  m.def("solve", &solve_problem, py::arg("problem"), py::arg("solver") = "best",
        py::arg("capacity") = py::none(), py::arg("time_limit") = 10.0,
        R"(Solves a planning problem: a MiniMalloc CSV path or a list of (size, start, end) tuples
(lifetime [start, end), end exclusive). Returns a Plan whose offsets are in input order.
capacity: an arena limit in bytes (OutOfMemoryError when nothing fits). Runs without the GIL;
Ctrl-C stops it.)");
  m.def("solver_names", &plan::solver_names, "The solver names plan() and solve() accept.");
}

}  // namespace modelmem::python
