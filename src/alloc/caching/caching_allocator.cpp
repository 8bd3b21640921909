// The caching pool's construction (option checks, the device's virtual memory), statistics
// (with the thread caches' corrections), description and teardown.
#include <cstdio>

#include "alloc/caching/impl.hpp"

namespace modelmem::alloc {

Stats CachingAllocator::Impl::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  if (tc_on_) apply_thread_caches(s);
  s.largest_free_block = largest_free();
  return s;
}  // Allocator::stats adds the warnings

void CachingAllocator::Impl::reset_peak() {
  std::lock_guard lock(mu_);
  // Parked blocks count as allocated in the peaks: start from none.
  flush_thread_caches();
  stats_.reset_peaks();
}

void CachingAllocator::Impl::release_everything() noexcept {
  // Threads keep their caches until they exit, but never use them again: the id is gone.
  alive_->store(false, std::memory_order_release);
  caches_.clear();
  // Blocks still allocated are given back too: the pool owns the device memory.
  for (Segment* s : fixed_segments_) {
    device_->deallocate(reinterpret_cast<void*>(s->base), s->size);
    for (Block* b = s->head; b != nullptr;) {
      Block* n = b->next;
      delete b;
      b = n;
    }
    delete s;
  }
  fixed_segments_.clear();
  for (auto& [key, s] : expandable_) {
    // Mapped runs lie between unmapped blocks, which are page-aligned: unmap run by run.
    std::uintptr_t run = 0;
    bool in_run = false;
    for (Block* b = s->head; b != nullptr;) {
      if (b->mapped && !in_run) {
        run = b->addr;
        in_run = true;
      }
      if (!b->mapped && in_run) {
        device_->unmap(reinterpret_cast<void*>(run), b->addr - run);
        in_run = false;
      }
      Block* n = b->next;
      delete b;
      b = n;
    }
    if (in_run) device_->unmap(reinterpret_cast<void*>(run), s->base + s->size - run);
    device_->release(reinterpret_cast<void*>(s->base), s->size);
    delete s;
  }
  expandable_.clear();
  for (Block* b : spare_blocks_) delete b;
  spare_blocks_.clear();
}

namespace {

void validate(const CachingOptions& o) {
  auto bad = [](const std::string& what) { throw InvalidInput("caching pool: " + what); };
  if (!is_pow2(o.round_bytes) || o.round_bytes < 64)
    bad("round_bytes must be a power of two >= 64, got " + std::to_string(o.round_bytes));
  if (o.small_size == 0 || o.small_size % o.round_bytes != 0)
    bad("small_size must be a positive multiple of round_bytes");
  if (o.small_segment < o.small_size || o.small_segment % o.round_bytes != 0)
    bad("small_segment must be >= small_size and a multiple of round_bytes");
  if (o.round_large == 0 || o.round_large % o.round_bytes != 0)
    bad("round_large must be a positive multiple of round_bytes");
  if (o.min_large_alloc <= o.small_size) bad("min_large_alloc must be larger than small_size");
  if (o.large_segment < o.min_large_alloc || o.large_segment % o.round_bytes != 0)
    bad("large_segment must be >= min_large_alloc and a multiple of round_bytes");
  if (o.max_split_size != kNoLimit && o.max_split_size <= o.small_size)
    bad("max_split_size must be larger than small_size");
  for (const auto& [edge, div] : o.roundup_power2_divisions) {
    if (edge != 0 && !is_pow2(edge))
      bad("roundup_power2_divisions: interval edge " + std::to_string(edge) +
          " is not a power of two");
    if (div != 0 && !is_pow2(div))
      bad("roundup_power2_divisions: " + std::to_string(div) + " divisions is not a power of two");
  }
  if (!(o.garbage_collection_threshold >= 0.0 && o.garbage_collection_threshold < 1.0))
    bad("garbage_collection_threshold must be in [0, 1)");
  if (!(o.per_process_memory_fraction > 0.0 && o.per_process_memory_fraction <= 1.0))
    bad("per_process_memory_fraction must be in (0, 1]");
  if (o.expandable_segments && o.max_split_size != kNoLimit)
    bad("expandable_segments cannot be combined with max_split_size");
  if (o.expandable_map_chunk == 0) bad("expandable_map_chunk must be positive");
}

}  // namespace

CachingAllocator::CachingAllocator(device::DevicePtr device, CachingOptions options) {
  if (!device) throw InvalidInput("caching pool: no device");
  validate(options);
  impl_ = std::make_unique<Impl>(this, std::move(device), std::move(options));
  Impl& im = *impl_;
  const auto& o = im.options_;
  im.tc_on_ = o.thread_cache_bytes > 0;
  im.tc_fence_ = im.tc_on_ && o.thread_cache_membarrier && membarrier_available();
  im.tc_max_request_ = std::min(o.small_size, o.thread_cache_bytes);
  im.plain_rounding_ = o.roundup_power2_divisions.empty();
  if (o.per_process_memory_fraction < 1.0 || o.garbage_collection_threshold > 0.0) {
    const std::size_t total = im.device_->memory_info().total;
    im.allowed_ =
        static_cast<std::size_t>(o.per_process_memory_fraction * static_cast<double>(total));
  }
  if (o.expandable_segments) {
    const device::VmProbe probe = im.device_->probe_virtual_memory();
    if (!probe.supported)
      throw Unsupported("expandable_segments is not supported on " + im.device_->name() + " (" +
                        probe.reason + ")");
    im.page_ = im.device_->granularity();
    if (im.page_ == 0 || im.page_ % o.round_bytes != 0)
      throw Unsupported("expandable_segments: granularity " + std::to_string(im.page_) + " of " +
                        im.device_->name() + " is not a multiple of round_bytes");
    im.map_chunk_ = checked_align_up(std::max(o.expandable_map_chunk, im.page_), im.page_,
                                     "expandable_map_chunk");
  }
  im.active_.reserve(1024);
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(impl_->mu_);
  impl_->release_everything();
}

Stats CachingAllocator::do_stats() const {
  // What has been free for cache_decay_ms goes back first: the monitor reads statistics every
  // interval, which is how an idle process gives its cache back (see CachingOptions::decay_ms).
  impl_->decay_now();
  return impl_->stats();
}

void CachingAllocator::do_reset_peak() {
  impl_->reset_peak();
}

void CachingAllocator::do_trim() {
  impl_->trim();
}

LiveBlock CachingAllocator::do_block(const void* ptr) const {
  std::lock_guard lock(impl_->mu_);
  auto it = impl_->active_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == impl_->active_.end()) return {};
  const caching::Block* b = it->second;
  // A block parked in a thread cache was freed already.
  if (b->tc_state.load(std::memory_order_relaxed) == caching::kTcParked) return {};
  return LiveBlock{b->requested, b->stream, 0};
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  impl_->record_stream(ptr, stream);
}

void CachingAllocator::synchronize() {
  impl_->synchronize();
}

const CachingOptions& CachingAllocator::options() const noexcept {
  return impl_->options_;
}

const device::DevicePtr& CachingAllocator::device() const noexcept {
  return impl_->device_;
}

std::string CachingAllocator::do_describe() const {
  const auto& o = impl_->options_;
  std::string s = "caching on " + impl_->device_->name() + ": ";
  if (o.expandable_segments) {
    s += "expandable segments (page " + format_bytes(impl_->page_) + ")";
  } else {
    s += "small <= " + format_bytes(o.small_size) + " from " + format_bytes(o.small_segment) +
         " segments, large from " + format_bytes(o.large_segment) +
         " segments, >= " + format_bytes(o.min_large_alloc) + " rounded to " +
         format_bytes(o.round_large);
  }
  s += ", round " + format_bytes(o.round_bytes);
  s += ", max_split_size " +
       (o.max_split_size == kNoLimit ? std::string("unlimited") : format_bytes(o.max_split_size));
  s += ", roundup_power2_divisions ";
  if (o.roundup_power2_divisions.empty()) {
    s += "off";
  } else {
    bool first = true;
    for (const auto& [edge, div] : o.roundup_power2_divisions) {
      s += (first ? "[" : ",") + (edge == 0 ? std::string("*") : format_bytes(edge)) + ":" +
           std::to_string(div);
      first = false;
    }
    s += "]";
  }
  char buf[96];
  std::snprintf(buf, sizeof buf,
                ", garbage_collection_threshold %g, per_process_memory_fraction %g",
                o.garbage_collection_threshold, o.per_process_memory_fraction);
  s += buf;
  if (o.thread_cache_bytes > 0)
    s += ", thread cache " + format_bytes(o.thread_cache_bytes) + " per thread (" +
         (impl_->tc_fence_ ? "membarrier" : "atomic") + ")";
  return s;
}

}  // namespace modelmem::alloc
