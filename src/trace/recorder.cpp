#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <new>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/trace/recorder.hpp"

namespace modelmem::trace {

namespace {

constexpr const char* kNames[] = {"alloc", "free",  "segment_alloc", "segment_free",
                                  "map",   "unmap", "oom",           "mark"};
constexpr std::size_t kKinds = sizeof(kNames) / sizeof(kNames[0]);

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
  mapped_bytes_ = checked_mul(capacity_, sizeof(Slot), "trace ring size");
  void* p =
      ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error("trace recorder: cannot map " + format_bytes(mapped_bytes_) + " for " +
                std::to_string(capacity_) + " events: " + std::strerror(errno));
  slots_ = static_cast<Slot*>(p);
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
    } else if (diff < 0) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
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

std::size_t Recorder::drain(Sink sink, void* context, std::size_t max) noexcept {
  if (draining_.exchange(true, std::memory_order_acquire)) return 0;  // another drainer runs
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
    sink(e, context);
    ++count;
  }
  draining_.store(false, std::memory_order_release);
  return count;
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
      &out);
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
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_csv(fd, true);
  int saved = errno;
  if (::close(fd) != 0 && ok) return false;
  errno = saved;
  return ok;
}

}  // namespace modelmem::trace
