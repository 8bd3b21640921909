// A memory-aware execution order of a graph (model/order.hpp).
#include "modelmem/model/order.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <unordered_map>

#include "modelmem/core/error.hpp"

namespace modelmem::model {
namespace {

// The live-bytes model of build_lifetimes, in a form a search can step through. Memory is
// counted per alias class (a tensor and its views, which never depend on the order); an
// in-place output adds nothing at its step because its dying input's memory is reused. Live
// bytes after a set of executed nodes do not depend on the order they ran in, which is what
// makes the dynamic program over node sets exact.
struct Model {
  struct Output {
    int cls;
    std::int32_t dtype;
    std::size_t bytes;
  };
  struct Input {
    int cls;
    int uses;  // how many of the node's input slots read this class
    std::int32_t dtype;
    std::size_t bytes;
  };
  std::vector<std::size_t> bytes;            // per class, aligned
  std::vector<int> uses;                     // per class: consumer edges over all members
  std::vector<bool> pinned;                  // per class: holds a graph output (never freed)
  std::vector<bool> is_input;                // per class: a graph input (never written in place)
  std::vector<std::vector<int>> consumers;   // per class: consumer node per edge
  std::vector<std::vector<Output>> outputs;  // per node: classes it creates
  std::vector<std::vector<Input>> inputs;    // per node: classes it reads
  std::vector<std::vector<int>> preds;       // per node: producer nodes of its inputs
  std::vector<bool> in_place_op;
  std::size_t initial_live = 0;
};

bool arena_tensor(const Tensor& t) {
  return (t.kind == TensorKind::kActivation || t.kind == TensorKind::kInput) && t.bytes > 0;
}

Model make_model(const Graph& graph, const LifetimeOptions& opt) {
  Model m;
  const std::size_t n = graph.nodes.size();
  std::vector<int> cls(graph.tensors.size(), -1);
  std::vector<bool> weight_view(graph.tensors.size(), false);
  auto new_class = [&](int t) {
    cls[t] = static_cast<int>(m.bytes.size());
    m.bytes.push_back(checked_align_up(activation_bytes(graph.tensors[t], opt.float_bytes),
                                       opt.alignment, "activation size"));
    m.uses.push_back(0);
    m.pinned.push_back(false);
    m.is_input.push_back(graph.tensors[t].kind == TensorKind::kInput);
    m.consumers.emplace_back();
    return cls[t];
  };
  for (std::size_t t = 0; t < graph.tensors.size(); ++t)
    if (graph.tensors[t].kind == TensorKind::kInput && arena_tensor(graph.tensors[t]))
      new_class(static_cast<int>(t));
  m.outputs.resize(n);
  m.inputs.resize(n);
  m.preds.resize(n);
  m.in_place_op.resize(n);
  for (std::size_t v = 0; v < n; ++v) {  // stored order is topological
    const Node& node = graph.nodes[v];
    m.in_place_op[v] = opt.in_place && is_in_place_op(node.op_type);
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      int o = node.outputs[k];
      if (o < 0 || !arena_tensor(graph.tensors[o])) continue;
      if (opt.alias && k == 0 && is_alias_op(node.op_type) && !node.inputs.empty() &&
          node.inputs[0] >= 0) {
        int in = node.inputs[0];
        const Tensor& src = graph.tensors[in];
        if (!arena_tensor(src) || weight_view[in]) {
          if (src.kind == TensorKind::kWeight || src.kind == TensorKind::kConstant ||
              weight_view[in]) {
            weight_view[o] = true;
            continue;
          }
        } else if (activation_bytes(src, opt.float_bytes) ==
                   activation_bytes(graph.tensors[o], opt.float_bytes)) {
          cls[o] = cls[in];
          continue;
        }
      }
      int c = new_class(o);
      m.outputs[v].push_back(
          {c, graph.tensors[o].dtype, activation_bytes(graph.tensors[o], opt.float_bytes)});
    }
  }
  for (std::size_t t = 0; t < graph.tensors.size(); ++t) {
    if (cls[t] < 0) continue;
    if (graph.tensors[t].graph_output) m.pinned[cls[t]] = true;
  }
  for (std::size_t v = 0; v < n; ++v) {
    for (int t : graph.nodes[v].inputs) {
      if (t < 0) continue;
      int p = graph.tensors[t].producer;
      if (p >= 0) m.preds[v].push_back(p);
      if (cls[t] < 0) continue;
      int c = cls[t];
      ++m.uses[c];
      m.consumers[c].push_back(static_cast<int>(v));
      auto it = std::find_if(m.inputs[v].begin(), m.inputs[v].end(), [&](const Model::Input& i) {
        return i.cls == c && i.dtype == graph.tensors[t].dtype;
      });
      if (it != m.inputs[v].end()) {
        ++it->uses;
      } else {
        m.inputs[v].push_back(
            {c, 1, graph.tensors[t].dtype, activation_bytes(graph.tensors[t], opt.float_bytes)});
      }
    }
    std::sort(m.preds[v].begin(), m.preds[v].end());
    m.preds[v].erase(std::unique(m.preds[v].begin(), m.preds[v].end()), m.preds[v].end());
  }
  // A class read under two dtypes (never in a valid model) would count its uses per entry;
  // merge the per-class use count so "dies here" is exact.
  for (auto& ins : m.inputs) {
    for (auto& i : ins) {
      int total = 0;
      for (const auto& j : ins)
        if (j.cls == i.cls) total += j.uses;
      i.uses = total;
    }
  }
  for (std::size_t c = 0; c < m.bytes.size(); ++c)
    if (m.is_input[c] && (m.pinned[c] || m.uses[c] > 0)) m.initial_live += m.bytes[c];
  return m;
}

struct Step {
  std::size_t peak;  // live bytes during the step
  std::size_t live;  // live bytes after it
};

// One step of node v. `remaining(c)` gives the class's uses not yet executed.
template <typename Remaining>
Step step(const Model& m, int v, std::size_t live, Remaining remaining) {
  std::size_t added = 0;
  std::size_t after = live;
  std::vector<int> claimed;
  for (const auto& o : m.outputs[v]) {
    bool reused = false;
    if (m.in_place_op[v]) {
      for (const auto& in : m.inputs[v]) {
        if (m.is_input[in.cls] || m.pinned[in.cls] || remaining(in.cls) != in.uses) continue;
        if (in.dtype != o.dtype || in.bytes != o.bytes) continue;
        if (std::find(claimed.begin(), claimed.end(), in.cls) != claimed.end()) continue;
        claimed.push_back(in.cls);
        reused = true;
        break;
      }
    }
    if (!reused) added += m.bytes[o.cls];
    if (m.pinned[o.cls] || m.uses[o.cls] > 0) after += m.bytes[o.cls];
  }
  for (const auto& in : m.inputs[v])
    if (!m.pinned[in.cls] && remaining(in.cls) == in.uses) after -= m.bytes[in.cls];
  return {live + added, after};
}

// Nodes that neither read nor write arena memory (views of weights, for instance) cannot change
// a peak; they run first, in stored order (their inputs are weights or other such nodes), and
// the searches leave them out: each one would otherwise double the number of node sets.
std::vector<bool> neutral_nodes(const Model& m) {
  std::vector<bool> neutral(m.outputs.size());
  for (std::size_t v = 0; v < m.outputs.size(); ++v) {
    bool reads_arena_producer = false;
    for (int p : m.preds[v])
      if (!neutral[p]) reads_arena_producer = true;
    neutral[v] = m.outputs[v].empty() && m.inputs[v].empty() && !reads_arena_producer;
  }
  return neutral;
}

// Dynamic program over the sets of executed nodes (downsets), level by level. Live bytes after a
// set do not depend on the order, so per set only the lowest peak so far matters. Exact; gives
// up (nullopt) past max_states sets. Graphs made of a chain of small blocks (ResNet, BERT) have
// few sets per level.
std::optional<std::vector<int>> exact_order(const Model& m, const std::vector<bool>& neutral,
                                            std::size_t max_states) {
  const std::size_t n = m.outputs.size();
  const std::size_t words = (n + 63) / 64;
  std::vector<std::vector<int>> users(n);
  for (std::size_t v = 0; v < n; ++v)
    for (int p : m.preds[v]) users[p].push_back(static_cast<int>(v));
  std::mt19937_64 rng(4242);
  std::vector<std::uint64_t> zobrist(n);
  for (auto& z : zobrist) z = rng();

  struct State {
    std::vector<std::uint64_t> set;
    std::vector<int> ready;
    std::size_t peak, live;
    std::uint64_t hash;
  };
  struct Link {
    std::size_t parent;
    int node;
  };
  auto has = [](const std::vector<std::uint64_t>& set, int v) {
    return set[v >> 6] >> (v & 63) & 1;
  };
  State init{std::vector<std::uint64_t>(words, 0), {}, m.initial_live, m.initial_live, 0};
  std::size_t searched = 0;
  for (std::size_t v = 0; v < n; ++v) {
    if (neutral[v]) {
      init.set[v >> 6] |= std::uint64_t{1} << (v & 63);
      init.hash ^= zobrist[v];
    } else {
      ++searched;
    }
  }
  for (std::size_t v = 0; v < n; ++v) {
    if (neutral[v]) continue;
    bool ok = true;
    for (int p : m.preds[v]) ok = ok && has(init.set, p);
    if (ok) init.ready.push_back(static_cast<int>(v));
  }
  std::vector<std::vector<Link>> links(searched + 1);
  links[0].push_back({0, -1});
  std::vector<State> level{std::move(init)};
  std::size_t states = 1;
  for (std::size_t k = 0; k < searched; ++k) {
    std::vector<State> next;
    std::unordered_map<std::uint64_t, std::size_t> index;
    for (std::size_t si = 0; si < level.size(); ++si) {
      const State& st = level[si];
      auto remaining = [&](int c) {
        int left = m.uses[c];
        for (int u : m.consumers[c])
          if (has(st.set, u)) --left;
        return left;
      };
      for (int v : st.ready) {
        Step s = step(m, v, st.live, remaining);
        std::size_t peak = std::max(st.peak, s.peak);
        std::uint64_t hash = st.hash ^ zobrist[v];
        auto [it, fresh] = index.try_emplace(hash, next.size());
        if (!fresh) {
          State& other = next[it->second];
          // Same hash, different set: astronomically unlikely; give up rather than be wrong.
          if (!(other.set[v >> 6] >> (v & 63) & 1)) return std::nullopt;
          if (peak < other.peak) {
            other.peak = peak;
            links[k + 1][it->second] = {si, v};
          }
          continue;
        }
        if (++states > max_states) return std::nullopt;
        State child{st.set, {}, peak, s.live, hash};
        child.set[v >> 6] |= std::uint64_t{1} << (v & 63);
        for (int r : st.ready)
          if (r != v) child.ready.push_back(r);
        for (int u : users[v]) {
          bool ok = !has(child.set, u);
          for (int p : m.preds[u]) ok = ok && has(child.set, p);
          if (ok && std::find(child.ready.begin(), child.ready.end(), u) == child.ready.end())
            child.ready.push_back(u);
        }
        next.push_back(std::move(child));
        links[k + 1].push_back({si, v});
      }
    }
    if (next.empty()) return std::nullopt;
    level = std::move(next);
  }
  std::vector<int> order;
  for (std::size_t v = 0; v < n; ++v)
    if (neutral[v]) order.push_back(static_cast<int>(v));
  std::vector<int> tail(searched);
  std::size_t at = 0;
  for (std::size_t k = searched; k > 0; --k) {
    tail[k - 1] = links[k][at].node;
    at = links[k][at].parent;
  }
  order.insert(order.end(), tail.begin(), tail.end());
  return order;
}

std::vector<int> beam_order(const Model& m, std::size_t width) {
  const std::size_t n = m.outputs.size();
  std::vector<std::vector<int>> users(n);
  for (std::size_t v = 0; v < n; ++v)
    for (int p : m.preds[v]) users[p].push_back(static_cast<int>(v));
  std::mt19937_64 rng(12345);
  std::vector<std::uint64_t> zobrist(n);
  for (auto& z : zobrist) z = rng();

  struct State {
    std::vector<int> remaining;  // per class
    std::vector<int> waiting;    // per node: unexecuted predecessors
    std::vector<int> ready;      // sorted node indices
    std::vector<int> order;
    std::size_t live = 0, peak = 0;
    std::uint64_t hash = 0;
  };
  State init;
  init.remaining = m.uses;
  init.waiting.resize(n);
  for (std::size_t v = 0; v < n; ++v) {
    init.waiting[v] = static_cast<int>(m.preds[v].size());
    if (init.waiting[v] == 0) init.ready.push_back(static_cast<int>(v));
  }
  init.live = init.peak = m.initial_live;
  std::vector<State> beam{std::move(init)};
  struct Candidate {
    std::size_t peak, live;
    std::size_t parent;
    int node;
    std::uint64_t hash;
  };
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<Candidate> cands;
    for (std::size_t b = 0; b < beam.size(); ++b) {
      const State& st = beam[b];
      auto remaining = [&](int c) { return st.remaining[c]; };
      for (int v : st.ready) {
        Step s = step(m, v, st.live, remaining);
        cands.push_back({std::max(st.peak, s.peak), s.live, b, v, st.hash ^ zobrist[v]});
      }
    }
    // Lower peak first, then less memory held, then the stored order (parents are ranked).
    std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
      if (a.peak != b.peak) return a.peak < b.peak;
      if (a.live != b.live) return a.live < b.live;
      if (a.parent != b.parent) return a.parent < b.parent;
      return a.node < b.node;
    });
    std::vector<State> next;
    std::vector<std::uint64_t> seen;
    for (const auto& c : cands) {
      if (next.size() >= width) break;
      if (std::find(seen.begin(), seen.end(), c.hash) != seen.end()) continue;
      seen.push_back(c.hash);
      State st = beam[c.parent];
      for (const auto& in : m.inputs[c.node]) st.remaining[in.cls] -= in.uses;
      st.ready.erase(std::find(st.ready.begin(), st.ready.end(), c.node));
      for (int u : users[c.node]) {
        if (--st.waiting[u] == 0)
          st.ready.insert(std::upper_bound(st.ready.begin(), st.ready.end(), u), u);
      }
      st.order.push_back(c.node);
      st.live = c.live;
      st.peak = c.peak;
      st.hash = c.hash;
      next.push_back(std::move(st));
    }
    beam = std::move(next);
  }
  return beam.front().order;
}

}  // namespace

OrderResult memory_order(const Graph& graph, const LifetimeOptions& lifetimes,
                         const OrderOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  OrderResult result;
  LifetimeOptions opt = lifetimes;
  opt.order.clear();
  result.stored_peak = plan::lower_bound(build_lifetimes(graph, opt).problem);
  std::vector<int> stored(graph.nodes.size());
  std::iota(stored.begin(), stored.end(), 0);

  Model m = make_model(graph, opt);
  std::optional<std::vector<int>> found;
  std::vector<bool> neutral = neutral_nodes(m);
  if (graph.nodes.size() <= options.exact_max_nodes) {
    found = exact_order(m, neutral, options.exact_max_states);
    result.exact = found.has_value();
  }
  if (!found) found = beam_order(m, std::max<std::size_t>(options.beam_width, 1));
  opt.order = *found;
  std::size_t peak = plan::lower_bound(build_lifetimes(graph, opt).problem);
  if (peak < result.stored_peak || (result.exact && peak == result.stored_peak)) {
    result.order = std::move(*found);
    result.peak = peak;
    result.method = result.exact ? "exact" : "beam";
  } else {
    result.order = std::move(stored);
    result.peak = result.stored_peak;
    result.method = "stored (no better order found)";
    result.exact = false;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace modelmem::model
