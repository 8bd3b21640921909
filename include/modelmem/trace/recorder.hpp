// Records allocator events into a bounded ring buffer, for `modelmem analyze/replay/viz` and for
// the LD_PRELOAD library (MODELMEM_TRACE=FILE). Install it with Allocator::set_listener.
//
// Promises: on_event never blocks and never allocates (the ring is mapped once, at construction,
// straight from the OS, so recording a malloc replacement does not recurse into it); when the
// ring is full the event is counted in dropped() and discarded. Any number of threads may record
// concurrently (lock-free multi-producer queue, one CAS per event); draining may run at the same
// time as recording, from one thread at a time. The CSV writer formats into a stack buffer and
// writes with write(2): no heap use either. C++ standard library and POSIX only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "modelmem/alloc/allocator.hpp"

namespace modelmem::trace {

/// Header line of the modelmem trace CSV (docs in README "traces"): one event per line,
/// `event` is alloc, free, segment_alloc, segment_free, map, unmap, oom or mark; `address` is
/// hex; empty fields are allowed where a value does not apply. Lines starting with '#' are
/// comments; `# dropped=N` says N events were lost to a full ring buffer.
inline constexpr std::string_view kCsvHeader =
    "event,time_ns,address,size,stream,pool,thread,label";

/// Longest label kept per event (longer ones are cut).
inline constexpr std::size_t kMaxLabel = 23;

/// "alloc", "free", ... for an event kind.
const char* event_name(alloc::EventKind kind) noexcept;
/// The kind for a name (also accepts the names above only); nullopt when unknown.
std::optional<alloc::EventKind> parse_event_name(std::string_view name) noexcept;

/// Formats one CSV line (with '\n') into `out`; returns its length, or 0 when `capacity` is too
/// small (256 bytes always suffice).
std::size_t format_csv_line(const alloc::Event& event, char* out, std::size_t capacity) noexcept;

class Recorder final : public alloc::Listener {
 public:
  /// Capacity in events, rounded up to a power of two (at least 2). Throws modelmem::Error when
  /// the OS refuses the memory (about 80 bytes per event).
  explicit Recorder(std::size_t capacity = std::size_t{1} << 20);
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void on_event(const alloc::Event& event) noexcept override;
  /// A user annotation (e.g. "step_begin") stamped now on the calling thread.
  void mark(const char* label) noexcept;

  std::size_t capacity() const noexcept { return capacity_; }
  /// Events accepted so far (including those already drained).
  std::uint64_t recorded() const noexcept { return head_.load(std::memory_order_relaxed); }
  /// Events discarded because the ring was full.
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  /// Events waiting to be drained (approximate while threads record).
  std::size_t pending() const noexcept;

  /// Removes up to `max` events in recording order, calling `sink(event, context)` for each;
  /// returns how many. Labels passed to the sink live until the sink returns.
  using Sink = void (*)(const alloc::Event& event, void* context);
  std::size_t drain(Sink sink, void* context, std::size_t max = SIZE_MAX) noexcept;

  /// Drains every pending event into `fd` as CSV lines; with `header`, writes kCsvHeader first;
  /// always ends with a `# dropped=N` line (cumulative) when dropped() > 0. Returns false when a
  /// write failed (errno says why); events drained before the failure are lost.
  bool write_csv(int fd, bool header = true) noexcept;
  /// Creates or truncates `path` and writes it as above. Returns false on failure.
  bool write_csv(const char* path) noexcept;

 private:
  struct Slot;
  Slot* slots_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t mask_ = 0;
  std::size_t mapped_bytes_ = 0;
  alignas(64) std::atomic<std::uint64_t> head_{0};  // next position to write
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // next position to read
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace modelmem::trace
