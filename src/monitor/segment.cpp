// The shared-memory record of a process's pools: writing and reading it (monitor/segment.hpp).
#include "modelmem/monitor/segment.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"

namespace modelmem::monitor {
namespace {

using Word = std::atomic<std::uint64_t>;
static_assert(Word::is_always_lock_free, "the sequence lock needs lock-free 8-byte atomics");
static_assert(kPoolNameBytes > core::kPoolNameMax, "a record holds every valid pool name whole");
static_assert(sizeof(Word) == 8);

// Header: word indices.
enum Header : std::size_t {
  kMagicWord = 0,
  kVersionWord,
  kHeaderBytesWord,
  kRecordBytesWord,
  kCapacityWord,
  kTotalBytesWord,
  kPidWord,
  kUidWord,
  kStartTimeWord,
  kProcStartWord,
  kSeqWord,
  kPoolCountWord,
  kPoolsDroppedWord,
  kUpdateTimeWord,
  kUpdateCountWord,
  kIntervalWord,
  kProcessNameWord,                                         // kProcessNameBytes / 8 words
  kCommandWord = kProcessNameWord + kProcessNameBytes / 8,  // kCommandBytes / 8 words
  kHeaderWords = kCommandWord + kCommandBytes / 8,
};

// Pool record: word indices relative to the record.
enum Record : std::size_t {
  kNameWord = 0,
  kDeviceWord = kNameWord + kPoolNameBytes / 8,
  kStrategyWord = kDeviceWord + kDeviceBytes / 8,
  kBudgetWord = kStrategyWord + kStrategyBytes / 8,
  kReservedWord,
  kAllocatedWord,
  kPeakAllocatedWord,
  kPeakReservedWord,
  kRequestedWord,
  kLargestFreeWord,
  kFragmentationWord,
  kOomWord,
  kRetriesWord,
  kWarningCountWord,
  kAllocCountWord,
  kAllocBytesWord,
  kFreeBytesWord,
  kSegmentsWord,
  kPoolUpdateWord,
  kPlanHitsWord,
  kPlanMissesWord,
  kSpareWord2,  // room for later fields without a new version
  kSpareWord3,
  kWarningWord,
  kRecordWords = kWarningWord + kWarningBytes / 8,
};

// The fields of a pool record, described once: the word each starts at and the member of
// PoolSnapshot it holds. publish() writes and read_segment() reads the record by these lists;
// the fragmentation (a double's bits) and the update time (the publisher's clock when the pool
// has none) are the two written apart.
struct TextField {
  Record word;
  std::size_t bytes;
  std::string PoolSnapshot::*member;
};
constexpr TextField kTextFields[] = {
    {kNameWord, kPoolNameBytes, &PoolSnapshot::name},
    {kDeviceWord, kDeviceBytes, &PoolSnapshot::device},
    {kStrategyWord, kStrategyBytes, &PoolSnapshot::strategy},
    {kWarningWord, kWarningBytes, &PoolSnapshot::warning},
};
struct NumberField {
  Record word;
  std::uint64_t PoolSnapshot::*member;
};
constexpr NumberField kNumberFields[] = {
    {kBudgetWord, &PoolSnapshot::budget},
    {kReservedWord, &PoolSnapshot::reserved},
    {kAllocatedWord, &PoolSnapshot::allocated},
    {kPeakAllocatedWord, &PoolSnapshot::peak_allocated},
    {kPeakReservedWord, &PoolSnapshot::peak_reserved},
    {kRequestedWord, &PoolSnapshot::requested},
    {kLargestFreeWord, &PoolSnapshot::largest_free_block},
    {kOomWord, &PoolSnapshot::oom_count},
    {kRetriesWord, &PoolSnapshot::alloc_retries},
    {kWarningCountWord, &PoolSnapshot::warning_count},
    {kAllocCountWord, &PoolSnapshot::alloc_count},
    {kAllocBytesWord, &PoolSnapshot::alloc_bytes_total},
    {kFreeBytesWord, &PoolSnapshot::free_bytes_total},
    {kSegmentsWord, &PoolSnapshot::segments},
    {kPlanHitsWord, &PoolSnapshot::plan_hits},
    {kPlanMissesWord, &PoolSnapshot::plan_misses},
};

constexpr std::size_t kHeaderBytes = kHeaderWords * 8;
constexpr std::size_t kRecordBytes = kRecordWords * 8;

void store(Word* w, std::uint64_t v) noexcept {
  w->store(v, std::memory_order_relaxed);
}
std::uint64_t load(const Word* w) noexcept {
  return w->load(std::memory_order_relaxed);
}

// Strings travel as whole words so every access stays atomic (no data race for the reader to
// see, also under ThreadSanitizer). The last byte is always NUL.
void store_string(Word* w, std::size_t bytes, const std::string& s) noexcept {
  std::size_t n = std::min(s.size(), bytes - 1);
  for (std::size_t i = 0; i < bytes / 8; ++i) {
    unsigned char chunk[8] = {};
    for (std::size_t j = 0; j < 8; ++j) {
      std::size_t k = i * 8 + j;
      if (k < n) chunk[j] = static_cast<unsigned char>(s[k]);
    }
    std::uint64_t v;
    std::memcpy(&v, chunk, 8);
    store(w + i, v);
  }
}

// Reads a NUL-padded string, stopping at the first NUL or the field's end, and replaces bytes
// that are not printable ASCII so a hostile segment cannot put escape sequences on a terminal.
std::string load_string(const Word* w, std::size_t bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes / 8; ++i) {
    std::uint64_t v = load(w + i);
    unsigned char chunk[8];
    std::memcpy(chunk, &v, 8);
    for (unsigned char c : chunk) {
      if (c == 0) return out;
      out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
      if (out.size() == bytes - 1) return out;
    }
  }
  return out;
}

ProcessSnapshot copy_out(const Word* h, std::size_t count) {
  ProcessSnapshot p;
  p.pid = static_cast<std::int64_t>(load(h + kPidWord));
  p.uid = load(h + kUidWord);
  p.process_name = load_string(h + kProcessNameWord, kProcessNameBytes);
  p.command = load_string(h + kCommandWord, kCommandBytes);
  p.start_time_ns = load(h + kStartTimeWord);
  p.proc_start_ticks = load(h + kProcStartWord);
  p.update_time_ns = load(h + kUpdateTimeWord);
  p.update_count = load(h + kUpdateCountWord);
  p.interval_ms = load(h + kIntervalWord);
  p.pools_dropped = load(h + kPoolsDroppedWord);
  p.pools.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    const Word* r = h + kHeaderWords + i * kRecordWords;
    PoolSnapshot& s = p.pools[i];
    for (const TextField& f : kTextFields) s.*f.member = load_string(r + f.word, f.bytes);
    for (const NumberField& f : kNumberFields) s.*f.member = load(r + f.word);
    s.fragmentation = std::bit_cast<double>(load(r + kFragmentationWord));
    s.update_time_ns = load(r + kPoolUpdateWord);
  }
  return p;
}

bool user_name_ok(const char* s) {
  if (s == nullptr || *s == 0 || std::strlen(s) > 32) return false;
  for (const char* c = s; *c; ++c) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::size_t segment_bytes(std::size_t capacity) noexcept {
  return kHeaderBytes + capacity * kRecordBytes;
}

std::size_t segment_sequence_offset() noexcept {
  return kSeqWord * 8;
}

std::string segment_name(std::uint64_t uid, std::int64_t pid) {
  std::string user;
  struct passwd pw;
  struct passwd* result = nullptr;
  char buf[1024];
  if (getpwuid_r(static_cast<uid_t>(uid), &pw, buf, sizeof buf, &result) == 0 && result &&
      user_name_ok(result->pw_name)) {
    user = result->pw_name;
  } else {
    user = "u" + std::to_string(uid);
  }
  return "/" + segment_prefix() + user + "." + std::to_string(pid);
}

std::string segment_prefix() {
  const char* ns = std::getenv("MODELMEM_MONITOR_NAMESPACE");
  if (ns == nullptr || *ns == '\0') return kSegmentPrefix;
  const std::string name = ns;
  const bool ok = name.size() <= 32 && std::all_of(name.begin(), name.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                  });
  if (!ok)
    throw InvalidInput("MODELMEM_MONITOR_NAMESPACE='" + core::printable(name) +
                       "': expected 1 to 32 of A-Z a-z 0-9 _ -");
  return "modelmem_" + name + ".";
}

std::uint64_t wall_clock_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

SegmentWriter::SegmentWriter(void* base, std::size_t capacity, std::int64_t pid, std::uint64_t uid,
                             const std::string& process_name, std::uint64_t proc_start_ticks,
                             std::uint64_t interval_ms, const std::string& command)
    : words_(static_cast<Word*>(base)), capacity_(capacity) {
  Word* h = words_;
  store(h + kVersionWord, kSegmentVersion);
  store(h + kHeaderBytesWord, kHeaderBytes);
  store(h + kRecordBytesWord, kRecordBytes);
  store(h + kCapacityWord, capacity);
  store(h + kTotalBytesWord, segment_bytes(capacity));
  store(h + kPidWord, static_cast<std::uint64_t>(pid));
  store(h + kUidWord, uid);
  store(h + kStartTimeWord, wall_clock_ns());
  store(h + kProcStartWord, proc_start_ticks);
  store(h + kIntervalWord, interval_ms);
  store_string(h + kProcessNameWord, kProcessNameBytes, process_name);
  store_string(h + kCommandWord, kCommandBytes, command);
  h[kMagicWord].store(kSegmentMagic, std::memory_order_release);
}

void SegmentWriter::write(const std::vector<PoolSnapshot>& pools, std::uint64_t now_ns) {
  Word* h = words_;
  Word* seq = h + kSeqWord;
  std::uint64_t s = seq->load(std::memory_order_relaxed);
  seq->store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);

  std::size_t count = std::min(pools.size(), capacity_);
  store(h + kPoolCountWord, count);
  store(h + kPoolsDroppedWord, pools.size() - count);
  store(h + kUpdateTimeWord, now_ns);
  store(h + kUpdateCountWord, ++update_count_);
  for (std::size_t i = 0; i < count; ++i) {
    Word* r = h + kHeaderWords + i * kRecordWords;
    const PoolSnapshot& p = pools[i];
    for (const TextField& f : kTextFields) store_string(r + f.word, f.bytes, p.*f.member);
    for (const NumberField& f : kNumberFields) store(r + f.word, p.*f.member);
    store(r + kFragmentationWord, std::bit_cast<std::uint64_t>(p.fragmentation));
    store(r + kPoolUpdateWord, p.update_time_ns != 0 ? p.update_time_ns : now_ns);
  }
  seq->store(s + 2, std::memory_order_release);
}

ReadResult read_segment(const void* base, std::size_t bytes, unsigned max_wait_us) noexcept {
  ReadResult out;
  try {
    if (base == nullptr || bytes < kHeaderBytes) {
      out.problem = "truncated: " + std::to_string(bytes) + " bytes, smaller than the header";
      return out;
    }
    if (reinterpret_cast<std::uintptr_t>(base) % 8 != 0) {
      out.problem = "misaligned mapping";
      return out;
    }
    const Word* h = static_cast<const Word*>(base);
    std::uint64_t magic = h[kMagicWord].load(std::memory_order_acquire);
    if (magic != kSegmentMagic) {
      out.problem = magic == 0 ? "not initialised (no magic)" : "bad magic";
      return out;
    }
    if (load(h + kVersionWord) != kSegmentVersion) {
      out.problem = "unsupported version " + std::to_string(load(h + kVersionWord));
      return out;
    }
    if (load(h + kHeaderBytesWord) != kHeaderBytes || load(h + kRecordBytesWord) != kRecordBytes) {
      out.problem = "bad layout (header or record size)";
      return out;
    }
    std::uint64_t capacity = load(h + kCapacityWord);
    if (capacity > kMaxPoolCapacity) {
      out.problem = "bad capacity " + std::to_string(capacity);
      return out;
    }
    std::uint64_t total = load(h + kTotalBytesWord);
    if (total != segment_bytes(capacity)) {
      out.problem = "bad size field";
      return out;
    }
    if (total > bytes) {
      out.problem =
          "truncated: " + std::to_string(bytes) + " of " + std::to_string(total) + " bytes";
      return out;
    }

    const Word* seq = h + kSeqWord;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(max_wait_us);
    for (unsigned attempt = 0;; ++attempt) {
      std::uint64_t s1 = seq->load(std::memory_order_acquire);
      if ((s1 & 1) == 0) {
        std::uint64_t count = load(h + kPoolCountWord);
        if (count <= capacity) {
          ProcessSnapshot snap = copy_out(h, static_cast<std::size_t>(count));
          std::atomic_thread_fence(std::memory_order_acquire);
          if (seq->load(std::memory_order_relaxed) == s1) {
            out.snapshot = std::move(snap);
            return out;
          }
        } else if (seq->load(std::memory_order_relaxed) == s1) {
          out.problem = "bad pool count " + std::to_string(count);
          return out;
        }
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        out.torn = true;
        out.problem = (s1 & 1) ? "torn (a write never finished)" : "torn (still changing)";
        return out;
      }
      if (attempt > 16) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } catch (const std::exception& e) {
    out.snapshot.reset();
    out.problem = std::string("unreadable: ") + e.what();
    return out;
  }
}

}  // namespace modelmem::monitor
