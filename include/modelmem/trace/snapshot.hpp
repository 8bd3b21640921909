// PyTorch and torch_npu memory snapshots as traces. `torch.cuda.memory._dump_snapshot(path)`
// (and torch_npu's `torch_npu.npu.memory._dump_snapshot`) write a pickle of a dict:
//   segments:      [{device, address, total_size, stream, blocks: [{address?, size, state,
//                    frames}], ...}]    the allocator's state when the snapshot was taken
//   device_traces: [[{action, addr, size, stream, time_us?, frames: [{filename, line, name}]}]]
//                  one list per device, oldest first; torch_npu has no time_us
// read through the safe pickle subset (trace/pickle.hpp: nothing in the file is executed).
// The conversion:
//   alloc -> alloc; free_requested -> free (the caller's end of the block); free_completed ->
//   free only when no free_requested came first; free (older PyTorch) -> free; segment_alloc /
//   segment_free -> segment events; segment_map / segment_unmap -> map / unmap; oom -> oom;
//   snapshot, workspace_snapshot -> a mark with that label. Other actions are skipped with a
//   warning.
//   Segments and live blocks that existed before the first recorded event (the history is a
//   bounded ring) are worked out backwards from the final state and appear as segment_alloc /
//   alloc events at the start, so reserved and live memory are right from the first event.
//   A block's allocation site (its innermost frame of the program: not PyTorch's, the C++
//   runtime's or the interpreter's, as "file.py:LINE function") becomes the label of its alloc
//   event; allocation_sites() ranks them.
//   Pools: each (device, segment_pool_id) is one pool (SnapshotState), numbered in that order;
//   an event has the pool of the segment holding its address at the snapshot, else its device's
//   default pool. Devices are merged by time_us (or listed one after the other without it, at
//   1 us per event, with a warning).
//   external_annotations (profiler record_function START/END marks) become step_begin marks at
//   each START of the annotation that repeats (ProfilerStep#N first, else the most frequent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

/// One pool of a snapshot at the moment it was taken, counted as PyTorch counts it: reserved =
/// the segments' total_size, allocated = the size of the active_allocated blocks (rounded by the
/// allocator: torch.cuda.memory_allocated), requested = their requested_size (what the program
/// asked for; the trace's alloc events and live figures count these).
struct SnapshotPool {
  std::size_t index = 0;     ///< the pool number its events carry (TraceEvent::pool)
  std::uint32_t device = 0;  ///< the segments' device
  std::string id;            ///< segment_pool_id as "(0,2)"; "" where the file has none
  /// "default" (id (0,0) or none), "private" (a MemPool or a CUDA graph's pool), or "KV cache"
  /// when allocation sites of a KV cache (is_kv_cache_site) hold most of its allocated bytes.
  std::string kind;
  std::size_t segments = 0;
  std::size_t blocks = 0;  ///< active_allocated blocks
  std::size_t reserved = 0;
  std::size_t allocated = 0;
  std::size_t requested = 0;
  std::size_t pending_free = 0;  ///< active_pending_free blocks: freed, waiting for their streams
  std::size_t kv_cache = 0;      ///< allocated bytes at KV-cache sites
  std::string top_site;          ///< the site holding most of its allocated bytes ("" = none)
  std::size_t top_site_bytes = 0;
};

/// What a snapshot says beside its events.
struct SnapshotState {
  std::vector<SnapshotPool> pools;  ///< by index
  std::size_t reserved() const;
  std::size_t allocated() const;
  std::size_t requested() const;
  std::size_t pending_free() const;
  /// The external annotation whose STARTs became step marks, and how many there were ("" and
  /// 0 when the file has none that repeats).
  std::string step_annotation;
  std::size_t step_marks = 0;
  std::size_t annotations = 0;  ///< external_annotations entries read
};

/// True for a stack frame of PyTorch (torch/, torch_npu/), of Python's standard library
/// (lib/python3.X/), of the C++ runtime and the interpreter (c10::, at::, torch::, std::, Py*,
/// __libc*, ...), or of unknown code ("??", "",
/// "<built-in>"): frames an allocation site skips. `file` may use / or \\.
bool is_runtime_frame(std::string_view file, std::string_view function);
/// True for a frame that allocates a KV cache (vLLM's cache engine and kv_cache tensors,
/// SGLang's mem_cache pools, transformers' cache_utils).
bool is_kv_cache_site(std::string_view file, std::string_view function);

/// Converts snapshot bytes. Throws InvalidInput naming the file (and the byte offset for a
/// malformed or refused pickle, the entry for a wrong layout).
Trace parse_snapshot(std::string_view data, const std::string& name,
                     const ReadOptions& options = {});
Trace read_snapshot(const std::filesystem::path& path, const ReadOptions& options = {});

/// True when the file starts like a pickle (protocol 2-5). read_trace() reads such a file with
/// read_snapshot(), so every command taking a trace takes a snapshot too.
bool is_snapshot_file(const std::filesystem::path& path);

/// Allocations grouped by the label of their alloc events (the site, for snapshots and
/// MemoryLogger traces), most bytes first.
struct AllocationSite {
  std::string site;
  std::size_t allocs = 0;
  std::size_t bytes = 0;
  std::size_t live_at_end = 0;  ///< bytes of its blocks never freed in the trace
};
std::vector<AllocationSite> allocation_sites(const Trace& trace, std::size_t top = 10);
/// "allocation sites" lines for `modelmem analyze` ("" when no alloc event has a label).
std::string sites_text(const std::vector<AllocationSite>& sites);

/// The pools of a snapshot as `modelmem analyze` shows them, one line each and the total,
/// allocated against requested bytes said apart ("" for a trace that is not a snapshot).
std::string pools_text(const SnapshotState& state);

}  // namespace modelmem::trace
