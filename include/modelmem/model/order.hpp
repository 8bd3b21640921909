// Memory-aware execution order: searches a topological order of the graph whose peak of live
// activation bytes (the plan's lower bound, with the same in-place and alias rules as
// build_lifetimes) is lower than the stored order's. An exact dynamic program over the sets of
// executed nodes runs while the number of sets stays bounded (small graphs, and chains of small
// blocks such as ResNet and BERT); otherwise a bounded beam search. The result is never worse
// than the stored order (it is kept when nothing better is found). Single-threaded.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"

namespace modelmem::model {

struct OrderOptions {
  /// The exact search runs on graphs up to this many nodes and gives up past exact_max_states
  /// node sets (memory: about nodes/8 bytes each); the beam search takes over then.
  std::size_t exact_max_nodes = 100000;
  std::size_t exact_max_states = 300000;
  std::size_t beam_width = 8;
};

struct OrderResult {
  std::vector<int> order;       ///< node indices, step by step
  std::size_t stored_peak = 0;  ///< lower bound of the stored order
  std::size_t peak = 0;         ///< lower bound of `order` (<= stored_peak)
  bool exact = false;           ///< `peak` is the minimum over all topological orders
  std::string method;           ///< "exact", "beam", or "stored (no better order found)"
  double seconds = 0;
};

/// `lifetimes.order` is ignored; its other options (precision, alignment, reuse rules) apply.
OrderResult memory_order(const Graph& graph, const LifetimeOptions& lifetimes,
                         const OrderOptions& options = {});

}  // namespace modelmem::model
