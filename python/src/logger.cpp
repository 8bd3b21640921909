// modelmem.MemoryLogger: every allocation and free made through modelmem while it is active, each
// allocation with its Python caller. It listens to the CPU allocator (use_cpu_allocator) through
// torch.cpp's tap, and to the NPU and CUDA pluggable libraries loaded in the process through their
// C listener (modelmem_npu_add_listener, config/listener_abi.h): those libraries are other copies
// of modelmem, so their events arrive as modelmem_events carrying the device and the pool's name.
#include <fmt/format.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common.hpp"
#include "frames.h"
#include "modelmem/config/listener_abi.h"
#include "modelmem/core/error.hpp"
#include "modelmem/trace/recorder.hpp"
#include "modelmem/trace/trace.hpp"
#include "py_trace.hpp"
#include "torch_state.hpp"

namespace modelmem::python {

namespace {

using alloc::EventKind;

class Logger;
std::atomic<Logger*> g_active{nullptr};  // one logger at a time

class Logger final : public alloc::Listener {
 public:
  explicit Logger(bool stacks) : stacks_(stacks && modelmem_py_frames_supported() != 0) {
    names_.emplace_back();  // 0: no site / no name
    devices_.push_back("cpu");
  }
  ~Logger() override { stop(); }

  void start() {
    if (active_) throw InvalidInput("this MemoryLogger is already active");
    Logger* expected = nullptr;
    if (!g_active.compare_exchange_strong(expected, this))
      throw Unsupported("another MemoryLogger is active (one at a time)");
    try {
      if (cpu_allocator_installed()) {
        if (!attach_cpu_logger(this))
          throw Unsupported("another MemoryLogger is active (one at a time)");
        cpu_ = true;
      }
      attach_devices();
      if (!cpu_ && libraries_.empty())
        throw Unsupported(
            "MemoryLogger works on allocations made through modelmem: call "
            "modelmem.torch.use_cpu_allocator() first, or load libmodelmem_npu_alloc.so / "
            "libmodelmem_cuda_alloc.so (torch_npu's NPUPluggableAllocator, PyTorch's "
            "CUDAPluggableAllocator) before the logger starts");
    } catch (...) {
      detach_all();
      g_active.store(nullptr);
      throw;
    }
    active_ = true;
  }
  void stop() {
    if (!active_) return;
    detach_all();
    active_ = false;
    g_active.store(nullptr);
  }

  // The CPU allocator's events.
  void on_event(const alloc::Event& e) noexcept override { record(e, nullptr, nullptr); }

  // A device library's events (its listener thread is the allocating thread).
  static void on_device_event(const modelmem_event* e, void* user) noexcept {
    if (e == nullptr || e->version < 1) return;
    auto* self = static_cast<Logger*>(user);
    const alloc::Event ev{static_cast<EventKind>(e->kind),
                          e->time_ns,
                          static_cast<std::uintptr_t>(e->address),
                          static_cast<std::size_t>(e->size),
                          reinterpret_cast<alloc::Stream>(e->stream),
                          e->pool,
                          e->thread,
                          e->label};
    self->record(ev, e->device_name, e->pool_name);
  }

  struct Record {
    EventKind kind;
    std::uint64_t time_ns;
    std::uintptr_t address;
    std::size_t size;
    alloc::Stream stream;
    std::uint32_t pool;
    std::uint64_t thread;
    std::uint32_t site;       ///< names_ index (0: none)
    std::uint32_t device;     ///< devices_ index (0: cpu)
    std::uint32_t pool_name;  ///< names_ index (0: a CPU pool, named at read time)
  };

  std::shared_ptr<trace::Trace> to_trace(const std::optional<std::string>& device) const {
    auto t = std::make_shared<trace::Trace>();
    t->name = "MemoryLogger";
    std::lock_guard<std::mutex> lock(mutex_);
    std::optional<std::uint32_t> only;
    if (device) {
      only = device_index_locked(*device);
      if (!only)
        throw InvalidInput(fmt::format("MemoryLogger: no event on device '{}' (seen: {})", *device,
                                       devices_text_locked()));
    }
    t->events.reserve(records_.size());
    for (const Record& r : records_)
      if (!only || r.device == *only)
        t->events.push_back(
            {r.kind, r.time_ns, r.address, r.size, r.stream, r.pool, r.thread, names_[r.site], 0});
    t->dropped = dropped_.load();
    return t;
  }

  py::list events() const {
    std::vector<Record> copy;
    std::vector<std::string> names, devices;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      copy = records_;
      names = names_;
      devices = devices_;
    }
    py::list out;
    for (const Record& r : copy) {
      py::dict d;
      d["event"] = trace::event_name(r.kind);
      d["device"] = devices[r.device];
      d["pool"] = r.device == 0 ? cpu_pool_name(r.pool) : names[r.pool_name];
      d["size"] = r.size;
      d["address"] = r.address;
      d["stream"] = static_cast<std::uint64_t>(r.stream);
      d["time_ns"] = r.time_ns;
      d["thread"] = r.thread;
      d["site"] = names[r.site];
      out.append(std::move(d));
    }
    return out;
  }

  std::vector<std::string> devices() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> seen;
    std::vector<bool> used(devices_.size(), false);
    for (const Record& r : records_) used[r.device] = true;
    for (std::size_t i = 0; i < devices_.size(); ++i)
      if (used[i]) seen.push_back(devices_[i]);
    return seen;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_.size();
  }
  bool active() const { return active_; }
  bool stacks() const { return stacks_; }

 private:
  struct Library {
    void* handle;
    int (*remove)(int);
    int id;
  };

  void record(const alloc::Event& e, const char* device, const char* pool) noexcept {
    try {
      modelmem_py_frame f{nullptr, 0};
      const bool framed = e.kind == EventKind::kAlloc && stacks_ && modelmem_py_caller(&f) != 0;
      std::lock_guard<std::mutex> lock(mutex_);  // one lock per event
      std::uint32_t site = 0;
      if (framed) site = site_of_locked(f);
      if (e.kind == EventKind::kMark && e.label != nullptr) site = intern_locked(e.label);
      const std::uint32_t dev = device != nullptr ? device_of_locked(device) : 0;
      const std::uint32_t pool_name = pool != nullptr ? intern_locked(pool) : 0;
      records_.push_back(
          {e.kind, e.time_ns, e.address, e.size, e.stream, e.pool, e.thread, site, dev, pool_name});
    } catch (...) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Registers with every device library loaded in the process that can tell its events.
  void attach_devices() {
    for (const DeviceLibrary& lib : kDeviceLibraries) {
      void* h = dlopen(lib.soname, RTLD_NOLOAD | RTLD_LAZY);
      if (h == nullptr) continue;
      auto add = reinterpret_cast<int (*)(modelmem_event_fn, void*)>(dlsym(h, lib.add_listener));
      auto remove = reinterpret_cast<int (*)(int)>(dlsym(h, lib.remove_listener));
      if (add == nullptr || remove == nullptr) {  // an older library: nothing to listen to
        dlclose(h);
        continue;
      }
      const int id = add(&Logger::on_device_event, this);
      if (id < 0) {
        auto error = reinterpret_cast<const char* (*)()>(dlsym(h, lib.error));
        std::string why = error != nullptr ? error() : "";
        dlclose(h);
        throw Unsupported(fmt::format("MemoryLogger: {}: {}", lib.soname, why));
      }
      libraries_.push_back({h, remove, id});
    }
  }
  void detach_all() noexcept {
    for (const Library& l : libraries_) {
      l.remove(l.id);  // waits for callbacks in progress
      dlclose(l.handle);
    }
    libraries_.clear();
    if (cpu_) detach_cpu_logger(this);
    cpu_ = false;
  }

  struct KeyHash {
    std::size_t operator()(const std::pair<const void*, int>& k) const noexcept {
      return std::hash<const void*>()(k.first) ^
             (static_cast<std::size_t>(k.second) * 0x9e3779b97f4a7c15ull);
    }
  };
  std::uint32_t site_of_locked(const modelmem_py_frame& f) {
    auto key = std::make_pair(f.code, f.lasti);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    char text[256];
    modelmem_py_describe(&f, text, sizeof text);
    std::uint32_t id = intern_locked(text);
    cache_.emplace(key, id);
    return id;
  }
  std::uint32_t intern_locked(const std::string& s) {
    auto [it, inserted] = name_ids_.try_emplace(s, static_cast<std::uint32_t>(names_.size()));
    if (inserted) names_.push_back(s);
    return it->second;
  }
  std::uint32_t device_of_locked(const char* name) {
    for (std::size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i] == name) return static_cast<std::uint32_t>(i);
    devices_.emplace_back(name);
    return static_cast<std::uint32_t>(devices_.size() - 1);
  }
  std::optional<std::uint32_t> device_index_locked(const std::string& name) const {
    for (std::size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i] == name) return static_cast<std::uint32_t>(i);
    return std::nullopt;
  }
  std::string devices_text_locked() const {
    std::string out;
    std::vector<bool> used(devices_.size(), false);
    for (const Record& r : records_) used[r.device] = true;
    for (std::size_t i = 0; i < devices_.size(); ++i)
      if (used[i]) out += (out.empty() ? "" : ", ") + devices_[i];
    return out.empty() ? "none" : out;
  }

  const bool stacks_;
  bool active_ = false;
  bool cpu_ = false;
  std::vector<Library> libraries_;
  mutable std::mutex mutex_;
  std::vector<Record> records_;
  std::vector<std::string> names_;    // sites, mark labels and pool names
  std::vector<std::string> devices_;  // "cpu", "npu:0", ...
  std::unordered_map<std::string, std::uint32_t> name_ids_;
  std::unordered_map<std::pair<const void*, int>, std::uint32_t, KeyHash> cache_;
  std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace

void bind_logger(py::module_& m) {
  py::class_<Logger>(m, "MemoryLogger", R"(Records every allocation and free made through modelmem
while active (`with modelmem.MemoryLogger() as log:`): the CPU allocator (use_cpu_allocator) and
the NPU / CUDA pluggable libraries loaded in the process (torch_npu's NPUPluggableAllocator,
PyTorch's CUDAPluggableAllocator), each event with its device and pool, each allocation with its
Python caller (file:line function, the innermost frame outside torch and modelmem) when
stacks=True.)")
      .def(py::init<bool>(), py::arg("stacks") = true)
      .def("__enter__",
           [](py::object self) {
             self.cast<Logger&>().start();
             return self;
           })
      .def("__exit__",
           [](Logger& l, py::object, py::object, py::object) {
             l.stop();
             return false;
           })
      .def("start", &Logger::start)
      .def("stop", &Logger::stop)
      .def_property_readonly("active", &Logger::active)
      .def_property_readonly("stacks", &Logger::stacks, "whether Python callers are recorded")
      .def_property_readonly("devices", &Logger::devices,
                             "The devices with events, in the order first seen ('cpu', 'npu:0').")
      .def("__len__", &Logger::size)
      .def("events", &Logger::events,
           "Every event as a dict: event, device, pool, size, address, stream, time_ns, thread, "
           "site.")
      .def("trace", &Logger::to_trace, py::arg("device") = py::none(),
           "The recorded events (of one device, e.g. 'npu:0', or all) as a modelmem.Trace.")
      .def(
          "save",
          [](const Logger& l, const std::filesystem::path& fpath,
             const std::optional<std::string>& device) {
            trace::write_csv(*l.to_trace(device), fpath);
          },
          py::arg("path"), py::arg("device") = py::none(),
          "Writes the recorded events (of one device, or all) as a trace CSV (sites in the label "
          "column).")
      .def(
          "analyze",
          [](const Logger& l, const std::string& solver, double time_limit,
             const std::optional<std::string>& device) {
            return analyze_trace(*l.to_trace(device), solver, time_limit);
          },
          py::arg("solver") = "", py::arg("time_limit") = 2.0, py::arg("device") = py::none(),
          "Trace.analyze() of the recorded events (of one device, or all), with the top "
          "allocation sites.");
}

}  // namespace modelmem::python
