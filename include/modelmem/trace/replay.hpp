// `modelmem replay`: runs a trace's allocations and frees, in order, through an allocator,
// touching the memory it hands out, and measures what that strategy would have cost: peak
// reserved and live bytes, fragmentation at the peak, device calls, time per alloc+free, OOMs.
// Threads of the trace are replayed on the calling thread in file order. Step marks are passed
// on (begin_step / end_step), so strategies that learn from steps see them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/device/device.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

struct ReplayOptions {
  /// Write one byte per 4 KiB page of every block (as a program would use it); not timed.
  bool touch = true;
  /// Replays of the whole trace (blocks the trace never frees are freed between replays), from
  /// 1 to kMaxRepeat, and at most kMaxReplayedBlocks blocks in all (each one's time is kept).
  std::size_t repeat = 1;
  static constexpr std::size_t kMaxRepeat = 10'000;
  static constexpr std::size_t kMaxReplayedBlocks = 10'000'000;
};

/// InvalidInput, with the range, for a repeat count out of [1, kMaxRepeat] or one that would
/// replay more than kMaxReplayedBlocks blocks of a trace of `blocks` blocks (0: not known yet).
void check_repeat(std::size_t repeat, std::size_t blocks = 0);

struct ReplayResult {
  std::string strategy;
  std::string description;  ///< the allocator's describe()
  std::size_t allocs = 0;
  std::size_t frees = 0;
  std::size_t peak_live = 0;         ///< requested bytes live, as replayed
  std::size_t peak_allocated = 0;    ///< allocator's allocated_bytes peak (after its rounding)
  std::size_t peak_reserved = 0;     ///< allocator's reserved_bytes peak
  double fragmentation_at_peak = 0;  ///< Stats::fragmentation() when live bytes peaked
  std::int64_t device_calls = 0;     ///< device allocations + frees (maps + unmaps)
  double mean_ns = 0;                ///< per block: its allocate + deallocate, mean
  double p99_ns = 0;                 ///< per block: 99th percentile
  std::size_t ooms = 0;
  std::size_t skipped_frees = 0;  ///< frees of blocks the trace never allocated or that failed
  std::vector<std::string> notes;
  double reserved_per_live() const {
    return peak_live == 0 ? 0.0
                          : static_cast<double>(peak_reserved) / static_cast<double>(peak_live);
  }
};

ReplayResult replay(const Trace& trace, alloc::Allocator& allocator,
                    const ReplayOptions& options = {});

/// A device for one replay of `trace`: for a memory snapshot (Trace::snapshot), the snapshot's
/// accelerator simulated (device::make_simulated_device, named "snapshot:0": addresses only, no
/// memory of this machine) with `capacity` bytes, or, when 0 (the snapshot does not record its
/// device's memory), unstated_capacity(trace); nullptr for other traces (host memory, as they
/// were recorded). Each call gives a fresh device, so one replay's use never counts in another.
device::DevicePtr replay_device(const Trace& trace, std::size_t capacity);
/// The capacity of a snapshot's simulated device when none is stated: not a limit, so the
/// replays show what each strategy would take (1 TiB, or 4 times the snapshot's reserved bytes
/// when that is more).
std::size_t unstated_capacity(const Trace& trace);
/// One line saying where replays of `trace` run ("" for a trace replayed on host memory).
std::string replay_device_text(const Trace& trace, std::size_t capacity);

/// What a replay strategy may use to size itself.
struct StrategyContext {
  const Trace& trace;
  std::size_t static_pool_bytes = 0;  ///< analyze's static-pool recommendation for the trace
  bool has_marks = false;
  /// Makes the device a strategy's allocator sits on (replay_device); empty: host memory.
  std::function<device::DevicePtr()> device = {};
};

/// A strategy `modelmem replay` knows by name. Adding one is one entry in replay_strategies().
struct ReplayStrategy {
  std::string name;
  std::string help;
  std::function<std::shared_ptr<alloc::Allocator>(const StrategyContext&)> make;
};
const std::vector<ReplayStrategy>& replay_strategies();

/// `modelmem replay TRACE`: what to replay.
struct ReplayRequest {
  std::string trace;             ///< path of the trace CSV
  ReadOptions read;              ///< skip_bad: `--skip-bad`
  std::string strategy = "all";  ///< a replay_strategies() name, "all", or "config"
  /// A config string replayed as the strategy "config", beside `strategy` (both run: a
  /// `--strategy NAME --config STR` compares the two); "config" alone needs it.
  std::string config;
  ReplayOptions options;
  /// The memory of the device a snapshot's replays simulate (`--device-memory`); 0: not stated
  /// (replay_device). Memory is then never touched (the device's is not this machine's).
  std::size_t device_capacity = 0;
};

/// What `modelmem replay` shows: the trace, one result per strategy replayed, and notes on how
/// the request was read (e.g. that a strategy and a config string were both replayed).
struct ReplayReport {
  std::string trace;
  std::size_t events = 0;
  std::size_t peak_live = 0;          ///< of the trace (requested bytes)
  std::size_t static_pool_bytes = 0;  ///< the size the strategy "static" was given
  std::vector<std::string> warnings;  ///< what reading the trace skipped or found odd
  std::vector<std::string> notes;     ///< about the request
  std::string device;                 ///< replay_device_text ("" on host memory)
  /// A snapshot's pools and PyTorch's totals at the snapshot (Trace::snapshot), else null.
  std::shared_ptr<const SnapshotState> snapshot;
  std::vector<ReplayResult> results;
};

/// Validates the whole request (strategy name, config string, the file) before replaying
/// anything; throws InvalidInput with one line naming what is wrong.
ReplayReport run_replay(const ReplayRequest& request);

/// The table `modelmem replay` prints (header line, one row per strategy, notes), and its JSON:
/// an array with one object per strategy replayed.
std::string to_text(const ReplayReport& report);
nlohmann::json to_json(const ReplayReport& report);

/// The allocator a config string builds (config::build), for `replay --config`, with
/// config::for_replay's settings where the string gives none (a step mark waits for its plan,
/// nothing goes back by age). Throws InvalidInput naming the key for a bad string.
/// With `device`, the stack is built on it (config::build(config, device)); nullptr = host.
std::shared_ptr<alloc::Allocator> allocator_from_config(const std::string& config,
                                                        device::DevicePtr device = nullptr);

}  // namespace modelmem::trace
