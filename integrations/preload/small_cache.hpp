// A per-thread cache of small blocks in front of the C library's malloc, for the LD_PRELOAD
// library.
//
// Why: a framework makes thousands of small objects per operator (PyTorch eager, ResNet-50 at
// batch 1: about 16,000 requests below 64 KiB per inference, 4,400 of them posix_memalign(64)).
// glibc 2.36 serves aligned requests without its thread cache (_int_memalign splits a larger
// chunk every time) and keeps at most 7 blocks per size in it, so these requests cost it far
// more than tcmalloc or mimalloc. This cache keeps freed blocks per thread and size class and
// hands them out again without a lock or a call into the C library.
//
// The blocks stay the C library's blocks: the cache only delays their free, so realloc,
// malloc_usable_size and a later free of them work as before. On a miss the C library is asked
// for the whole class size, so the block returns to the same class when freed. Its class is
// found from malloc_usable_size when it is freed (the largest class that fits), and 64-byte
// aligned blocks are kept apart so that aligned requests are served by aligned blocks only.
//
// Safety: a block in a cache holds a random per-process key in its second word, cleared on
// every way out of the cache (handed out, swept, drained), so a freed block that carries the
// key is already in some thread's cache: a double free, reported, never a block kept twice and
// handed out to two callers. A thread's blocks go back to the C library when the thread exits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace modelmem::preload {

constexpr std::size_t kCacheStep = 16;        // classes of 16 bytes
constexpr std::size_t kCacheFineMax = 1024;   // up to 1 KiB,
constexpr std::size_t kCacheMax = 64u << 10;  // then four per doubling up to 64 KiB
constexpr std::size_t kCacheAlign = 64;       // aligned requests up to this alignment
constexpr std::size_t kPageAlign = 4096;      // blocks at page boundaries are not kept
constexpr int kFineClasses = 64;
constexpr int kCacheClasses = kFineClasses + 6 * 4 + 1;  // index 0: no class

/// Bytes of class `c` (1 .. kCacheClasses-1).
constexpr std::size_t class_size(int c) noexcept {
  if (c <= kFineClasses) return static_cast<std::size_t>(c) * kCacheStep;
  const int k = c - kFineClasses - 1;
  const std::size_t base = kCacheFineMax << (k / 4);
  return base + base / 4 * static_cast<std::size_t>(k % 4 + 1);
}

/// The smallest class that holds `size` bytes (size <= kCacheMax).
inline int class_ceil(std::size_t size) noexcept {
  if (size <= kCacheFineMax)
    return size == 0 ? 1 : static_cast<int>((size + kCacheStep - 1) / kCacheStep);
  const int doubling = 63 - __builtin_clzll(size - 1) - 10;  // size in (1 KiB << d, 2 KiB << d]
  const std::size_t base = kCacheFineMax << doubling;
  const std::size_t quarter = (size - base + base / 4 - 1) / (base / 4);  // 1 .. 4
  return kFineClasses + 1 + doubling * 4 + static_cast<int>(quarter) - 1;
}

/// The largest class a block of `usable` bytes can serve, or 0 (too small, or too large to
/// keep: more than a quarter above the largest class).
inline int class_floor(std::size_t usable) noexcept {
  if (usable < kCacheStep) return 0;
  if (usable < kCacheFineMax + kCacheFineMax / 4)  // below the first class above 1 KiB
    return static_cast<int>(std::min(usable / kCacheStep, std::size_t{kFineClasses}));
  if (usable >= kCacheMax) return usable <= kCacheMax + kCacheMax / 4 ? kCacheClasses - 1 : 0;
  const int doubling = 63 - __builtin_clzll(usable) - 10;  // usable in [1 KiB << d, 2 KiB << d)
  const std::size_t base = kCacheFineMax << doubling;
  return kFineClasses + doubling * 4 + static_cast<int>((usable - base) / (base / 4));
}

/// Limits of every thread's cache.
struct CacheLimits {
  std::size_t budget = 0;                     // bytes kept per thread at most (0: the cache is off)
  std::uint32_t max_blocks[kCacheClasses]{};  // blocks kept per class and alignment at most
};

/// Limits for `budget` bytes per thread: each class may keep up to an eighth of the budget,
/// at least 4 and at most 4096 blocks.
inline CacheLimits cache_limits(std::size_t budget) noexcept {
  CacheLimits l;
  l.budget = budget;
  for (int c = 1; c < kCacheClasses; ++c) {
    std::size_t n = budget / 8 / class_size(c);
    if (n < 4) n = 4;
    if (n > 4096) n = 4096;
    l.max_blocks[c] = budget == 0 ? 0 : static_cast<std::uint32_t>(n);
  }
  return l;
}

/// One thread's cache. Trivially constructible and destructible, so it can live in
/// initial-exec thread-local storage (reading it never allocates). Aligned to a cache line, so
/// which of its bins share a line does not depend on what else the TLS block holds.
struct alignas(64) ThreadCache {
  struct Block {
    Block* next;
    std::uintptr_t key;
  };
  struct Bin {
    Block* head = nullptr;
    std::uint32_t count = 0;
    std::uint32_t low = 0;  // fewest blocks in the list since the last sweep
  };
  enum class Put { kept, full, double_free };
  // Clears a block's mark as it leaves the cache. Volatile: when the block is freed right after,
  // the compiler would otherwise drop the store as dead (it knows free), and the block would
  // come back from the C library still marked, a false double free.
  static void unmark(Block* b) noexcept { *static_cast<volatile std::uintptr_t*>(&b->key) = 0; }
  static constexpr std::uint64_t kSweepEvery = 256;

  Bin bins[2][kCacheClasses];  // [0]: any alignment; [1]: 64-byte aligned blocks
  std::size_t bytes = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t passed = 0;  // freed blocks passed on to the C library (cache full)
  std::uint64_t sweeps = 0;
  std::uint64_t full_since_sweep = 0;  // frees that found the budget spent since the last sweep
  int state = 0;  // 0 new, 1 registered for thread exit, 2 thread exiting: keep nothing

  /// A cached block of class `c`, or nullptr. `aligned`: it must be 64-byte aligned; else an
  /// unaligned block is preferred and an aligned one taken when there is none.
  void* take(int c, bool aligned) noexcept {
    Bin* bin = &bins[1][c];
    if (!aligned && bins[0][c].head != nullptr) bin = &bins[0][c];
    Block* b = bin->head;
    if (b == nullptr) {
      ++misses;
      return nullptr;
    }
    bin->head = b->next;
    if (--bin->count < bin->low) bin->low = bin->count;
    bytes -= class_size(c);
    unmark(b);
    ++hits;
    return b;
  }

  /// Keeps the freed block `p` of `usable` bytes; `full` when it must go to the C library.
  /// When the budget is spent, blocks no request needed since the last such sweep are handed
  /// to `release` first (once per kSweepEvery frees that found the budget spent).
  template <typename Release>
  Put put(void* p, std::size_t usable, std::uintptr_t key, const CacheLimits& limits,
          Release&& release) noexcept {
    const int c = class_floor(usable);
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    // A block at a page boundary most likely answered a page-aligned request (valloc,
    // memalign(4096): oneDNN makes dozens per convolution); kept here, it would make the C
    // library cut a new aligned block out of fresh memory for the next such request.
    if (c == 0 || state == 2 || address % kPageAlign == 0) return Put::full;
    const bool aligned = address % kCacheAlign == 0;
    Bin& bin = bins[aligned ? 1 : 0][c];
    auto* b = static_cast<Block*>(p);
    if (b->key == key) return Put::double_free;  // in this cache or another thread's
    const std::size_t size = class_size(c);
    if (bytes + size > limits.budget && ++full_since_sweep >= kSweepEvery) sweep(release);
    if (bin.count >= limits.max_blocks[c] || bytes + size > limits.budget) {
      ++passed;
      return Put::full;
    }
    b->key = key;
    b->next = bin.head;
    bin.head = b;
    bin.count++;
    bytes += size;
    return Put::kept;
  }

  /// Releases, in every list, the blocks that stayed unused since the last sweep (the list's
  /// low-water mark), so sizes a program stopped asking for do not hold the budget.
  template <typename Release>
  void sweep(Release&& release) noexcept {
    for (int a = 0; a < 2; ++a)
      for (int c = 1; c < kCacheClasses; ++c) {
        Bin& bin = bins[a][c];
        if (bin.low > 0) {
          // The unused blocks are the oldest, at the end of the list: keep the first ones.
          const std::uint32_t keep = bin.count - bin.low;
          Block** link = &bin.head;
          for (std::uint32_t i = 0; i < keep; ++i) link = &(*link)->next;
          Block* b = *link;
          *link = nullptr;
          while (b != nullptr) {
            Block* next = b->next;
            unmark(b);
            release(static_cast<void*>(b));
            bin.count--;
            bytes -= class_size(c);
            b = next;
          }
        }
        bin.low = bin.count;
      }
    full_since_sweep = 0;
    sweeps++;
  }

  /// Hands every cached block to `release` (the C library's free) and empties the cache.
  template <typename Release>
  void drain(Release&& release) noexcept {
    for (auto& family : bins)
      for (auto& bin : family) {
        while (Block* b = bin.head) {
          bin.head = b->next;
          unmark(b);
          release(static_cast<void*>(b));
        }
        bin.count = 0;
        bin.low = 0;
      }
    bytes = 0;
  }
};

}  // namespace modelmem::preload
