// Tensors a module's forward binds to Python locals and holds until it returns, where the
// graph shows only their last use (eager_rules.hpp).
#include <algorithm>
#include <map>
#include <string>

#include "model/eager_rules.hpp"

namespace modelmem::model::detail {

// transformers' decoders bind the embedding lookup to a local of the model's forward and pass
// it straight into the first layer: LlamaModel, Qwen2Model and MistralModel's `inputs_embeds =
// self.embed_tokens(input_ids)`, then `hidden_states = inputs_embeds`, so the first layer's
// input outlives the loop that reassigns hidden_states (131,072 B at batch 1, seq 128 of the
// 4x256 Llama, traced on PyTorch 2.13). Found as a Gather from a weight table by computed
// indices in a module scope (nn.Embedding) whose output goes only into other sub-modules: it
// lives until the parent scope's last node (the graph's end when the parent is the top).
// A lookup the forward adds itself (`self.wte(x) + self.wpe(p)`) is left alone: that is a
// temporary in the bundled models, a local in GPT2Model, and the graph cannot tell which.
std::vector<std::pair<int, std::size_t>> forward_locals(
    const Graph& graph, const std::vector<std::size_t>& step_of_node) {
  std::vector<std::pair<int, std::size_t>> out;
  std::map<std::string, std::size_t> end;  // scope -> its last step
  std::vector<std::string> scope(graph.nodes.size());
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    const std::string& name = graph.nodes[v].name;
    if (name.size() < 2 || name[0] != '/') continue;
    scope[v] = name.substr(0, name.rfind('/'));
    for (std::size_t p = scope[v].size(); p != std::string::npos && p > 0;
         p = scope[v].rfind('/', p - 1)) {
      auto [it, fresh] = end.emplace(scope[v].substr(0, p), step_of_node[v]);
      if (!fresh) it->second = std::max(it->second, step_of_node[v]);
    }
  }
  const std::size_t graph_end = step_of_node.empty() ? 0 : step_of_node.size() - 1;
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    const Node& n = graph.nodes[v];
    if (n.op_type != "Gather" || n.inputs.size() != 2 || n.outputs.size() != 1 || n.inputs[0] < 0 ||
        n.inputs[1] < 0 || n.outputs[0] < 0 || scope[v].empty() ||
        !fixed_tensor(graph, n.inputs[0]) || fixed_tensor(graph, n.inputs[1]) ||
        !in_arena(graph.tensors[n.outputs[0]]))
      continue;
    const std::size_t cut = scope[v].rfind('/');
    const std::string parent = cut == std::string::npos ? "" : scope[v].substr(0, cut);
    const auto& cs = graph.tensors[n.outputs[0]].consumers;
    if (cs.empty() || std::any_of(cs.begin(), cs.end(), [&](int c) {
          return scope[c] == parent || scope[c] == scope[v];
        }))
      continue;  // added or used in the forward itself: often a temporary (`wte(x) + wpe(p)`)
    out.emplace_back(n.outputs[0], parent.empty() ? graph_end : end[parent]);
  }
  // transformers' GPT-2 (modeling_gpt2.py, 5.25): GPT2Model.forward binds `inputs_embeds =
  // self.wte(input_ids)` and `position_embeds = self.wpe(position_ids)` and adds them itself,
  // keeping both until it returns; GPT2Block.forward binds `attn_output, _ = self.attn(...)`
  // and keeps it after `hidden_states = attn_output + residual` until it returns (Llama's layer
  // reassigns hidden_states instead). Found by transformers' own module names for GPT-2: a
  // block scope with `attn/c_attn` (GPT-2's fused qkv Conv1D) and `mlp`; the model is the
  // block's parent scope, its lookups those in `wte` and `wpe`. The bundled decoder
  // (tests/sizing/gpt2_decoder.py: q_proj, k_proj, v_proj) adds temporaries and has no c_attn.
  std::map<std::string, bool> blocks;  // block scope -> has an mlp
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    const std::size_t at = scope[v].find("/attn/c_attn");
    if (at != std::string::npos && at > 0) blocks.emplace(scope[v].substr(0, at), false);
  }
  for (auto& [b, mlp] : blocks) mlp = end.count(b + "/mlp") > 0;
  for (const auto& block : blocks) {
    if (!block.second) continue;
    const std::string& b = block.first;  // a name, not a binding: the lambda below captures it
    const std::string attn = b + "/attn", model = b.substr(0, b.rfind('/'));
    const std::size_t model_end = model.empty() ? graph_end : end[model];
    for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
      const Node& n = graph.nodes[v];
      const bool in_attn =
          scope[v] == attn || scope[v].compare(0, attn.size() + 1, attn + "/") == 0;
      const bool lookup =
          n.op_type == "Gather" && (scope[v] == model + "/wte" || scope[v] == model + "/wpe");
      for (int t : n.outputs) {
        if (t < 0 || !in_arena(graph.tensors[t])) continue;
        const auto& cs = graph.tensors[t].consumers;
        if (lookup) out.emplace_back(t, model_end);
        if (in_attn && std::any_of(cs.begin(), cs.end(), [&](int c) { return scope[c] == b; }))
          out.emplace_back(t, end[b]);  // attn_output
      }
    }
  }
  return out;
}

}  // namespace modelmem::model::detail
