// The exit report (MODELMEM_REPORT=1: strategy, small-block cache, planned steps, peaks, OS
// calls on stderr). The trace file is trace_file.cpp's.
#include "report.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include "cache_glue.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/device/host.hpp"
#include "next_allocator.hpp"
#include "state.hpp"

namespace modelmem::preload {

void print_report() {
  Inside inside;
  std::lock_guard lock(g_mutex);
  std::FILE* out = stderr;
  std::fprintf(out, "modelmem preload report (pid %d)\n", static_cast<int>(getpid()));
  std::fprintf(out, "  strategy          %s\n", g_describe ? g_describe->c_str() : "?");
  std::fprintf(out, "  threshold         %s\n", format_bytes(g_threshold).c_str());
  std::fprintf(out, "  small requests    %s\n", next_name().c_str());
  if (g_cache_on.load(std::memory_order_acquire)) {
    ThreadCache& mine = t_cache;  // this thread's counters not flushed yet
    const std::uint64_t hits = g_cache_hits.load() + mine.hits;
    const std::uint64_t misses = g_cache_misses.load() + mine.misses;
    const std::uint64_t passed = g_cache_passed.load() + mine.passed;
    std::fprintf(
        out,
        "  small cache       %s per thread%s%s: %llu hits (%.1f%%), %llu misses, %llu "
        "frees passed on (cache full)\n",
        format_bytes(g_cache_limits.budget).c_str(), g_cache_started ? " " : "",
        g_cache_started ? g_cache_started->c_str() : "", static_cast<unsigned long long>(hits),
        hits + misses == 0 ? 0.0
                           : 100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses),
        static_cast<unsigned long long>(misses), static_cast<unsigned long long>(passed));
  } else if (g_cache_waiting.load(std::memory_order_relaxed)) {
    std::fprintf(out,
                 "  small cache       %s per thread, waiting for the first plan or for the program "
                 "to settle\n",
                 format_bytes(g_cache_limits.budget).c_str());
  } else {
    std::fprintf(out, "  small cache       %s\n", g_cache_off ? g_cache_off->c_str() : "off");
  }
  std::fprintf(out, "  large requests    %llu by modelmem, %llu by the next allocator (refused)\n",
               static_cast<unsigned long long>(g_served),
               static_cast<unsigned long long>(g_large_libc.load()));
  if (const std::string passed = passed_on_summary(); !passed.empty())
    std::fprintf(out, "  passed on         %s\n", passed.c_str());
  alloc::Stats s = g_alloc->stats();
  if (s.planned) {
    const alloc::PlannedStats& p = *s.planned;
    std::fprintf(out, "  steps             %llu (period %llu requests)\n",
                 static_cast<unsigned long long>(p.steps),
                 static_cast<unsigned long long>(p.period));
    std::fprintf(out, "  steps planned     %llu plans made, %llu kept, %llu re-plans\n",
                 static_cast<unsigned long long>(p.plans_made),
                 static_cast<unsigned long long>(p.plans_kept),
                 static_cast<unsigned long long>(p.replans));
    if (const std::string why = alloc::describe_no_plan(p); !why.empty())
      std::fprintf(out, "  no plan           %s\n", why.c_str());
    if (p.plans_deferred > 0)
      std::fprintf(out,
                   "  plans deferred    %llu (ran past planned_solve_ms at their step mark; "
                   "taken %llu ms later in all)\n",
                   static_cast<unsigned long long>(p.plans_deferred),
                   static_cast<unsigned long long>(p.deferred_ms));
    else
      std::fprintf(out, "  plans deferred    0 (every plan was made within planned_solve_ms)\n");
    std::fprintf(out, "  hits              %llu (%s)\n", static_cast<unsigned long long>(p.hits),
                 format_bytes(p.hit_bytes).c_str());
    std::fprintf(out,
                 "  misses            %llu (%llu slot still occupied), %llu in mismatching "
                 "steps; %llu outside plans by design\n",
                 static_cast<unsigned long long>(p.misses),
                 static_cast<unsigned long long>(p.occupied),
                 static_cast<unsigned long long>(p.mismatched_steps),
                 static_cast<unsigned long long>(p.unplanned));
    if (const std::string faults = alloc::describe_step_faults(p); !faults.empty())
      std::fprintf(out, "  faults per step   %s\n", faults.c_str());
    std::fprintf(out, "  peak live         %s\n", format_bytes(p.peak_live).c_str());
    std::fprintf(out, "  arena size        %s (%llu arena allocations)\n",
                 format_bytes(p.arena_size).c_str(),
                 static_cast<unsigned long long>(p.arena_allocations));
    if (p.arena_size > 0) {
      const auto* base = reinterpret_cast<const void*>(p.arena_address);
      const std::size_t bytes = p.arena_size;
      if (p.arena_huge_pages)
        std::fprintf(out,
                     "  arena pages       %s of it in 2 MiB pages (transparent huge pages: %s)\n",
                     format_bytes(device::huge_page_bytes(base, bytes)).c_str(),
                     device::transparent_huge_pages_mode().c_str());
      else
        std::fprintf(out, "  arena pages       4 KiB pages (%s)\n",
                     !p.huge_pages_asked  ? "planned_huge_pages:False"
                     : bytes < (2u << 20) ? "the arena is smaller than one 2 MiB page"
                                          : "the kernel refused transparent huge pages");
    }
  } else {
    std::fprintf(out, "  peak live         %s\n",
                 format_bytes(static_cast<std::size_t>(s.requested_bytes.all.peak)).c_str());
  }
  std::fprintf(out, "  reserved          %s now, %s peak\n",
               format_bytes(static_cast<std::size_t>(s.reserved_bytes.all.current)).c_str(),
               format_bytes(static_cast<std::size_t>(s.reserved_bytes.all.peak)).c_str());
  std::fprintf(out, "  OS calls          %llu (segments mapped and unmapped by modelmem)\n",
               static_cast<unsigned long long>(g_region->os_calls()));
  // What happened, not what modelmem estimates it saved: the kernel's own count for the whole
  // process (modelmem's memory and everyone else's), comparable with a run without modelmem.
  if (rusage ru{}; getrusage(RUSAGE_SELF, &ru) == 0)
    std::fprintf(out,
                 "  page faults       %ld minor, %ld major (the kernel's count for the process)\n",
                 ru.ru_minflt, ru.ru_majflt);
}

}  // namespace modelmem::preload
