// The shared-memory record a process publishes about its memory pools, and the code that writes
// and reads it. One POSIX shared-memory object per process, named "/modelmem.<user>.<pid>",
// mode 0600. Its layout is a fixed header followed by a fixed number of pool records, every
// field an 8-byte word accessed atomically, guarded by one sequence lock: the writer makes the
// sequence odd, writes, makes it even; a reader copies everything and keeps the copy only when
// it saw the same even sequence before and after. Readers map the object read-only, so they can
// never write into a publisher's segment, and validate every field before trusting it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace modelmem::monitor {

/// One pool (an allocator or a per-model partition) as last published.
struct PoolSnapshot {
  std::string name;          ///< partition / model name
  std::string device;        ///< e.g. "host:0", "cuda:0"
  std::string strategy;      ///< e.g. "caching", "expandable", "static"
  std::uint64_t budget = 0;  ///< quota or planned size in bytes; 0 = none
  std::uint64_t reserved = 0;
  std::uint64_t allocated = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t requested = 0;  ///< bytes callers asked for (before rounding)
  std::uint64_t largest_free_block = 0;
  /// (reserved - allocated - largest free block) / reserved: the share of the pool free only in
  /// pieces outside its largest free block (FRAG in info and top); 0 when nothing is.
  double fragmentation = 0.0;
  std::uint64_t oom_count = 0;
  std::uint64_t alloc_retries = 0;
  std::uint64_t warning_count = 0;      ///< fallback warnings (e.g. no virtual memory)
  std::string warning;                  ///< the first one, truncated
  std::uint64_t alloc_count = 0;        ///< blocks handed out since the pool was made
  std::uint64_t alloc_bytes_total = 0;  ///< bytes handed out since the pool was made
  std::uint64_t free_bytes_total = 0;   ///< bytes given back since the pool was made
  std::uint64_t segments = 0;           ///< device segments held now
  std::uint64_t plan_hits = 0;          ///< planned arena: requests served from a plan
  std::uint64_t plan_misses = 0;        ///< planned arena: requests of planned steps that missed
  std::uint64_t update_time_ns = 0;     ///< wall clock (ns since the Unix epoch)
};

/// One process's segment as last published.
struct ProcessSnapshot {
  std::int64_t pid = 0;
  std::uint64_t uid = 0;
  std::string process_name;
  std::string command;                 ///< the command line, arguments separated by spaces
  std::string segment;                 ///< shared-memory name, e.g. "/modelmem.alice.1234"
  std::uint64_t start_time_ns = 0;     ///< when publishing began (wall clock)
  std::uint64_t proc_start_ticks = 0;  ///< /proc/<pid>/stat start time, to tell a reused pid
  std::uint64_t update_time_ns = 0;
  std::uint64_t update_count = 0;
  std::uint64_t interval_ms = 0;
  std::uint64_t pools_dropped = 0;  ///< pools beyond the segment's capacity, not shown
  std::vector<PoolSnapshot> pools;
};

/// Sizes of the layout (version 3: version 2 with room for a whole fallback warning; version 2:
/// version 1 and the command line). Strings are NUL-padded and cut
/// to these lengths minus one.
inline constexpr std::uint64_t kSegmentMagic = 0x314e4f4d4d454d4dULL;  // "MMEMMON1"
inline constexpr std::uint64_t kSegmentVersion = 3;
inline constexpr std::size_t kProcessNameBytes = 64;
inline constexpr std::size_t kCommandBytes = 256;
inline constexpr std::size_t kPoolNameBytes = 48;
inline constexpr std::size_t kDeviceBytes = 16;
inline constexpr std::size_t kStrategyBytes = 32;
inline constexpr std::size_t kWarningBytes = 512;
inline constexpr std::size_t kDefaultPoolCapacity = 64;
inline constexpr std::size_t kMaxPoolCapacity = 4096;

/// Bytes of a segment holding `capacity` pool records.
std::size_t segment_bytes(std::size_t capacity) noexcept;

/// "/modelmem.<user>.<pid>": the user's login name when it is made of [A-Za-z0-9_-], else
/// "u<uid>".
std::string segment_name(std::uint64_t uid, std::int64_t pid);
/// The prefix every segment name starts with (without the leading slash, as in /dev/shm).
inline constexpr const char* kSegmentPrefix = "modelmem.";
/// The prefix of this process's namespace: kSegmentPrefix, or with MODELMEM_MONITOR_NAMESPACE=NAME
/// (1 to 32 of [A-Za-z0-9_-]) "modelmem_NAME.": processes publish there and `info` / `top` read
/// there only, so a namespace sees its own processes and nobody else's (a test's, a container's).
/// Throws InvalidInput, naming the variable, for another value.
std::string segment_prefix();

/// Writes snapshots into a segment's memory under the sequence lock (the publisher's private
/// image of it, which it copies into the file). Not thread-safe: one writer.
class SegmentWriter {
 public:
  /// `base` must point to segment_bytes(capacity) writable, 8-byte aligned bytes, zeroed (as a
  /// fresh shared-memory object is). Writes the fixed header; the magic last, so a reader never
  /// trusts a half-made header.
  SegmentWriter(void* base, std::size_t capacity, std::int64_t pid, std::uint64_t uid,
                const std::string& process_name, std::uint64_t proc_start_ticks,
                std::uint64_t interval_ms, const std::string& command = "");
  /// Publishes `pools` (the first `capacity` of them) and the update time.
  void write(const std::vector<PoolSnapshot>& pools, std::uint64_t now_ns);
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  std::atomic<std::uint64_t>* words_;
  std::size_t capacity_;
  std::uint64_t update_count_ = 0;
};

/// What reading a segment gave: a snapshot, or why it was not trusted.
struct ReadResult {
  std::optional<ProcessSnapshot> snapshot;
  std::string problem;  ///< set when snapshot is empty: "bad magic", "torn (...)", ...
  bool torn = false;    ///< the sequence never settled (a writer died or stalled mid-update)
};

/// Reads a mapped segment of `bytes` bytes (the object's size from fstat). Validates magic,
/// version, layout sizes and counts, retries while a write is in progress (up to `max_wait_us`
/// microseconds) and never reads outside [base, base + bytes). Never throws.
ReadResult read_segment(const void* base, std::size_t bytes, unsigned max_wait_us = 20000) noexcept;

/// Byte offset of the sequence word (even when no write is in progress): a reader copying a
/// segment with pread checks it before and after the copy.
std::size_t segment_sequence_offset() noexcept;

/// Wall clock, ns since the Unix epoch.
std::uint64_t wall_clock_ns() noexcept;

}  // namespace modelmem::monitor
