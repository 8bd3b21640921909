// The caching pool: PyTorch's CUDA caching allocator policy as defaults, every constant
// configurable, with fixed-size segments or expandable segments (reserve address space per
// (stream, pool), map pages on demand) as the segment source.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/device/device.hpp"

namespace modelmem::alloc {

struct CachingOptions {
  std::size_t round_bytes = 512;         ///< every request is rounded up to this
  std::size_t small_size = 1u << 20;     ///< requests <= go to the small pool
  std::size_t small_segment = 2u << 20;  ///< small pool segment size
  std::size_t large_segment =
      20u << 20;  ///< large pool segment size for requests < min_large_alloc
  std::size_t min_large_alloc = 10u << 20;  ///< requests >= are rounded to round_large
  std::size_t round_large = 2u << 20;
  /// Blocks larger than this are never split (max_split_size_mb); max() = unlimited.
  std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
  /// roundup_power2_divisions: 0 = off. Key = lower edge of a power-of-two size interval in
  /// bytes (0 applies to every size without its own entry), value = number of divisions.
  std::map<std::size_t, unsigned> roundup_power2_divisions;
  /// garbage_collection_threshold in (0, 1): free cached blocks (oldest first) once reserved
  /// exceeds this fraction of the allowed memory. 0 = off.
  double garbage_collection_threshold = 0.0;
  /// cache_decay_ms: cached memory that has stayed free this long goes back to the device (a
  /// time-based decay, as jemalloc's dirty pages); 0 = never (PyTorch's behaviour). Checked
  /// whenever the pool is entered (allocate, free, stats(): the monitor reads statistics every
  /// interval, so an idle process gives its cache back too), at most four times a decay period,
  /// so a block goes back between 1 and 1.25 decay periods (plus the time until the pool is next
  /// entered) after it was freed. Only whole free segments (expandable: whole free pages) go.
  std::size_t decay_ms = 0;
  /// per_process_memory_fraction in (0, 1]: cap on reserved bytes as a fraction of the device's
  /// total memory.
  double per_process_memory_fraction = 1.0;
  bool expandable_segments = false;
  /// Address space reserved per (stream, pool) with expandable segments; 0 = twice the device's
  /// memory (1.125 times, then once, where the device refuses more): see expandable_segment.cpp.
  std::size_t expandable_reserve = 0;
  /// With expandable segments, pages are mapped in calls of at most this many bytes (rounded
  /// to the device granularity), so that a large request maps piece by piece and a failure
  /// half-way is rolled back by the pool, as with one physical handle per page on CUDA.
  std::size_t expandable_map_chunk = 2u << 20;
  /// With expandable segments, before mapping new pages, unmap as many whole free pages cached
  /// elsewhere (oldest first), so growth recycles physical memory instead of adding to it:
  /// peak reserved stays close to peak live, at the price of unmap/map calls while the working
  /// set changes shape (none once a repeating workload has settled). Off = PyTorch's behaviour.
  bool expandable_recycle = true;
  /// With expandable segments: true = one range per (stream, pool) as PyTorch does; false =
  /// one range per stream serving both size classes (small blocks then pin single pages, not
  /// segments, so sharing the range costs little and lets pages move between size classes).
  /// Either way, allocation statistics keep the small / large split by request size; reserved
  /// and segment counts follow the range (the large pool's when shared).
  bool expandable_split_pools = false;
  /// thread_cache_mb: per thread, up to this many bytes of freed small-pool blocks are parked
  /// in a cache of the freeing thread and handed back to the same thread for the same (size,
  /// stream) without taking the pool's lock. 0 = off (PyTorch's behaviour). See the class
  /// comment for what it changes in the statistics.
  std::size_t thread_cache_bytes = 0;
  /// How the pool takes parked blocks back (trim, reset_peak, out of memory) and settles a
  /// block that another thread frees: true = membarrier(2) where the kernel offers it, so a
  /// cache hit costs no atomic read-modify-write; false = one atomic exchange per operation.
  bool thread_cache_membarrier = true;
};

/// Thread-safe (one mutex). Alignment of returned blocks: round_bytes (512 by default).
/// allocate/deallocate are O(log n) in the number of cached blocks; stats() and the
/// out-of-memory path walk the free blocks (O(n)).
///
/// Streams: a block is cached per stream and only reused by requests on the stream it was
/// allocated on. A block that record_stream() tied to other streams is held back when freed
/// (it counts in active_bytes) until synchronize().
///
/// Out of memory: when no cached block fits and the device refuses a new segment (or
/// per_process_memory_fraction forbids it), a ladder of two rungs, each followed by a retry
/// (num_alloc_retries): (1) blocks parked in thread caches go back to the pool and, with
/// max_split_size, cached oversize blocks are freed (the smallest that covers the request, else
/// the largest until enough); (2) every cached whole segment is returned and, with expandable
/// segments, every free page unmapped. If that fails too, OutOfMemory carries the numbers
/// (num_ooms).
///
/// Thread caches (thread_cache_bytes > 0): a block freed by the thread that allocated it is
/// parked in that thread's cache (bounded per thread) and a later request of the same rounded
/// size and stream on that thread takes it back, without the lock. A double free is still an
/// InvalidInput: a parked block is known to the pool as parked. Frees from another thread, and
/// taking parked blocks back, go through the lock and wait for the owner thread to finish its
/// current cache operation. Statistics: current values and totals count parked blocks as free;
/// peaks count them as allocated (an upper bound, off by at most the parked bytes; reset_peak()
/// and trim() take all parked blocks back first).
/// fork(): a child forked while another thread is inside a cache operation must not use the
/// pool (the pool would wait for that thread, which the child does not have); the LD_PRELOAD
/// library serialises its calls with a lock it holds across fork, so it is not affected.
///
/// With expandable segments, reserved_bytes counts mapped bytes, `segment` counts the
/// reserved ranges, and num_device_alloc / num_device_free count map / unmap calls.
/// The destructor returns everything to the device, blocks still allocated included.
class CachingAllocator : public Allocator {
 public:
  /// Throws Unsupported when expandable_segments is set but the device has no virtual memory
  /// (the config factory probes first and falls back instead).
  CachingAllocator(device::DevicePtr device, CachingOptions options = {});
  ~CachingAllocator() override;

  /// The block is also used on `stream`: once freed, it is not reused by any stream until
  /// synchronize() says the streams caught up.
  void record_stream(void* ptr, Stream stream);
  /// All streams are idle: blocks waiting on other streams become reusable.
  void synchronize();
  const CachingOptions& options() const noexcept;
  const device::DevicePtr& device() const noexcept;

 private:
  void* do_allocate(std::size_t size, Stream stream) override;
  void do_deallocate(void* ptr) override;
  Stats do_stats() const override;
  void do_reset_peak() override;
  void do_trim() override;
  std::string do_describe() const override;
  LiveBlock do_block(const void* ptr) const override;
  /// check_invariants(): the blocks of every segment tile it, each block is in exactly one of
  /// the live map, a free set, an unmapped set or the pending list, no two adjacent blocks are
  /// both free (or both unmapped), and the statistics equal a recount of the blocks.
  std::string do_check_invariants() const override;
  std::string do_check_local() const override;
  std::size_t do_invariant_size() const override;

  friend struct CachingAllocatorTestAccess;  // tests/alloc: corrupts a state on purpose
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc
