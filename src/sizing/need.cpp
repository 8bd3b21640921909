// The need of a model on the strategy that serves it (modelmem/sizing/need.hpp): the model's
// allocation sequence replayed through the stack the config factory builds for one pool, on a
// device that hands out addresses without memory, at the smallest quota that serves it.
#include "modelmem/sizing/need.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <mutex>
#include <tuple>

#include "modelmem/alloc/unchecked_scope.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/checked.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/device.hpp"
#include "modelmem/sizing/placement.hpp"
#include "modelmem/trace/replay.hpp"

namespace modelmem::sizing {

namespace {

// The most the order slack takes for half the largest request (see need_of_sequence).
constexpr std::size_t kOrderSlackCap = 64 * kMiB;

std::size_t mib_up(std::size_t bytes) {
  return bytes / kMiB + (bytes % kMiB != 0 ? 1 : 0);
}

// A device with a hard capacity whose memory is never backed unless touched: allocate() maps
// address space without reserving memory (MAP_NORESERVE), reserve() hands out addresses only
// (the strategies never touch what they map), so a need of 80 GiB is found on a machine with far
// less. Nothing touches it: the replay does not write blocks, and the planned arena does not
// prefault a device that is not host_accessible(), so sizing an 80 GiB planned arena costs
// neither time nor memory here. It offers virtual memory (2 MiB pages), as CUDA and most NPUs do.
class AddressDevice : public device::Device {
 public:
  explicit AddressDevice(std::size_t capacity) : capacity_(capacity) {}
  std::string name() const override { return "sizing:0"; }
  void* allocate(std::size_t bytes) override {
    {
      std::lock_guard lock(mutex_);
      take(bytes);
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::lock_guard lock(mutex_);
      used_ -= bytes;
      throw Error(fmt::format("sizing: cannot map {} of address space", format_bytes(bytes)));
    }
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    ::munmap(p, bytes);
    std::lock_guard lock(mutex_);
    used_ -= std::min(used_, bytes);
  }
  device::MemoryInfo memory_info() const override {
    std::lock_guard lock(mutex_);
    return {capacity_ - used_, capacity_};
  }
  device::VmProbe probe_virtual_memory() override { return {true, ""}; }
  std::size_t granularity() const override { return kPage; }
  void* reserve(std::size_t bytes) override {
    std::lock_guard lock(mutex_);
    const std::uintptr_t at = next_;
    next_ += (bytes + kPage - 1) / kPage * kPage + kPage;  // a gap: no two ranges touch
    return reinterpret_cast<void*>(at);
  }
  void release(void*, std::size_t) noexcept override {}
  void map(void*, std::size_t bytes) override {
    std::lock_guard lock(mutex_);
    take(bytes);
  }
  void unmap(void*, std::size_t bytes) noexcept override {
    std::lock_guard lock(mutex_);
    used_ -= std::min(used_, bytes);
  }

 private:
  static constexpr std::size_t kPage = 2 * kMiB;
  void take(std::size_t bytes) {
    if (bytes > capacity_ - used_) {
      OomInfo info;
      info.requested = bytes;
      info.device_free = capacity_ - used_;
      info.where = name();
      throw OutOfMemory(info);
    }
    used_ += bytes;
  }
  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  std::uintptr_t next_ = std::uintptr_t{1} << 46;  // reserved ranges: addresses only
};

bool is_fraction(const std::string& text) {
  return !text.empty() && (text.back() == '%' || text.find('.') != std::string::npos) &&
         text.find_first_of("KMGTkmgtBb") == std::string::npos;
}

}  // namespace

std::string backend_name(Backend kind) {
  switch (kind) {
    case Backend::kCuda:
      return "cuda";
    case Backend::kNpu:
      return "npu";
    case Backend::kHost:
      return "host";
  }
  return "?";
}

Backend parse_backend(const std::string& text) {
  if (text == "npu") return Backend::kNpu;
  // The kinds `place --devices` names (910B3, 310P3, gpu=cuda, cpu=host, ...): one vocabulary
  // for both.
  try {
    return accelerator(text).backend;
  } catch (const InvalidInput&) {
    throw InvalidInput(fmt::format(
        "--device-kind {}: expected cuda, npu, host or a device kind of `place --devices` ({})",
        text, known_device_kinds()));
  }
}

Overhead default_overhead(Backend kind) {
  switch (kind) {
    case Backend::kCuda:
      return {kGiB,
              "default for cuda: the CUDA context (700-800 MiB reported by PyTorch users) and "
              "cuBLAS workspaces, not measured here; give --overhead"};
    case Backend::kNpu:
      return {kGiB, "default for npu: the cuda default, not measured on an NPU; give --overhead"};
    case Backend::kHost:
      return {0,
              "default for host: the process's own memory is outside the pools and the "
              "device:limited budget"};
  }
  return {0, ""};
}

Overhead parse_overhead(const std::string& text, Backend kind, std::size_t device_memory) {
  if (text.empty()) return default_overhead(kind);
  if (is_fraction(text)) {
    const bool percent = text.back() == '%';
    const std::string number = percent ? text.substr(0, text.size() - 1) : text;
    double value = -1;
    auto [p, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || p != number.data() + number.size())
      throw InvalidInput(fmt::format(
          "--overhead '{}': expected a size (512MiB) or a fraction of the device (0.05, 5%)",
          text));
    if (percent) value /= 100;
    if (!(value >= 0 && value < 1))
      throw InvalidInput(fmt::format("--overhead '{}': a fraction must be in [0, 1)", text));
    if (device_memory == 0)
      throw InvalidInput(fmt::format(
          "--overhead '{}': a fraction of the device needs --device-memory SIZE", text));
    return {static_cast<std::size_t>(std::ceil(value * static_cast<double>(device_memory))),
            fmt::format("--overhead {} of {}", text, format_bytes(device_memory))};
  }
  if (text == "0") return {0, "--overhead 0"};
  return {parse_size(text, "--overhead"), fmt::format("--overhead {}", text)};
}

std::string strategy_config(const std::string& text) {
  if (text.empty()) return "strategy:caching";
  std::string given = text;
  if (text.find(':') == std::string::npos) {
    if (text == "caching" || text == "static" || text == "planned")
      given = "strategy:" + text;
    else if (text == "expandable")
      given = "strategy:caching,expandable_segments:True";
    else
      throw InvalidInput(fmt::format(
          "--strategy {}: expected caching, static, planned, expandable or a configuration "
          "string (strategy:caching,...)",
          text));
  }
  config::Config c;
  try {
    c = config::parse_config(given);
  } catch (const InvalidInput& e) {
    throw InvalidInput(fmt::format("--strategy {}: {}", text, e.what()));
  }
  for (const char* key : {"pools", "default_pool", "device", "device_capacity_mb", "device_vmm"})
    if (c.has(key))
      throw InvalidInput(fmt::format(
          "--strategy {}: {} is not a strategy key (the pools and their device are what the "
          "plan sizes)",
          text, key));
  if (c.get("strategy") == "system")
    throw InvalidInput(fmt::format(
        "--strategy {}: the C heap has no pools to size (give caching, static or planned)", text));
  return given;
}

trace::Trace allocation_sequence(const model::ModelPlan& plan, std::size_t inferences, bool weights,
                                 std::size_t min_request) {
  using alloc::EventKind;
  trace::Trace t;
  t.name = plan.graph.source;
  std::uintptr_t address = 4096;
  std::uint64_t time = 0;
  auto push = [&](EventKind kind, std::uintptr_t at, std::size_t size, const char* label) {
    trace::TraceEvent e;
    e.kind = kind;
    e.time_ns = time++;
    e.address = at;
    e.size = size;
    if (label) e.label = label;
    t.events.push_back(std::move(e));
  };
  if (weights)
    for (const auto& tensor : plan.graph.tensors)
      if (tensor.kind == model::TensorKind::kWeight) {
        const std::size_t size = model::activation_bytes(tensor, plan.weight_float_bytes);
        if (size == 0 || size < min_request) continue;
        push(EventKind::kAlloc, address, size, nullptr);
        address += 64;
      }
  const plan::Problem& problem = plan.plan.lifetimes.problem;
  // The caller's inputs are made once, after the weights, and held across inferences (as a
  // program holds its input tensor); every other buffer lives as the plan's lifetimes say.
  std::vector<bool> held(problem.buffers.size(), false);
  for (std::size_t i = 0; i < problem.buffers.size(); ++i)
    for (int tensor : plan.plan.lifetimes.tensors_of[i])
      if (plan.graph.tensors[tensor].kind == model::TensorKind::kInput) held[i] = true;
  for (std::size_t i = 0; i < problem.buffers.size(); ++i)
    if (held[i] && problem.buffers[i].size >= min_request) {
      push(EventKind::kAlloc, address, problem.buffers[i].size, nullptr);
      address += 64;
    }
  // (step, frees before allocations, buffer): the order an eager runtime or an executor runs.
  std::vector<std::tuple<plan::Time, int, std::size_t>> order;
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    if (held[i] || problem.buffers[i].size < min_request) continue;
    // A buffer no tensor holds is a step's own (a convolution's workspace, a matmul's operand
    // copy): PyTorch makes it before the step's output, which it computes into or from.
    const bool own = plan.plan.lifetimes.tensors_of[i].empty();
    order.emplace_back(problem.buffers[i].start, own ? 1 : 2, i);
    order.emplace_back(problem.buffers[i].end, 0, i);
  }
  std::sort(order.begin(), order.end());
  for (std::size_t n = 0; n < inferences; ++n) {
    push(EventKind::kMark, 0, 0, "step_begin");
    const std::uintptr_t base = address;
    for (const auto& [step, alloc, i] : order)
      push(alloc != 0 ? EventKind::kAlloc : EventKind::kFree, base + 64 * i,
           problem.buffers[i].size, nullptr);
    address = base + 64 * (problem.buffers.size() + 1);
    push(EventKind::kMark, 0, 0, "step_end");
  }
  return t;
}

bool serves(const trace::Trace& sequence, const std::string& config_text, std::size_t quota_mib,
            std::size_t* peak_reserved) {
  const std::size_t quota = checked_mul(quota_mib, kMiB, "quota");
  const alloc::UncheckedScope unchecked;  // a measurement, repeated: see unchecked_scope.hpp
  config::Config c = config::parse_config(fmt::format("{},pools:[need:{}],default_pool:need",
                                                      config::for_replay(config_text), quota_mib));
  config::Built built = config::build(c, std::make_shared<AddressDevice>(quota));
  trace::ReplayOptions options;
  options.touch = false;
  trace::ReplayResult r = trace::replay(sequence, *built.allocator, options);
  if (peak_reserved) *peak_reserved = r.peak_reserved;
  return r.ooms == 0;
}

PoolNeed need_of_sequence(const trace::Trace& sequence, const NeedOptions& options,
                          bool eager_order) {
  PoolNeed n;
  n.strategy = strategy_config(options.strategy);
  const trace::Blocks blocks = trace::match_blocks(sequence);
  n.peak_live = trace::peak_live_bytes(sequence, blocks);
  n.requests = blocks.blocks.size();
  n.inferences = std::max<std::size_t>(options.inferences, 1);
  n.min_request = options.min_request;
  // Below the live peak nothing can serve; above, find a quota that does by doubling, then the
  // smallest by bisection: `lo` fails, `hi` serves.
  std::size_t lo = mib_up(n.peak_live) == 0 ? 0 : mib_up(n.peak_live) - 1;
  std::size_t hi = std::max<std::size_t>(1, mib_up(n.peak_live + n.peak_live / 4) + 64);
  std::size_t reserved = 0;
  while (!serves(sequence, n.strategy, hi, &reserved)) {
    ++n.replays;
    lo = hi;
    if (hi > (std::size_t{1} << 44))
      throw Error(fmt::format("{}: no pool up to {} serves the model on {}", sequence.name,
                              format_bytes(hi * kMiB), n.strategy));
    hi *= 2;
  }
  ++n.replays;
  // A pool that reserved less than it was given is served by its reservation too.
  if (reserved > 0 && mib_up(reserved) < hi && mib_up(reserved) > lo) {
    std::size_t r2 = 0;
    ++n.replays;
    if (serves(sequence, n.strategy, mib_up(reserved), &r2)) {
      hi = mib_up(reserved);
      reserved = r2;
    } else {
      lo = mib_up(reserved);
    }
  }
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    std::size_t r2 = 0;
    ++n.replays;
    if (serves(sequence, n.strategy, mid, &r2)) {
      hi = mid;
      reserved = r2;
    } else {
      lo = mid;
    }
  }
  n.replay_mib = hi;
  if (eager_order && config::parse_config(n.strategy).get("strategy") != "static") {
    // Two segments (40 MiB), or half the largest request made and freed again (weights and the
    // input are held: they split no block after them) up to kOrderSlackCap, whichever is more:
    // margins measured with PyTorch (docs/benchmarks.md, need-order, need-order-2x and
    // order-slack-cap). 1.13 needed at most 44 MiB above the replay, and 4 above a 1252 MiB
    // replay; 2.13 under `modelmem run` (MKL's own buffer cache off) 24 above 354 MiB on
    // ConvNeXt-T at 15 and 33 above 330 on Swin-T at 13, and none above ResNet-50's 3.3 GiB at
    // 255, where half its largest request was 390 MiB.
    bool large = false;
    std::size_t largest = 0;
    for (const auto& b : blocks.blocks) {
      large = large || b.size > kMiB;
      if (b.free_index != trace::kNever) largest = std::max(largest, b.size);
    }
    n.order_slack =
        large ? std::max(40 * kMiB, std::min(checked_align_up(largest / 2, 2 * kMiB, "order slack"),
                                             kOrderSlackCap))
              : 4 * kMiB;
  }
  n.need_mib = hi + n.order_slack / kMiB;
  n.need = n.need_mib * kMiB;
  n.peak_reserved = reserved;
  n.overhead = options.overhead;
  n.total = checked_add(n.need, n.overhead.bytes, "total need");
  return n;
}

PoolNeed need_on_strategy(const model::ModelPlan& plan, const NeedOptions& options) {
  const trace::Trace sequence =
      allocation_sequence(plan, std::max<std::size_t>(options.inferences, 1),
                          options.weights_in_pool, options.min_request);
  PoolNeed n = need_of_sequence(sequence, options, plan.options.runtime == model::Runtime::kEager);
  n.runtime = model::runtime_name(plan.options.runtime);
  n.weights = plan.weights_bytes;
  n.ideal = checked_add(plan.weights_bytes, plan.ideal_arena, "ideal need");
  n.eager = checked_add(plan.weights_bytes, plan.eager_peak, "eager need");
  return n;
}

}  // namespace modelmem::sizing
