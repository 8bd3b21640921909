// modelmem as PyTorch's CPU allocator from Python (use_cpu_allocator), per-model pools routing a
// thread's allocations (pool) and recording a trace of them (handle.trace); MemoryLogger is in
// logger.cpp. The allocator lives in integrations/libtorch.
#include <fmt/format.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <dlfcn.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/monitor/publisher.hpp"
#include "modelmem/trace/recorder.hpp"
#include "modelmem/trace/trace.hpp"
#include "py_trace.hpp"
#include "torch_state.hpp"
#ifdef MODELMEM_PY_TORCH
#include "modelmem_torch.hpp"
#endif

namespace modelmem::python {

namespace {

using alloc::EventKind;

// Fans the allocators' events out to at most one trace recording and one MemoryLogger. A sink
// is detached only once no callback is inside it, so it may be destroyed right after.
class Tap final : public alloc::Listener {
 public:
  enum Slot { kTrace = 0, kLogger = 1 };
  void on_event(const alloc::Event& e) noexcept override {
    if (sinks_[0].load(std::memory_order_acquire) == nullptr &&
        sinks_[1].load(std::memory_order_acquire) == nullptr)
      return;
    inflight_.fetch_add(1);
    for (auto& s : sinks_)
      if (alloc::Listener* l = s.load()) l->on_event(e);
    inflight_.fetch_sub(1);
  }
  bool attach(Slot slot, alloc::Listener* l) {
    alloc::Listener* expected = nullptr;
    return sinks_[slot].compare_exchange_strong(expected, l);
  }
  void detach(Slot slot, alloc::Listener* l) {
    alloc::Listener* expected = l;
    sinks_[slot].compare_exchange_strong(expected, nullptr);
    while (inflight_.load() != 0) std::this_thread::yield();
  }

 private:
  std::atomic<alloc::Listener*> sinks_[2] = {nullptr, nullptr};
  std::atomic<int> inflight_{0};
};

// A pool made here (not one of the CPU allocator's pools:[...]): its events reach the tap with
// its own pool number, so a trace or MemoryLogger tells the pools apart.
class PoolTag final : public alloc::Listener {
 public:
  PoolTag(alloc::Listener& tap, std::uint32_t pool) : tap_(tap), pool_(pool) {}
  void on_event(const alloc::Event& e) noexcept override {
    alloc::Event tagged = e;
    tagged.pool = pool_;
    tap_.on_event(tagged);
  }

 private:
  alloc::Listener& tap_;
  const std::uint32_t pool_;
};

struct Pool {
  std::string name;
  std::unique_ptr<PoolTag> tag;
  std::optional<std::size_t> quota;
  std::shared_ptr<alloc::Allocator> upstream;
  std::shared_ptr<alloc::Allocator> allocator;  // the quota adaptor, or upstream without quota
  std::shared_ptr<alloc::QuotaAdaptor> adaptor;
  monitor::PoolRegistration registration;
  /// One of the CPU allocator's pools:[...]: selected in its router (push_pool), so requests go
  /// through the router, which reports each allocation, free and refusal with the pool. Routed
  /// to the pool's own stack instead, a listener saw only that stack's segment events.
  std::shared_ptr<alloc::Allocator> router;
};

// Process-wide; never destroyed (tensors may be freed during interpreter shutdown).
struct State {
  std::mutex mutex;
  std::string config;
  std::shared_ptr<alloc::Allocator> allocator;
  Tap tap;
  monitor::PoolRegistration registration;
  std::map<std::string, std::shared_ptr<Pool>> pools;
  // Event::pool -> the pool's name: 0 the allocator itself, then its pools:[...], then the pools
  // made here. Appended under `mutex`; read by MemoryLogger::stop's callers under it too.
  std::vector<std::string> pool_names{"libtorch"};
};
State& state() {
  static State* s = new State;
  return *s;
}

}  // namespace

bool cpu_allocator_installed() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().allocator != nullptr;
}
bool attach_cpu_logger(alloc::Listener* listener) {
  return state().tap.attach(Tap::kLogger, listener);
}
void detach_cpu_logger(alloc::Listener* listener) {
  state().tap.detach(Tap::kLogger, listener);
}
std::string cpu_pool_name(std::uint32_t pool) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return pool < s.pool_names.size() ? s.pool_names[pool] : std::to_string(pool);
}

namespace {

thread_local std::vector<std::shared_ptr<alloc::Allocator>> t_previous_routes;

void require_installed(const char* what) {
  if (!state().allocator)
    throw Unsupported(
        fmt::format("{} works on allocations made through modelmem: call "
                    "modelmem.torch.use_cpu_allocator() first",
                    what));
}

std::shared_ptr<alloc::Allocator> build_allocator(const std::string& text) {
  return config::build(parse_config(text)).allocator;
}

struct CpuHandle {};  // the installed allocator is process-wide; the handle names it

struct StepMark {
  bool open = false;
};

class TraceRecording final : public alloc::Listener {
 public:
  explicit TraceRecording(std::string path) : path_(std::move(path)), recorder_(1u << 20) {
    if (!state().tap.attach(Tap::kTrace, this))
      throw Unsupported("a trace is already being recorded (one at a time): stop it first");
    active_ = true;
  }
  ~TraceRecording() override {
    if (active_) state().tap.detach(Tap::kTrace, this);
  }
  void on_event(const alloc::Event& e) noexcept override { recorder_.on_event(e); }
  std::shared_ptr<trace::Trace> stop() {
    if (!active_) throw InvalidInput("the trace recording was already stopped");
    state().tap.detach(Tap::kTrace, this);
    active_ = false;
    auto t = std::make_shared<trace::Trace>(trace::from_recorder(recorder_, path_));
    trace::write_csv(*t, path_);
    return t;
  }
  bool active() const { return active_; }

 private:
  std::string path_;
  trace::Recorder recorder_;
  bool active_ = false;
};

#ifdef MODELMEM_PY_TORCH
void install(const std::string& text) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.allocator) {
    if (text == s.config) return;
    throw Unsupported(fmt::format(
        "modelmem is already PyTorch's CPU allocator with config '{}' (one per process; its "
        "tensors may still be alive): start a new process for '{}'",
        s.config, text));
  }
  auto allocator = build_allocator(text);
  allocator->set_listener(&s.tap);
  for (const alloc::NamedPool& p : allocator->pools()) s.pool_names.push_back(p.name);
  modelmem::torch::install(allocator);
  s.allocator = allocator;
  s.config = text;
  // install() publishes it to the monitor (pool "libtorch"), as for any libtorch user.
}

void route(const std::shared_ptr<alloc::Allocator>& a) {
  modelmem::torch::set_thread_allocator(a);
}
std::shared_ptr<alloc::Allocator> current_route() {
  return modelmem::torch::thread_allocator();
}
void begin_step() {
  modelmem::torch::begin_step();
}
void end_step() {
  modelmem::torch::end_step();
}
#else
[[noreturn]] void no_torch() {
  throw Unsupported(
      "this modelmem was built without libtorch (Debian's libtorch-dev): "
      "modelmem.torch is not available");
}
void install(const std::string&) {
  no_torch();
}
void route(const std::shared_ptr<alloc::Allocator>&) {
  no_torch();
}
std::shared_ptr<alloc::Allocator> current_route() {
  return nullptr;
}
void begin_step() {
  no_torch();
}
void end_step() {
  no_torch();
}
#endif

// The pools:[...] of the configuration string in use (the CPU allocator's, else
// MODELMEM_ALLOC_CONF, the string the NPU and CUDA libraries read); empty when it has none.
std::vector<config::PoolQuota> configured_pools(const State& s) {
  const char* env = std::getenv("MODELMEM_ALLOC_CONF");
  const std::string text = s.allocator ? s.config : env != nullptr ? env : "";
  config::Config c = parse_config(text);
  return c.has("pools") ? config::parse_pools(c.get("pools")) : std::vector<config::PoolQuota>{};
}

// Per thread, per `with pool:` level: the libraries whose selection it pushed (held open).
thread_local std::vector<std::vector<std::pair<void*, const DeviceLibrary*>>> t_device_pushes;

// The LD_PRELOAD library (`modelmem run`): its pool selection, which serves every request of the
// process from the C library up (modelmem_pool_push: 0, or -1 with errno).
constexpr DeviceLibrary kPreload = {
    "libmodelmem_preload.so", "modelmem_pool_push", "modelmem_pool_pop", nullptr, nullptr, nullptr};

// Selects `name` in every loaded library that has pools (the device libraries, the preload);
// returns how many did.
std::size_t push_device_pools(const std::string& name) {
  std::vector<std::pair<void*, const DeviceLibrary*>> pushed;
  auto undo = [&] {
    for (auto& [h, lib] : pushed) {
      reinterpret_cast<int (*)()>(dlsym(h, lib->pop))();
      dlclose(h);
    }
  };
  std::vector<const DeviceLibrary*> libraries;
  for (const DeviceLibrary& lib : kDeviceLibraries) libraries.push_back(&lib);
  libraries.push_back(&kPreload);
  for (const DeviceLibrary* lib : libraries) {
    void* h = dlopen(lib->soname, RTLD_NOLOAD | RTLD_LAZY);
    if (h == nullptr) continue;
    auto push = reinterpret_cast<int (*)(const char*)>(dlsym(h, lib->push));
    auto pop = dlsym(h, lib->pop);
    if (push == nullptr || pop == nullptr) {
      dlclose(h);
      continue;
    }
    errno = 0;
    int rc = push(name.c_str());
    std::string why;
    if (lib == &kPreload && rc < 0) {
      const int e = errno;
      if (e == ENODEV) rc = 1;  // its string has no pools (or it serves nothing): no route there
      why = e == ENOENT      ? "no pool of that name in the pools:[...] of MODELMEM_ALLOC_CONF"
            : e == EOVERFLOW ? "pools nested more than 16 deep"
                             : std::string("modelmem_pool_push failed: ") + std::strerror(e);
    } else if (rc < 0) {
      auto error = reinterpret_cast<const char* (*)()>(dlsym(h, lib->error));
      why = error != nullptr ? error() : "";
    }
    if (rc < 0) {
      dlclose(h);
      undo();
      throw InvalidInput(fmt::format("pool '{}': {}: {}", name, lib->soname, why));
    }
    if (rc == 0)
      pushed.emplace_back(h, lib);
    else
      dlclose(h);  // that library's string has no pools: nothing to route there
  }
  const std::size_t n = pushed.size();
  t_device_pushes.push_back(std::move(pushed));
  return n;
}

void pop_device_pools() {
  if (t_device_pushes.empty()) return;
  for (auto& [h, lib] : t_device_pushes.back()) {
    reinterpret_cast<int (*)()>(dlsym(h, lib->pop))();
    dlclose(h);
  }
  t_device_pushes.pop_back();
}

std::shared_ptr<Pool> get_pool(const std::string& name, const py::object& quota) {
  if (!core::valid_pool_name(name))
    throw InvalidInput(
        fmt::format("'{}' is not a pool name ({})", core::printable(name), core::pool_name_rule()));
  std::optional<std::size_t> q;
  if (!quota.is_none()) {
    if (!py::isinstance<py::int_>(quota) || py::isinstance<py::bool_>(quota))
      throw InvalidInput(
          fmt::format("pool '{}': quota must be a positive number of bytes or None", name));
    // The range of every size modelmem reads (model::parse_size).
    q = whole_arg(quota, fmt::format("pool '{}': quota", name), 1, std::size_t{1} << 63,
                  "from 1 byte to 8 EiB (2^63 bytes)");
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  // The quota of a pool the configuration string lists, without retyping it.
  const std::vector<config::PoolQuota> listed = configured_pools(s);
  std::optional<std::size_t> configured;
  for (const auto& p : listed)
    if (p.name == name) configured = p.bytes;
  if (!listed.empty() && !configured) {
    std::string names;
    for (const auto& p : listed) names += (names.empty() ? "" : ", ") + p.name;
    throw InvalidInput(
        fmt::format("pool '{}' is not one of the configuration's pools ({})", name, names));
  }
  if (configured && q && *q != *configured)
    throw InvalidInput(
        fmt::format("pool '{}' has quota {} in the configuration's pools; asked for {}", name,
                    *configured, *q));
  if (configured) q = configured;
  if (auto it = s.pools.find(name); it != s.pools.end()) {
    if (it->second->quota != q)
      throw InvalidInput(
          fmt::format("pool '{}' exists with quota {}; asked for {}", name,
                      it->second->quota ? std::to_string(*it->second->quota) : "None",
                      q ? std::to_string(*q) : "None"));
    return it->second;
  }
  auto p = std::make_shared<Pool>();
  p->name = name;
  p->quota = q;
  if (!s.allocator) {  // no CPU allocator: the pool routes the device libraries' allocations
    s.pools.emplace(name, p);
    return p;
  }
  if (!s.allocator->pools().empty()) {
    // The CPU allocator's own pool of that name (its quota behind a QuotaAdaptor, which the
    // config factory builds for every pool).
    for (const alloc::NamedPool& named : s.allocator->pools())
      if (named.name == name) {
        p->allocator = named.allocator;
        p->adaptor = std::static_pointer_cast<alloc::QuotaAdaptor>(named.allocator);
        p->router = s.allocator;
      }
    s.pools.emplace(name, p);
    return p;
  }
  p->upstream = build_allocator(s.config);
  p->tag = std::make_unique<PoolTag>(s.tap, static_cast<std::uint32_t>(s.pool_names.size()));
  s.pool_names.push_back(name);
  if (q) {
    alloc::QuotaOptions o;
    o.name = name;
    o.quota = *q;
    p->adaptor = std::make_shared<alloc::QuotaAdaptor>(p->upstream, o);
    p->allocator = p->adaptor;
  } else {
    p->allocator = p->upstream;
  }
  // On the outermost allocator: it reports the block events (alloc, free, its quota's OOMs) and
  // passes the listener on to the strategy for its segments. Set on the strategy under a quota,
  // only the strategy's segment events reached MemoryLogger.
  p->allocator->set_listener(p->tag.get());
  p->registration = monitor::publish(p->allocator, {name, "cpu", "", q.value_or(0)});
  s.pools.emplace(name, p);
  return p;
}

std::string report_text() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.allocator) return "modelmem is not PyTorch's CPU allocator in this process\n";
  auto line = [](const char* what, const alloc::Counter& c) {
    return fmt::format("{:<14} current {:>12}, peak {:>12}\n", what, format_bytes(c.current),
                       format_bytes(c.peak));
  };
  auto block = [&](const std::string& title, const alloc::Allocator& a) {
    alloc::Stats st = a.stats();
    std::string out = fmt::format("{}: {}\n", title, a.describe());
    out += line("allocated", st.allocated_bytes.all);
    out += line("reserved", st.reserved_bytes.all);
    out += line("requested", st.requested_bytes.all);
    out += fmt::format("{:<14} {} handed out, {} live\n", "blocks", st.allocation.all.allocated,
                       st.allocation.all.current);
    out += fmt::format("{:<14} {} allocations, {} frees from the OS; {} OOMs, {} retries\n",
                       "device calls", st.num_device_alloc, st.num_device_free, st.num_ooms,
                       st.num_alloc_retries);
    if (st.planned) {
      const alloc::PlannedStats& ps = *st.planned;
      out += fmt::format(
          "{:<14} {} steps, {} plans made, arena {}; {} requests from the arena, "
          "{} missed, {} outside the plans\n",
          "planned", ps.steps, ps.plans_made, format_bytes(ps.arena_size), ps.hits, ps.misses,
          ps.unplanned);
      if (const std::string why = alloc::describe_no_plan(ps); !why.empty())
        out += fmt::format("{:<14} {}\n", "no plan", why);
      if (const std::string faults = alloc::describe_step_faults(ps); !faults.empty())
        out += fmt::format("{:<14} {}\n", "step faults", faults);
    }
    for (const auto& w : st.warnings) out += fmt::format("{:<14} {}\n", "warning", w);
    return out;
  };
  std::string out = fmt::format("modelmem CPU allocator for PyTorch (config '{}')\n", s.config);
  out += block("default", *s.allocator);
  for (const auto& [name, p] : s.pools) {
    std::string title = "pool " + name;
    if (p->adaptor)
      title += fmt::format(" (quota {}, used {}, peak {})", format_bytes(*p->quota),
                           format_bytes(p->adaptor->used()), format_bytes(p->adaptor->peak_used()));
    out += block(title, *p->allocator);
  }
  // The kernel's count for the whole process so far (a run without modelmem compares).
  if (rusage ru{}; getrusage(RUSAGE_SELF, &ru) == 0)
    out += fmt::format("{:<14} {} minor, {} major (the kernel's count for the process so far)\n",
                       "page faults", ru.ru_minflt, ru.ru_majflt);
  return out;
}

}  // namespace

void bind_torch(py::module_& m) {
#ifdef MODELMEM_PY_TORCH
  m.attr("_have_torch") = true;
#else
  m.attr("_have_torch") = false;
#endif
  m.def("_install_cpu_allocator", &install, py::arg("config"));
  m.def("_installed_config", [] {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.allocator ? py::object(py::str(s.config)) : py::object(py::none());
  });
  m.def(
      "_stats",
      [](const std::string& pool) {
        if (pool.empty()) {
          require_installed("stats()");
          return stats_dict(state().allocator->stats());
        }
        std::shared_ptr<Pool> p;
        {
          std::lock_guard<std::mutex> lock(state().mutex);
          auto it = state().pools.find(pool);
          if (it == state().pools.end()) throw InvalidInput(fmt::format("no pool '{}'", pool));
          p = it->second;
        }
        return stats_dict(p->allocator->stats());
      },
      py::arg("pool") = "");
  m.def("_report", &report_text);
  m.def("_describe", [] {
    require_installed("describe()");
    return state().allocator->describe();
  });
  m.def("_begin_step", [] {
    require_installed("step()");
    begin_step();
  });
  m.def("_end_step", [] {
    require_installed("step()");
    end_step();
  });

  py::class_<TraceRecording>(m, "TraceRecording",
                             "Records every allocator event until stop(); then writes the CSV.")
      .def_property_readonly("active", &TraceRecording::active)
      .def("stop", &TraceRecording::stop,
           "Stops recording, writes the trace CSV, returns the Trace.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](TraceRecording& r, py::object, py::object, py::object) {
        if (r.active()) r.stop();
        return false;
      });
  m.def(
      "_trace",
      [](const std::string& path) {
        require_installed("trace()");
        if (path.empty()) throw InvalidInput("trace(path): a file name is needed");
        // Refused now, not at stop() after the whole recording.
        core::check_output_file(path, core::OutputWrite::kReplacing, "trace(path)");
        return std::make_unique<TraceRecording>(path);
      },
      py::arg("path"));

  py::class_<Pool, std::shared_ptr<Pool>>(m, "Pool", R"(A named per-model pool: `with pool:` routes
the current thread's PyTorch CPU allocations to it. A request beyond the quota fails with
PyTorch's out-of-memory error (a RuntimeError) naming the pool and the quota.)")
      .def_readonly("name", &Pool::name)
      .def_readonly("quota", &Pool::quota, "bytes, or None")
      .def_property_readonly(
          "used",
          [](const Pool& p) -> std::size_t {
            if (!p.allocator) return 0;
            return p.adaptor
                       ? p.adaptor->used()
                       : static_cast<std::size_t>(p.allocator->stats().allocated_bytes.all.current);
          },
          "bytes held now")
      .def_property_readonly(
          "peak_used",
          [](const Pool& p) -> std::size_t {
            if (!p.allocator) return 0;
            return p.adaptor
                       ? p.adaptor->peak_used()
                       : static_cast<std::size_t>(p.allocator->stats().allocated_bytes.all.peak);
          })
      .def(
          "stats",
          [](const Pool& p) {
            return stats_dict(p.allocator ? p.allocator->stats() : alloc::Stats{});
          },
          "PyTorch memory_stats() keys for this pool.")
      .def("__enter__",
           [](std::shared_ptr<Pool> p) {
             const std::size_t devices = push_device_pools(p->name);
             if (!p->allocator && devices == 0) {
               pop_device_pools();
               throw Unsupported(fmt::format(
                   "modelmem.pool('{}') routes allocations made through modelmem: call "
                   "modelmem.torch.use_cpu_allocator() first, run the program under `modelmem "
                   "run` (the preload), or load libmodelmem_npu_alloc.so / "
                   "libmodelmem_cuda_alloc.so, with pools:[...] in MODELMEM_ALLOC_CONF",
                   p->name));
             }
             if (p->allocator) {
               if (p->router) {
                 try {
                   alloc::push_pool(*p->router, p->name);
                 } catch (...) {
                   pop_device_pools();
                   throw;
                 }
               }
               t_previous_routes.push_back(current_route());
               // The router's own pool: the installed router, with this thread's selection.
               route(p->router ? nullptr : p->allocator);
             }
             return p;
           })
      .def("__exit__",
           [](Pool& p, py::object, py::object, py::object) {
             pop_device_pools();
             if (!p.allocator) return false;
             if (p.router) alloc::pop_pool();
             std::shared_ptr<alloc::Allocator> prev;
             if (!t_previous_routes.empty()) {
               prev = std::move(t_previous_routes.back());
               t_previous_routes.pop_back();
             }
             route(prev);
             return false;
           })
      .def("__repr__", [](const Pool& p) {
        return fmt::format("<modelmem.Pool {} quota={}>", p.name,
                           p.quota ? std::to_string(*p.quota) : "None");
      });
  m.def("pool", &get_pool, py::arg("name"), py::arg("quota") = py::none(),
        R"(The per-model pool `name` (created on first use with `quota` bytes, or no quota with
None), as a context manager: `with modelmem.pool("bert", quota=2 << 30): model(x)` routes the
current thread's PyTorch CPU allocations to it (after modelmem.torch.use_cpu_allocator()), and its
NPU / CUDA allocations when libmodelmem_npu_alloc.so / libmodelmem_cuda_alloc.so is loaded with
pools:[...] in MODELMEM_ALLOC_CONF. With quota None, a pool the string's pools:[...] lists takes
its quota from there. The pool shows in modelmem.info() and `modelmem info`.)");
}

}  // namespace modelmem::python
