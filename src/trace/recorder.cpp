// The trace recorder (trace/recorder.hpp): a Listener that keeps events in a lock-free ring
// and writes them as CSV lines, from a signal handler too.
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <new>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/trace/recorder.hpp"

namespace modelmem::trace {

namespace {

constexpr const char* kNames[] = {"alloc", "free",  "segment_alloc", "segment_free",
                                  "map",   "unmap", "oom",           "mark"};
constexpr std::size_t kKinds = sizeof(kNames) / sizeof(kNames[0]);
// The stream's write buffer: one write(2) per 64 KiB of lines.
constexpr std::size_t kBufferBytes = std::size_t{64} << 10;

// Hand-written formatting: snprintf may take locks or allocate on some libcs, and this runs in
// processes whose malloc is being traced.
struct LineWriter {
  char* out;
  std::size_t capacity;
  std::size_t length = 0;
  bool overflow = false;

  void put(char c) noexcept {
    if (length + 1 >= capacity) {
      overflow = true;
      return;
    }
    out[length++] = c;
  }
  void put(const char* s) noexcept {
    while (*s != '\0') put(*s++);
  }
  void put_dec(std::uint64_t v) noexcept {
    char digits[20];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (n > 0) put(digits[--n]);
  }
  void put_hex(std::uint64_t v) noexcept {
    put("0x");
    char digits[16];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v != 0);
    while (n > 0) put(digits[--n]);
  }
};

bool write_all(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

struct Recorder::Slot {
  std::atomic<std::uint64_t> sequence;
  alloc::EventKind kind;
  std::uint32_t pool;
  std::uint64_t time_ns;
  std::uintptr_t address;
  std::size_t size;
  alloc::Stream stream;
  std::uint64_t thread;
  char label[kMaxLabel + 1];
};

const char* event_name(alloc::EventKind kind) noexcept {
  auto i = static_cast<std::size_t>(kind);
  return i < kKinds ? kNames[i] : "unknown";
}

std::optional<alloc::EventKind> parse_event_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kKinds; ++i)
    if (name == kNames[i]) return static_cast<alloc::EventKind>(i);
  return std::nullopt;
}

std::size_t format_csv_line(const alloc::Event& e, char* out, std::size_t capacity) noexcept {
  LineWriter w{out, capacity};
  const bool mark = e.kind == alloc::EventKind::kMark;
  w.put(event_name(e.kind));
  w.put(',');
  w.put_dec(e.time_ns);
  w.put(',');
  if (!mark) {
    w.put_hex(e.address);
    w.put(',');
    w.put_dec(e.size);
    w.put(',');
    w.put_dec(e.stream);
    w.put(',');
    w.put_dec(e.pool);
  } else {
    w.put(",,,");
  }
  w.put(',');
  w.put_dec(e.thread);
  w.put(',');
  if (e.label != nullptr) w.put(e.label);
  w.put('\n');
  if (w.overflow) return 0;
  out[w.length] = '\0';
  return w.length;
}

Recorder::Recorder(std::size_t capacity) {
  capacity_ = std::bit_ceil(capacity < 2 ? std::size_t{2} : capacity);
  mask_ = capacity_ - 1;
  mapped_bytes_ = checked_add(checked_mul(capacity_, sizeof(Slot), "trace ring size"), kBufferBytes,
                              "trace ring size");
  void* p =
      ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error("trace recorder: cannot map " + format_bytes(mapped_bytes_) + " for " +
                std::to_string(capacity_) + " events: " + std::strerror(errno));
  slots_ = static_cast<Slot*>(p);
  buffer_ = static_cast<char*>(p) + capacity_ * sizeof(Slot);
  for (std::size_t i = 0; i < capacity_; ++i) {
    Slot* s = new (&slots_[i]) Slot{};
    s->sequence.store(i, std::memory_order_relaxed);
  }
}

Recorder::~Recorder() {
  if (slots_ != nullptr) ::munmap(slots_, mapped_bytes_);
}

void Recorder::on_event(const alloc::Event& e) noexcept {
  // Vyukov's bounded queue: a slot is free for position p when its sequence equals p, and
  // holds the event of position p once its sequence is p + 1.
  std::uint64_t pos = head_.load(std::memory_order_relaxed);
  Slot* slot;
  for (;;) {
    slot = &slots_[pos & mask_];
    std::uint64_t seq = slot->sequence.load(std::memory_order_acquire);
    auto diff = static_cast<std::int64_t>(seq - pos);
    if (diff == 0) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
    } else if (diff < 0) {  // full: the oldest events make room, or this one is dropped
      if (!make_room()) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      pos = head_.load(std::memory_order_relaxed);
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
  slot->kind = e.kind;
  slot->pool = e.pool;
  slot->time_ns = e.time_ns;
  slot->address = e.address;
  slot->size = e.size;
  slot->stream = e.stream;
  slot->thread = e.thread;
  std::size_t n = 0;
  if (e.label != nullptr) {
    for (; n < kMaxLabel && e.label[n] != '\0'; ++n) {
      char c = e.label[n];
      // Keep the CSV one event per line whatever a caller names its marks.
      slot->label[n] = (c == ',' || c == '\n' || c == '\r' || c == '"') ? '_' : c;
    }
  }
  slot->label[n] = '\0';
  slot->sequence.store(pos + 1, std::memory_order_release);
  // The event that completes a chunk writes the pending ones (unless another thread is at it).
  if (((pos + 1) & chunk_mask_) == 0 && stream_fd_.load(std::memory_order_relaxed) >= 0 &&
      try_lock()) {
    stream_locked(pos + 1);
    unlock();
  }
}

void Recorder::mark(const char* label) noexcept {
  on_event(alloc::Event{alloc::EventKind::kMark, alloc::now_ns(), 0, 0, 0, 0,
                        alloc::this_thread_id(), label});
}

std::size_t Recorder::pending() const noexcept {
  std::uint64_t head = head_.load(std::memory_order_relaxed);
  std::uint64_t tail = tail_.load(std::memory_order_relaxed);
  return head > tail ? static_cast<std::size_t>(head - tail) : 0;
}

bool Recorder::try_lock() noexcept {
  long expected = 0;
  const long self = ::syscall(SYS_gettid);
  return drainer_.compare_exchange_strong(expected, self, std::memory_order_acquire);
}

void Recorder::unlock() noexcept {
  drainer_.store(0, std::memory_order_release);
}

std::size_t Recorder::drain(Sink sink, void* context, std::size_t max) noexcept {
  if (!try_lock()) return 0;  // another drainer runs
  std::size_t count = drain_locked(sink, context, max);
  unlock();
  return count;
}

std::size_t Recorder::drain_locked(Sink sink, void* context, std::size_t max) noexcept {
  std::size_t count = 0;
  std::uint64_t pos = tail_.load(std::memory_order_relaxed);
  while (count < max) {
    Slot& slot = slots_[pos & mask_];
    if (slot.sequence.load(std::memory_order_acquire) != pos + 1) break;  // empty or in flight
    char label[kMaxLabel + 1];
    std::memcpy(label, slot.label, sizeof label);
    alloc::Event e{slot.kind,   slot.time_ns, slot.address, slot.size,
                   slot.stream, slot.pool,    slot.thread,  label[0] != '\0' ? label : nullptr};
    slot.sequence.store(pos + capacity_, std::memory_order_release);
    ++pos;
    tail_.store(pos, std::memory_order_release);
    if (sink != nullptr) sink(e, context);
    ++count;
  }
  return count;
}

bool Recorder::make_room() noexcept {
  if (!try_lock()) return false;
  std::size_t removed = 0;
  if (stream_fd_.load(std::memory_order_relaxed) >= 0)
    removed = stream_locked(head_.load(std::memory_order_acquire));
  if (removed == 0) {
    // No stream (or it failed): the oldest eighth of the ring is discarded and counted.
    removed = drain_locked(nullptr, nullptr, capacity_ / 8 > 0 ? capacity_ / 8 : 1);
    dropped_.fetch_add(removed, std::memory_order_relaxed);
  }
  unlock();
  return removed > 0;
}

namespace {

struct CsvSink {
  int fd;
  bool ok = true;
  char buffer[16384] = {};
  std::size_t used = 0;

  void flush() noexcept {
    if (ok && used > 0) ok = write_all(fd, buffer, used);
    used = 0;
  }
  void append(const char* data, std::size_t n) noexcept {
    if (used + n > sizeof buffer) flush();
    std::memcpy(buffer + used, data, n);
    used += n;
  }
};

}  // namespace

bool Recorder::write_csv(int fd, bool header) noexcept {
  CsvSink out{fd, true};
  if (header) {
    out.append(kCsvHeader.data(), kCsvHeader.size());
    out.append("\n", 1);
  }
  drain(
      [](const alloc::Event& e, void* ctx) {
        auto* sink = static_cast<CsvSink*>(ctx);
        char line[256];
        std::size_t n = format_csv_line(e, line, sizeof line);
        sink->append(line, n);
      },
      &out, pending());  // what was recorded before the call, however fast threads record
  if (std::uint64_t lost = dropped(); lost > 0) {
    char line[64];
    LineWriter w{line, sizeof line};
    w.put("# dropped=");
    w.put_dec(lost);
    w.put('\n');
    out.append(line, w.length);
  }
  out.flush();
  return out.ok;
}

bool Recorder::write_csv(const char* path) noexcept {
  int fd = core::open_output_file(path, 0600, nullptr);
  if (fd < 0) return false;
  bool ok = write_csv(fd, true);
  int saved = errno;
  if (::close(fd) != 0 && ok) return false;
  errno = saved;
  return ok;
}

namespace {

// Lines gathered in the recorder's buffer and written whole; a failed write cuts the file back
// to the end of the last buffer written, so it always ends at a whole event.
struct StreamSink {
  int fd;
  char* buffer;
  std::uint64_t written;  // bytes in the file
  std::size_t used = 0;
  int error = 0;

  void flush() noexcept {
    if (error == 0 && used > 0) {
      if (write_all(fd, buffer, used)) {
        written += used;
      } else {
        error = errno != 0 ? errno : EIO;
        while (::ftruncate(fd, static_cast<off_t>(written)) != 0 && errno == EINTR) {
        }
      }
    }
    used = 0;
  }
  void append(const char* data, std::size_t n) noexcept {
    if (used + n > kBufferBytes) flush();
    std::memcpy(buffer + used, data, n);
    used += n;
  }
};

std::size_t dropped_line(std::uint64_t count, char* out, std::size_t capacity) noexcept {
  LineWriter w{out, capacity};
  w.put("# dropped=");
  w.put_dec(count);
  w.put('\n');
  return w.length;
}

}  // namespace

// Writes the events before position `end` (at most): the writer's work is bounded by what was
// recorded when it started, so threads that keep recording cannot keep it writing (a livelock
// that made a SIGINT'd multi-threaded program hang in its signal handler's flush).
std::size_t Recorder::stream_locked(std::uint64_t end) noexcept {
  const int fd = stream_fd_.load(std::memory_order_acquire);
  if (fd < 0) return 0;
  const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
  const std::uint64_t todo = end > tail ? end - tail : 0;
  const std::size_t max = todo < capacity_ ? static_cast<std::size_t>(todo) : capacity_;
  if (max == 0 && dropped() <= dropped_written_) return 0;
  StreamSink out{fd, buffer_, stream_bytes_.load(std::memory_order_relaxed)};
  if (std::uint64_t lost = dropped(); lost > dropped_written_) {
    char line[64];
    out.append(line, dropped_line(lost, line, sizeof line));
    dropped_written_ = lost;
  }
  std::size_t count = drain_locked(
      [](const alloc::Event& e, void* ctx) {
        char line[256];
        std::size_t n = format_csv_line(e, line, sizeof line);
        static_cast<StreamSink*>(ctx)->append(line, n);
      },
      &out, max);
  out.flush();
  stream_bytes_.store(out.written, std::memory_order_relaxed);
  if (out.error != 0) {
    stream_error_.store(out.error, std::memory_order_release);
    stream_fd_.store(-1, std::memory_order_release);
  }
  return count;
}

bool Recorder::stream_to(int fd, std::size_t chunk) noexcept {
  std::size_t c = std::bit_ceil(chunk < 1 ? std::size_t{1} : chunk);
  if (c > capacity_ / 2) c = capacity_ / 2 > 0 ? capacity_ / 2 : 1;
  chunk_mask_ = c - 1;
  stream_error_.store(0, std::memory_order_relaxed);
  if (!write_all(fd, kCsvHeader.data(), kCsvHeader.size()) || !write_all(fd, "\n", 1)) {
    stream_error_.store(errno, std::memory_order_relaxed);
    return false;
  }
  stream_bytes_.store(kCsvHeader.size() + 1, std::memory_order_relaxed);
  stream_fd_.store(fd, std::memory_order_release);
  return true;
}

bool Recorder::flush() noexcept {
  const long self = ::syscall(SYS_gettid);
  for (int waited_ms = 0; !try_lock(); ++waited_ms) {
    // The holder is this very thread (a signal interrupted its write), or it does not finish.
    if (drainer_.load(std::memory_order_relaxed) == self || waited_ms >= 1000) return false;
    struct timespec ms {
      0, 1000000
    };
    ::nanosleep(&ms, nullptr);
  }
  // Only what was recorded before this flush: stream_locked stops at `end` or at a slot still
  // being filled (by a thread this signal interrupted, perhaps), whichever comes first.
  const std::uint64_t end = head_.load(std::memory_order_acquire);
  while (stream_locked(end) > 0) {
  }
  unlock();
  return stream_error() == 0 && stream_fd_.load(std::memory_order_relaxed) >= 0;
}

void Recorder::forget_after_fork() noexcept {
  // Threads that were recording do not exist here: slots they had reserved would never be
  // published, so the ring starts afresh.
  for (std::size_t i = 0; i < capacity_; ++i)
    slots_[i].sequence.store(i, std::memory_order_relaxed);
  head_.store(0, std::memory_order_relaxed);
  tail_.store(0, std::memory_order_relaxed);
  dropped_.store(0, std::memory_order_relaxed);
  dropped_written_ = 0;
  stream_fd_.store(-1, std::memory_order_relaxed);
  stream_error_.store(0, std::memory_order_relaxed);
  stream_bytes_.store(0, std::memory_order_relaxed);
  drainer_.store(0, std::memory_order_release);
}

}  // namespace modelmem::trace
