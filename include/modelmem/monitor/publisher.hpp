// Publishing a process's pools for `modelmem info` and `modelmem top`. A pool is registered once
// (publish()); a background thread copies each registered allocator's Stats into this process's
// shared-memory segment every interval (default 200 ms), so the allocation path pays nothing.
// The segment is created with the first pool and removed at normal exit (and when publishing
// is stopped). Thread-safe; fork-safe (a child publishes under its own pid, never the parent's).
//
// Settings, first match wins: configure() called before the first pool, then the environment
// (MODELMEM_MONITOR=0 turns publishing off; MODELMEM_MONITOR_INTERVAL_MS=N sets the interval),
// then the defaults.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/monitor/segment.hpp"

namespace modelmem::monitor {

/// Describes a pool to readers. Empty fields are filled in: strategy from the first word of the
/// allocator's describe(), device "?".
struct PoolInfo {
  std::string name;
  std::string device;
  std::string strategy;
  std::size_t budget = 0;  ///< quota or planned size in bytes; 0 = none
};

/// Called after each snapshot of a pool to add what Stats does not hold (e.g. plan hits).
using SnapshotFill = std::function<void(PoolSnapshot&)>;

struct PublisherOptions {
  bool enabled = true;
  std::chrono::milliseconds interval{200};
  std::size_t capacity = kDefaultPoolCapacity;  ///< pool records in the segment
};

/// Keeps a pool published; unpublishes it when destroyed. Movable, not copyable.
class PoolRegistration {
 public:
  PoolRegistration() = default;
  PoolRegistration(PoolRegistration&& other) noexcept : id_(other.id_) { other.id_ = 0; }
  PoolRegistration& operator=(PoolRegistration&& other) noexcept;
  PoolRegistration(const PoolRegistration&) = delete;
  PoolRegistration& operator=(const PoolRegistration&) = delete;
  ~PoolRegistration() { reset(); }
  void reset() noexcept;
  bool active() const noexcept { return id_ != 0; }

 private:
  friend PoolRegistration publish(std::shared_ptr<const alloc::Allocator>, PoolInfo, SnapshotFill);
  explicit PoolRegistration(std::uint64_t id) : id_(id) {}
  std::uint64_t id_ = 0;
};

/// Publishes `allocator` under `info` until the registration is destroyed or the allocator
/// expires (only a weak reference is kept; the publisher thread briefly holds a strong one while
/// it copies the statistics). Returns an inactive registration when publishing is off or the
/// segment cannot be created (a one-line note on stderr says why); never throws for that.
/// The plan hits and misses come from Stats::planned; `fill`, when given, completes each
/// snapshot.
[[nodiscard]] PoolRegistration publish(std::shared_ptr<const alloc::Allocator> allocator,
                                       PoolInfo info, SnapshotFill fill = {});

/// Sets the options; takes effect for a segment created afterwards (call before publish()).
void configure(const PublisherOptions& options);
/// The effective options (after the environment).
PublisherOptions options();

/// Copies the statistics now, synchronously (tests; just before a planned exit).
void publish_now();
/// Stops the thread and removes the segment; a later publish() starts again.
void shutdown() noexcept;
/// The segment name while publishing ("" when not).
std::string current_segment();

/// Turns an allocator's Stats into a record (exposed for tests and for adaptors that publish
/// their own numbers).
PoolSnapshot snapshot_of(const alloc::Stats& stats, const PoolInfo& info);

/// "/proc/self/stat" start time of a process (clock ticks since boot); 0 when unknown.
std::uint64_t process_start_ticks(std::int64_t pid) noexcept;
/// The short name of the running program (/proc/self/comm).
std::string this_process_name();
/// The running program's command line (/proc/self/cmdline, arguments joined by spaces).
std::string this_process_command();

}  // namespace modelmem::monitor
