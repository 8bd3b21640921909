// F.scaled_dot_product_attention as torch.onnx writes it, and what PyTorch 2.x's CPU kernel
// allocates instead (eager_rules.hpp).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdint>

#include "model/eager_rules.hpp"

namespace modelmem::model::detail {

namespace {

// The consumer of `t` when it has exactly one and is no graph output.
const Node* sole_consumer(const Graph& graph, int t) {
  if (t < 0 || graph.tensors[t].graph_output || graph.tensors[t].consumers.size() != 1)
    return nullptr;
  return &graph.nodes[graph.tensors[t].consumers[0]];
}

// The activation of a Mul by a fixed tensor (a scalar scale), or -1.
int scaled_operand(const Graph& graph, const Node& mul) {
  if (mul.op_type != "Mul" || mul.inputs.size() != 2 || mul.inputs[0] < 0 || mul.inputs[1] < 0)
    return -1;
  for (int k = 0; k < 2; ++k)
    if (!fixed_tensor(graph, mul.inputs[k]) && fixed_tensor(graph, mul.inputs[1 - k]))
      return mul.inputs[k];
  return -1;
}

std::size_t u(std::int64_t v) {
  return static_cast<std::size_t>(std::max<std::int64_t>(v, 0));
}

}  // namespace

// torch.onnx (opset 14 and later, the TorchScript exporter) spells SDPA as
//   MatMul(Mul(q, sqrt(scale)), Mul(Transpose(k, last two dims swapped), sqrt(scale)))
//   [-> Add(mask, float: a boolean mask is first turned into 0/-inf by a Where)]
//   -> Softmax(-1) [-> Where(IsNaN(p), 0, p) after a boolean mask] -> MatMul(p, v).
// Scaling both operands by a constant is the exporter's own spelling (symbolic_opset14's
// scaled_dot_product_attention); attention written out in Python scales q or the scores.
// PyTorch 2.x on the CPU runs it as one operator, the flash-attention kernel
// (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp): it reads q, k and v through their
// strides, never makes the scores, and allocates its output as [b, s, h, d] (returned as the
// [b, h, s, d] transpose), the logsumexp [b, s, h] in float and one work buffer per thread of
// qSplit x kvSplit scores, 2 x qSplit row statistics and qSplit x d accumulators in float
// (qSplit 32 below 192 queries, 64 below 768, else 256; kvSplit min(512, keys)); with fp16 or
// bf16 also qSplit x kvSplit in that type. Measured under PyTorch 2.13 (one intra-op thread):
// 24,832 B and 2,048 B besides the output at batch 1, 4 heads of 64, seq 128.
std::vector<Sdpa> find_sdpa(const Graph& graph, std::size_t float_bytes) {
  std::vector<Sdpa> out;
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    const Node& qk = graph.nodes[v];
    if (qk.op_type != "MatMul" || qk.inputs.size() != 2 || qk.outputs.size() != 1 ||
        qk.inputs[0] < 0 || qk.inputs[1] < 0 || qk.outputs[0] < 0)
      continue;
    Sdpa s;
    const int a = qk.inputs[0], b = qk.inputs[1];
    if (graph.tensors[a].producer < 0 || graph.tensors[b].producer < 0) continue;
    const Node& qmul = graph.nodes[graph.tensors[a].producer];
    const Node& kmul = graph.nodes[graph.tensors[b].producer];
    const int q = scaled_operand(graph, qmul), kt = scaled_operand(graph, kmul);
    if (q < 0 || kt < 0 || sole_consumer(graph, a) != &qk || sole_consumer(graph, b) != &qk)
      continue;
    int k = kt;
    const int tp = graph.tensors[kt].producer;
    if (tp >= 0) {
      const Node& t = graph.nodes[tp];
      const std::size_t r = graph.tensors[kt].shape.size();
      const bool swaps = t.op_type == "Transpose" && r >= 2 && t.perm.size() == r &&
                         t.perm[r - 1] != static_cast<std::int64_t>(r - 1) &&
                         t.perm[r - 2] != static_cast<std::int64_t>(r - 2);
      if (swaps && !t.inputs.empty() && t.inputs[0] >= 0 && sole_consumer(graph, kt) == &kmul) {
        s.internals.push_back(kt);  // k.transpose(-2, -1): the kernel reads k as it is
        k = t.inputs[0];
      }
    }
    s.internals.insert(s.internals.end(), {a, b, qk.outputs[0]});
    // The mask, the Softmax and the NaN guard.
    int t = qk.outputs[0];
    const Node* n = sole_consumer(graph, t);
    if (n && n->op_type == "Add" && n->inputs.size() == 2 && n->outputs.size() == 1) {
      const int mask = n->inputs[0] == t ? n->inputs[1] : n->inputs[0];
      if (mask >= 0 && in_arena(graph.tensors[mask])) s.inputs.push_back(mask);
      t = n->outputs[0];
      s.internals.push_back(t);
      n = sole_consumer(graph, t);
    }
    if (!n || n->op_type != "Softmax" || n->outputs.size() != 1 || n->outputs[0] < 0) continue;
    t = n->outputs[0];
    s.internals.push_back(t);
    const auto& cs = graph.tensors[t].consumers;
    const Node* pv = nullptr;
    if (cs.size() == 1) {
      pv = &graph.nodes[cs[0]];
    } else if (cs.size() == 2) {  // Where(IsNaN(p), 0, p)
      const Node* isnan = nullptr;
      const Node* where = nullptr;
      for (int c : cs) {
        const Node& cn = graph.nodes[c];
        if (cn.op_type == "IsNaN") isnan = &cn;
        if (cn.op_type == "Where") where = &cn;
      }
      if (!isnan || !where || isnan->outputs.size() != 1 || where->outputs.size() != 1 ||
          where->inputs.empty() || where->inputs[0] != isnan->outputs[0])
        continue;
      s.internals.push_back(isnan->outputs[0]);
      s.internals.push_back(where->outputs[0]);
      pv = sole_consumer(graph, where->outputs[0]);
    }
    if (!pv || pv->op_type != "MatMul" || pv->inputs.size() != 2 || pv->outputs.size() != 1 ||
        pv->outputs[0] < 0 || pv->inputs[1] < 0 || fixed_tensor(graph, pv->inputs[1]))
      continue;
    const int value = pv->inputs[1], o = pv->outputs[0];
    const auto& qs = graph.tensors[q].shape;
    const auto& os = graph.tensors[o].shape;
    const auto& ks = graph.tensors[value].shape;
    if (qs.size() < 2 || os.size() < 2 || ks.size() < 2) continue;
    s.node = static_cast<int>(&*pv - graph.nodes.data());
    s.inputs.insert(s.inputs.end(), {q, k, value});
    s.q = q;
    s.k = k;
    s.v = value;
    // The kernel's own buffers (float accumulators) for one intra-op thread.
    const std::size_t r = os.size();
    const std::size_t sq = u(os[r - 2]), d = u(qs[qs.size() - 1]), skv = u(ks[ks.size() - 2]);
    std::size_t heads_batch = 1;
    for (std::size_t i = 0; i + 2 < r; ++i) heads_batch *= u(os[i]);
    const std::size_t q_split = std::min<std::size_t>(sq, sq >= 768 ? 256 : sq >= 192 ? 64 : 32);
    const std::size_t kv_split = std::min<std::size_t>(skv, 512);
    const std::size_t per_thread = (q_split * kv_split + 2 * q_split + q_split * d) * 4;
    const int dt = graph.tensors[q].dtype;
    const bool half = dt == onnx::TensorProto::FLOAT16 || dt == onnx::TensorProto::BFLOAT16 ||
                      (dt == onnx::TensorProto::FLOAT && float_bytes == 2);
    const std::size_t reduced = half ? q_split * kv_split * 2 : 0;  // scores in fp16/bf16
    s.workspace = heads_batch * sq * 4 + per_thread + reduced;
    // Output [b, s, h, d] in memory, seen as [b, h, s, d].
    if (r == 4) {
      const auto h = os[1], sl = os[2], dd = os[3];
      s.output_strides = {sl * h * dd, dd, h * dd, 1};
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace modelmem::model::detail
