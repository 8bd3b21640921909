// Writes files in the layout of MindSpore's memory tracker (memory_block.csv, as
// MemoryTrackerEnabled::DumpMemoryBlock writes it: a header, then one row per block in allocation
// order, every field followed by a comma, nothing quoted), for tests. The blocks are made up here
// by a small simulation of the tracker's counter (each task launch, allocation and free adds
// one); no real MindSpore output is copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace modelmem::test {

// The columns of MindSpore 2.6+ (20) and of 2.3-2.4 (15, before actual_used_memory,
// last_user_task, python_stack, is_persistent and is_small).
inline const char* kTrackerHeaderNew =
    "start_time_stamp,end_time_stamp,device_addr,stream_id,pool_type,size,actual_used_memory,"
    "actual_peak_memory,file_name,line_num,type,producer_task,task_name,node_name,graph_name,"
    "user_tasks,last_user_task,python_stack,is_persistent,is_small,";
inline const char* kTrackerHeaderOld =
    "start_time_stamp,end_time_stamp,device_addr,stream_id,pool_type,size,actual_peak_memory,"
    "file_name,line_num,type,producer_task,task_name,node_name,graph_name,user_tasks,";

class TrackerWriter {
 public:
  static constexpr std::int64_t kNever = INT64_MAX;

  explicit TrackerWriter(bool new_layout = true) : new_(new_layout) {}

  /// A task launch (the counter advances).
  void task() { ++stamp_; }
  /// A block of `size` bytes allocated now; returns its index for free().
  std::size_t alloc(std::size_t size, const std::string& type, const std::string& node) {
    ++stamp_;
    std::uint64_t address = next_address_;
    next_address_ += (size + 511) / 512 * 512;
    blocks_.push_back({stamp_, kNever, address, size, type, node});
    return blocks_.size() - 1;
  }
  void free(std::size_t block) { blocks_[block].end = ++stamp_; }
  /// A tensor SOMAS placed inside one of its blocks: listed with time stamps -1.
  void inside_somas(std::size_t size) {
    blocks_.push_back({-1, -1, 0x12c000000000, size, "InSideSomas", "Default/inner"});
  }

  std::string text() const {
    std::string out = std::string(new_ ? kTrackerHeaderNew : kTrackerHeaderOld) + "\n";
    for (const Block& b : blocks_) {
      char addr[32];
      std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(b.address));
      std::string row = std::to_string(b.start) + "," + std::to_string(b.end) + "," + addr +
                        ",0,Ascend," + std::to_string(b.size) + ",";
      if (new_) row += std::to_string(b.size) + ",";  // actual_used_memory
      row += "0,/ms/runtime/actor.cc,42," + b.type + "," + std::to_string(b.start - 1) +
             ",Kernel_" + std::to_string(b.start - 1) + "," + b.node + ",kernel_graph_0,{" +
             std::to_string(b.start) + "},";
      if (new_)  // last_user_task, python_stack (a comma in a path), is_persistent, is_small
        row += std::to_string(b.start) + ",File:/home/u/my,model.py;Line:7;Function:construct|," +
               (b.end == kNever ? "1" : "0") + ",0,";
      out += row + "\n";
    }
    return out;
  }

 private:
  struct Block {
    std::int64_t start, end;
    std::uint64_t address;
    std::size_t size;
    std::string type, node;
  };
  bool new_;
  std::int64_t stamp_ = 0;
  std::uint64_t next_address_ = 0x12c000000000;
  std::vector<Block> blocks_;
};

/// A small training-like run: three weights of 4 MiB never freed, then `steps` identical steps
/// (two activations, a workspace, one more activation). Peak live: 12 + 2 + 3 + 1 = 18 MiB.
inline TrackerWriter example_run(int steps = 6, bool new_layout = true) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  TrackerWriter w(new_layout);
  for (int i = 0; i < 3; ++i) {
    w.task();
    w.alloc(4 * MiB, "Weight", "Default/network/fc" + std::to_string(i) + ".weight");
  }
  w.inside_somas(64 * 1024);
  for (int s = 0; s < steps; ++s) {
    w.task();
    std::size_t a1 = w.alloc(2 * MiB, "PyNativeOutput", "Default/network/MatMul-op1");
    w.task();
    std::size_t a2 = w.alloc(3 * MiB, "PyNativeOutput", "Default/network/Gelu-op2");
    std::size_t ws = w.alloc(1 * MiB, "WorkSpace", "Default/network/Gelu-op2");
    w.free(ws);
    w.free(a1);
    w.task();
    std::size_t a3 = w.alloc(2 * MiB, "PyNativeOutput", "Default/network/Add-op3");
    w.free(a2);
    w.free(a3);
  }
  return w;
}

}  // namespace modelmem::test
