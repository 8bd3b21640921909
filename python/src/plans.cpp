// modelmem.plan() and modelmem.solve(): the library's model planner (with the need on the
// strategy, sizing::plan_need, as `modelmem plan` computes it) and solvers, and the Plan result
// object both return. Its to_json() writes what `modelmem plan -o` (or `modelmem solve
// --output PLAN.json`) writes, through the same renderer.
#include <fmt/format.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <memory>
#include <optional>

#include "common.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/model/render.hpp"
#include "modelmem/plan/plan_io.hpp"
#include "modelmem/plan/problem.hpp"
#include "modelmem/plan/solve_report.hpp"
#include "modelmem/plan/solver.hpp"
#include "modelmem/sizing/plan_need.hpp"
#include "plan_args.hpp"

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
  // What the library renders from: a model's plan and need (plan()), or a problem and its
  // solution (solve()).
  std::shared_ptr<const sizing::ModelNeed> model;
  std::shared_ptr<const plan::Problem> problem;
  std::shared_ptr<const plan::SolveResult> solved;
};

const sizing::ModelNeed& model_of(const Plan& p, const char* what) {
  if (!p.model)
    throw Unsupported(fmt::format(
        "Plan.{} is a model's (modelmem.plan()); a plan from solve() has no model", what));
  return *p.model;
}

// As the CLI writes its files: through a temporary file renamed into place.
void write_text(const std::string& path, const std::string& text) {
  core::write_file_replacing(path, text);
}

// What `plan -o` writes for a model; `solve --output PLAN.json` for a problem.
std::string plan_json_text(const Plan& p) {
  if (p.model) return sizing::render_json_text(*p.model);
  return plan::plan_file_json(*p.problem, *p.solved, plan::lower_bound(*p.problem));
}

py::object to_json(const Plan& p, const py::object& path) {
  const std::string text = plan_json_text(p);
  if (path.is_none()) return py::str(text);
  write_text(py::str(py::module_::import("os").attr("fspath")(path)).cast<std::string>(), text);
  return py::none();
}

std::string repr(const Plan& p) {
  const double ratio = p.lower_bound ? static_cast<double>(p.arena_bytes) / p.lower_bound : 1.0;
  std::string s =
      fmt::format("<modelmem.Plan of {}\n  arena        {} ({} B) by {} in {:.3f} s{}\n", p.source,
                  format_bytes(p.arena_bytes), p.arena_bytes, p.solver, p.seconds,
                  p.proven_optimal ? ", proven optimal" : "");
  s += fmt::format("  lower bound  {} ({} B), arena / bound = {:.4f}\n",
                   format_bytes(p.lower_bound), p.lower_bound, ratio);
  if (p.model) {
    const sizing::PoolNeed& n = p.model->need;
    s += fmt::format("  weights      {} ({} B), {}\n", format_bytes(p.weights_bytes),
                     p.weights_bytes, p.model->plan.options.dtype);
    s +=
        fmt::format("  ideal arena  {}, eager peak {} ({} runtime planned)\n",
                    format_bytes(p.model->plan.ideal_arena), format_bytes(p.model->plan.eager_peak),
                    model::runtime_name(p.model->plan.options.runtime));
    s += fmt::format("  need         {} on {} + overhead {} = {}\n", format_bytes(n.need),
                     n.strategy, format_bytes(n.overhead.bytes), format_bytes(n.total));
  }
  s += fmt::format("  tensors      {}", p.tensors.size());
  if (p.peak_step) s += fmt::format(", peak at step {}", *p.peak_step);
  for (const Bucket& b : p.buckets)
    s += fmt::format("\n  bucket       {}={}: arena {}", p.bucket_dim, b.value,
                     format_bytes(b.arena_bytes));
  return s + ">";
}

Plan plan_model(const std::filesystem::path& path, const PlanArgs& args) {
  const std::string file = path.string();
  const model::PlanOptions options = plan_options(args);
  const sizing::SizingOptions sizing = sizing_options(args);
  sizing::validate(sizing);
  auto mn = std::make_shared<sizing::ModelNeed>();
  run_interruptible([&] { *mn = sizing::plan_need(file, options, sizing); });
  const model::ModelPlan& mp = mn->plan;
  const model::SolvedModel& sm = mp.plan;
  Plan out;
  out.source = mp.graph.source;
  out.solver = sm.solve.solver;
  out.arena_bytes = mp.arena();
  out.weights_bytes = mp.weights_bytes;
  out.lower_bound = sm.lower_bound;
  out.proven_optimal = sm.solve.proven_optimal;
  out.seconds = sm.solve.seconds;
  out.note = sm.solve.note;
  out.offsets = sm.solve.plan->offsets;
  out.peak_step = sm.peak.step;
  // The tensors as plan_json lists them (the same numbers the runtime's plan: key reads).
  const nlohmann::json j = model::plan_json(mp.graph, sm);
  for (const auto& t : j.at("tensors"))
    out.tensors.push_back({t.at("name").get<std::string>(), t.at("size").get<std::size_t>(),
                           t.at("offset").get<std::size_t>(), t.at("first").get<std::int64_t>(),
                           t.at("last").get<std::int64_t>()});
  if (options.buckets) {
    out.bucket_dim = options.buckets->dim;
    for (const auto& b : mp.buckets)
      out.buckets.push_back({b.value, b.arena, b.lower_bound, b.weights});
  }
  out.model = std::move(mn);
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
  out.solved = std::make_shared<plan::SolveResult>(r);
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
  // A model's figure, None for a plan from solve().
  auto of_model = [](auto f) {
    return [f](const Plan& p) -> py::object {
      if (!p.model) return py::none();
      return py::cast(f(*p.model));
    };
  };
  using MN = sizing::ModelNeed;
  py::class_<Plan>(m, "Plan",
                   "A solved memory plan: the arena and each tensor's offset; for a model, the "
                   "ideal and eager figures and the need on the strategy that serves it.")
      .def_readonly("source", &Plan::source)
      .def_readonly("solver", &Plan::solver, "the solver that produced the plan")
      .def_readonly("arena_bytes", &Plan::arena_bytes,
                    "bytes of the planned activation arena (for the runtime planned)")
      .def_readonly("weights_bytes", &Plan::weights_bytes,
                    "bytes of the weights at the planned dtype (0 for solve())")
      .def_readonly("lower_bound", &Plan::lower_bound, "no plan can use less than this")
      .def_property_readonly(
          "lower_bound_bytes", [](const Plan& p) { return p.lower_bound; },
          "the same as lower_bound (the JSON's name)")
      .def_readonly("proven_optimal", &Plan::proven_optimal)
      .def_readonly("seconds", &Plan::seconds)
      .def_readonly("note", &Plan::note)
      .def_readonly("tensors", &Plan::tensors, "list of PlannedTensor")
      .def_readonly("offsets", &Plan::offsets, "one offset per buffer, in input order")
      .def_readonly("buckets", &Plan::buckets, "list of BucketPlan (plan(..., buckets=...))")
      .def_readonly("peak_step", &Plan::peak_step, "the step of the peak (a model's plan)")
      .def_property_readonly("model", of_model([](const MN& n) { return n.plan.graph.source; }),
                             "the model file")
      .def_property_readonly("dims", of_model([](const MN& n) { return n.plan.graph.dims; }),
                             "the bound dims")
      .def_property_readonly("runtime", of_model([](const MN& n) {
                               return model::runtime_name(n.plan.options.runtime);
                             }),
                             "'static' or 'eager': whose lifetimes the arena is planned for")
      .def_property_readonly(
          "dtype", of_model([](const MN& n) { return n.plan.options.dtype; }),
          "'fp32', 'fp16' or 'bf16': float32 activations and weights planned at that width")
      .def_property_readonly("total_bytes", of_model([](const MN& n) { return n.plan.total(); }),
                             "weights + the planned arena")
      .def_property_readonly("ideal_arena_bytes",
                             of_model([](const MN& n) { return n.plan.ideal_arena; }),
                             "the arena of a static executor with in-place reuse")
      .def_property_readonly("eager_peak_bytes",
                             of_model([](const MN& n) { return n.plan.eager_peak; }),
                             "the live activation bytes at PyTorch eager's peak")
      .def_property_readonly("strategy", of_model([](const MN& n) { return n.need.strategy; }),
                             "the configuration of the pool the need is for (strategy=)")
      .def_property_readonly(
          "need_bytes", of_model([](const MN& n) { return n.need.need; }),
          "what the strategy reserves to serve the model (weights and activations): the quota")
      .def_property_readonly("need_runtime", of_model([](const MN& n) { return n.need.runtime; }),
                             "whose allocation sequence was replayed")
      .def_property_readonly("need_replay_bytes", of_model([](const MN& n) {
                               return n.need.replay_mib * (std::size_t{1} << 20);
                             }),
                             "the smallest whole-MiB quota that serves the replayed sequence")
      .def_property_readonly("order_slack_bytes",
                             of_model([](const MN& n) { return n.need.order_slack; }),
                             "eager on a segmenting pool: two segments, or half the largest "
                             "request up to 64 MiB, for PyTorch's own order")
      .def_property_readonly("peak_live_bytes",
                             of_model([](const MN& n) { return n.need.peak_live; }),
                             "requested bytes live at the peak of the replayed sequence")
      .def_property_readonly("peak_reserved_bytes",
                             of_model([](const MN& n) { return n.need.peak_reserved; }),
                             "what the pool reserved at that quota")
      .def_property_readonly(
          "overhead_bytes", of_model([](const MN& n) { return n.need.overhead.bytes; }),
          "device memory outside the allocator (overhead=, or the device kind's default)")
      .def_property_readonly("overhead_source",
                             of_model([](const MN& n) { return n.need.overhead.source; }),
                             "where the overhead comes from")
      .def_property_readonly("need_total_bytes", of_model([](const MN& n) { return n.need.total; }),
                             "need + overhead: what the device must have")
      .def_property_readonly(
          "quota_bytes",
          [](const Plan& p) -> py::object {
            if (!p.model || !p.model->safety) return py::none();
            return py::cast(p.model->quota());
          },
          "with safety=F: the need x F in whole MiB, the pool to give the model; else None")
      .def("to_json", &to_json, py::arg("path") = py::none(),
           "The JSON `modelmem plan -o` writes (for solve(): `modelmem solve --output "
           "PLAN.json`), by the same renderer: written to path, or returned as a str without one.")
      .def(
          "to_dict", [](const Plan& p) { return json_loads(plan_json_text(p)); },
          "to_json() as Python objects.")
      .def(
          "report",
          [](const Plan& p, std::size_t show_live) {
            model::TextOptions o;
            o.show_live = show_live;
            return sizing::render_text(model_of(p, "report"), o);
          },
          py::arg("show_live") = 8, "What `modelmem plan MODEL` prints.")
      .def(
          "to_html",
          [](const Plan& p, const std::filesystem::path& fpath) {
            write_text(fpath.string(), model::render_html(model_of(p, "to_html").plan));
          },
          py::arg("path"), "Writes a self-contained HTML picture of a model's plan.")
      .def("__repr__", &repr);

  m.def(
      "plan",
      [](const std::filesystem::path& path, const py::object& dims, const py::object& dtype,
         const std::string& order, const py::object& buckets, const std::string& solver,
         double time_limit, const std::string& runtime, const py::object& strategy,
         const py::object& overhead, const std::string& device_kind, bool keep_weights_dtype,
         const py::object& alignment, std::optional<double> safety, const py::object& lengths,
         bool ignore_model_limits) {
        PlanArgs a =
            plan_args(dims, dtype, runtime, strategy, overhead, device_kind, keep_weights_dtype,
                      safety, order, solver, time_limit, ignore_model_limits);
        a.buckets = buckets;
        // The range model::validate() checks, said before pybind11 could fail to cast 10**30.
        a.alignment = whole_arg(alignment, "--align", 1, std::size_t{1} << 20,
                                "a power of two from 1 to 1048576 bytes");
        a.lengths = lengths;
        return plan_model(path, a);
      },
      py::arg("path"), py::arg("dims") = py::none(), py::arg("dtype") = py::none(),
      py::arg("order") = "stored", py::arg("buckets") = py::none(), py::arg("solver") = "best",
      py::arg("time_limit") = 10.0, py::arg("runtime") = "static", py::arg("strategy") = py::none(),
      py::arg("overhead") = py::none(), py::arg("device_kind") = "cuda",
      py::arg("keep_weights_dtype") = false, py::arg("alignment") = 64,
      py::arg("safety") = py::none(), py::arg("lengths") = py::none(),
      py::arg("ignore_model_limits") = false,
      R"(Plans the activation memory of an ONNX model ahead of time and sizes its need on the
strategy that serves it: what `modelmem plan MODEL` computes, flag for flag.

dims: {'batch': 8} or ['batch=8'] (--dim); dtype: None/'fp32', 'fp16' or 'bf16' (--dtype:
float32 activations and weights at that width; keep_weights_dtype=True converts the activations
only); order: 'stored' or 'memory'; buckets: 'seq=32,64,128' or {'seq': [32, 64, 128]} plans each
value (the main plan uses the largest); solver: a name of solver_names() or 'all'; time_limit:
seconds for searching solvers; runtime: 'static' or 'eager' (--runtime: whose lifetimes the
arena is planned for; both figures are given); strategy: 'caching', 'static', 'planned',
'expandable' or a configuration string (--strategy; None: what `modelmem run` builds); overhead:
a size ('512MiB', bytes) or a fraction ('5%') of the device (--overhead; None: device_kind's
default, 'cuda', 'npu' or 'host'); alignment, safety, lengths, ignore_model_limits: --align,
--safety, --lengths, --ignore-model-limits. Plan.to_json() writes what `plan -o` writes.
Runs without the GIL; Ctrl-C stops it (KeyboardInterrupt). Raises InvalidInputError with the
CLI's message for a bad file or argument.)");
  m.def("solve", &solve_problem, py::arg("problem"), py::arg("solver") = "best",
        py::arg("capacity") = py::none(), py::arg("time_limit") = 10.0,
        R"(Solves a planning problem: a MiniMalloc CSV path or a list of (size, start, end) tuples
(lifetime [start, end), end exclusive). Returns a Plan whose offsets are in input order.
capacity: an arena limit in bytes (OutOfMemoryError when nothing fits). Runs without the GIL;
Ctrl-C stops it.)");
  m.def("solver_names", &plan::solver_names, "The solver names plan() and solve() accept.");
}

}  // namespace modelmem::python
