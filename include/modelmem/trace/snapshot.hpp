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
//   A block's allocation site (its innermost frame outside PyTorch's own files, as
//   "file.py:LINE function") becomes the label of its alloc event; allocation_sites() ranks them.
//   Events of device D have pool D; devices are merged by time_us (or listed one after the other
//   without it, at 1 us per event, with a warning).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

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

}  // namespace modelmem::trace
