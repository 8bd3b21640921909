// Records allocator events into a bounded ring buffer, for `modelmem analyze/replay/viz` and for
// the LD_PRELOAD library (MODELMEM_TRACE=FILE). Install it with Allocator::set_listener.
//
// Promises: on_event never waits for another thread and never allocates (the ring and the write
// buffer are mapped once, at construction, straight from the OS, so recording a malloc
// replacement does not recurse into it). Any number of threads may record concurrently
// (lock-free multi-producer queue, one CAS per event); draining may run at the same time as
// recording, from one thread at a time (a try-lock: a thread that finds it taken goes on).
//
// Streaming (stream_to): the thread whose event completes a chunk writes the pending events to
// the file, whole lines only, so at most one chunk of recorded events is missing from the file
// at any moment (what a SIGKILL can lose), plus the events of a write in progress.
// When the ring is full, the oldest events make room: written to the stream when there is one,
// otherwise discarded and counted in dropped(); the latest events are kept. A failed write stops
// the stream, cuts the file back to its last whole event and keeps errno in stream_error().
// No heap use anywhere; C++ standard library and POSIX only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "modelmem/alloc/allocator.hpp"

namespace modelmem::trace {

/// Header line of the modelmem trace CSV (docs/traces.md): one event per line, `event` is
/// alloc, free, segment_alloc, segment_free, map, unmap, oom or mark; `address` is hex; empty
/// fields are allowed where a value does not apply. Lines starting with '#' are comments;
/// `# dropped=N` says N events were lost to a full ring buffer so far (cumulative: the largest
/// such line counts).
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
  /// the OS refuses the memory (about 80 bytes per event, and 64 KiB of write buffer).
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
  /// Events discarded because the ring was full (the oldest ones).
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
  /// Creates `path` (core::open_output_file: no symlink followed, mode 0600) and writes it as
  /// above. Returns false on failure (errno set).
  bool write_csv(const char* path) noexcept;

  /// Streams to `fd` (not owned) from now on: writes kCsvHeader at once, then every `chunk`
  /// events (rounded up to a power of two, at most capacity() / 2) the recording thread writes
  /// what is pending. Returns false when the header could not be written (errno set).
  bool stream_to(int fd, std::size_t chunk) noexcept;
  /// Writes every event recorded before the call (and the `# dropped=N` line when it changed) to
  /// the stream, waiting up to a second for a write running on another thread. Events other
  /// threads record meanwhile are left to later writes: a flush in a signal or exit handler
  /// ends however fast they record. Async-signal-safe, no lock beyond the drain flag; returns
  /// false when the stream has failed or the wait ran out (the interrupted thread holds it).
  bool flush() noexcept;
  /// errno of the write that failed (the stream then stopped), 0 when none did.
  int stream_error() const noexcept { return stream_error_.load(std::memory_order_acquire); }
  /// Bytes in the stream's file so far (whole events).
  std::uint64_t stream_bytes() const noexcept {
    return stream_bytes_.load(std::memory_order_relaxed);
  }
  /// In a fork child: forgets the pending events (the parent writes them), the dropped count and
  /// the stream (the caller closes its descriptor). Only the calling thread exists there.
  void forget_after_fork() noexcept;

 private:
  struct Slot;
  bool try_lock() noexcept;
  void unlock() noexcept;
  std::size_t drain_locked(Sink sink, void* context, std::size_t max) noexcept;
  std::size_t stream_locked(std::uint64_t end) noexcept;
  bool make_room() noexcept;

  Slot* slots_ = nullptr;
  char* buffer_ = nullptr;  // the stream's write buffer, used under the drain lock
  std::size_t capacity_ = 0;
  std::size_t mask_ = 0;
  std::size_t mapped_bytes_ = 0;
  alignas(64) std::atomic<std::uint64_t> head_{0};  // next position to write
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // next position to read
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
  std::atomic<long> drainer_{0};  // thread id holding the drain lock, 0 when free
  std::atomic<int> stream_fd_{-1};
  std::atomic<int> stream_error_{0};
  std::atomic<std::uint64_t> stream_bytes_{0};
  std::uint64_t dropped_written_ = 0;  // under the drain lock
  std::size_t chunk_mask_ = 0;
};

}  // namespace modelmem::trace
