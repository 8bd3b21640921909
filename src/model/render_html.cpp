// The JSON plan and the HTML picture of a solved model (modelmem/model/render.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "modelmem/model/render.hpp"
#include "modelmem/plan/plan_json.hpp"

namespace modelmem::model {
namespace {

// First and last step (inclusive) of each arena tensor, as build_lifetimes computed them.
std::pair<std::size_t, std::size_t> tensor_steps(const Graph& g, const Lifetimes& lt, int t) {
  const Tensor& tensor = g.tensors[t];
  std::size_t first = tensor.producer >= 0 ? lt.step_of_node[tensor.producer] : 0;
  std::size_t last = first;
  for (int c : tensor.consumers) last = std::max(last, lt.step_of_node[c]);
  if (tensor.graph_output && !g.nodes.empty()) last = g.nodes.size() - 1;
  return {first, last};
}

std::string escape_script(std::string text) {
  // Inside <script> only "</" can end the element early; "<\/" is the same JSON string.
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') out += '\\';
  }
  return out;
}

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

namespace {

// The model's own members of the plan file (docs/plan-format.md), after the standard ones.
std::vector<std::pair<std::string, std::string>> model_members(const Graph& graph,
                                                               const SolvedModel& mp) {
  const Lifetimes& lt = mp.lifetimes;
  const plan::Plan& plan = *mp.solve.plan;
  nlohmann::json steps = nlohmann::json::array();
  for (int v : lt.order) steps.push_back(graph.nodes[v].name);
  nlohmann::json tensors = nlohmann::json::array();
  for (std::size_t t = 0; t < graph.tensors.size(); ++t) {
    int b = lt.buffer_of[t];
    if (b < 0) continue;
    auto [first, last] = tensor_steps(graph, lt, static_cast<int>(t));
    tensors.push_back({{"name", graph.tensors[t].name},
                       {"size", lt.problem.buffers[b].size},
                       {"offset", plan.offsets[b]},
                       {"first", first},
                       {"last", last},
                       {"buffer", b}});
  }
  return {{"model", nlohmann::json(graph.source).dump()},
          {"dims", nlohmann::json(graph.dims).dump()},
          {"peak_step", nlohmann::json(mp.peak.step).dump()},
          {"steps", steps.dump()},
          {"tensors", tensors.dump()}};
}

plan::PlanInfo plan_info(const Graph& graph, const SolvedModel& mp) {
  plan::PlanInfo info;
  info.source = graph.source;
  info.solver = mp.solve.solver;
  info.weights_bytes = mp.lifetimes.weights_bytes;
  info.lower_bound = mp.lower_bound;
  info.proven_optimal = mp.solve.proven_optimal;
  info.extra = model_members(graph, mp);
  return info;
}

}  // namespace

nlohmann::json plan_json(const Graph& graph, const SolvedModel& mp) {
  return nlohmann::json::parse(
      plan::plan_json_text(mp.lifetimes.problem, *mp.solve.plan, plan_info(graph, mp)));
}

std::string plan_html(const Graph& graph, const SolvedModel& mp, const std::string& title) {
  const Lifetimes& lt = mp.lifetimes;
  const plan::Plan& plan = *mp.solve.plan;
  nlohmann::json data;
  data["steps"] = lt.order.size();
  data["arena_bytes"] = plan.arena_size;
  data["lower_bound"] = mp.lower_bound;
  data["weights_bytes"] = lt.weights_bytes;
  data["peak_step"] = mp.peak.step;
  data["solver"] = mp.solve.solver;
  auto& names = data["step_names"] = nlohmann::json::array();
  for (int v : lt.order) names.push_back(graph.describe_node(v));
  auto& buffers = data["buffers"] = nlohmann::json::array();
  for (std::size_t b = 0; b < lt.problem.buffers.size(); ++b) {
    const auto& buf = lt.problem.buffers[b];
    nlohmann::json members = nlohmann::json::array();
    for (int t : lt.tensors_of[b]) members.push_back(graph.tensors[t].name);
    buffers.push_back({{"offset", plan.offsets[b]},
                       {"size", buf.size},
                       {"start", buf.start},
                       {"end", buf.end},
                       {"tensors", members}});
  }
  static const char* kPage = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; }}
svg {{ border: 1px solid #bbb; background: #fafafa; }}
rect.buf {{ stroke: #222; stroke-width: 0.4; }}
rect.buf:hover {{ fill: #ff8c00; }}
#info {{ font-family: monospace; white-space: pre; min-height: 3em; }}
</style></head>
<body data-status="loading">
<h1>{title}</h1>
<p id="summary"></p>
<svg id="plan" xmlns="http://www.w3.org/2000/svg" role="img"></svg>
<div id="info">hover a rectangle: tensors, size, address, steps</div>
<p id="status"></p>
<script type="application/json" id="data">{data}</script>
<script>
window.addEventListener('error', function (e) {{
  document.body.setAttribute('data-status', 'error: ' + e.message);
  document.getElementById('status').textContent = 'error: ' + e.message;
}});
(function () {{
  var d = JSON.parse(document.getElementById('data').textContent);
  var W = 1000, H = 560, L = 80, T = 12, B = 44, NS = 'http://www.w3.org/2000/svg';
  var svg = document.getElementById('plan');
  svg.setAttribute('width', W + L + 20);
  svg.setAttribute('height', H + T + B);
  var steps = Math.max(1, d.steps), arena = Math.max(1, d.arena_bytes);
  function x(s) {{ return L + s * W / steps; }}
  function y(a) {{ return T + H - a * H / arena; }}
  function el(name, attrs, parent) {{
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    parent.appendChild(e);
    return e;
  }}
  function mib(b) {{ return (b / 1048576).toFixed(2) + ' MiB'; }}
  el('rect', {{x: L, y: T, width: W, height: H, fill: 'none', stroke: '#888'}}, svg);
  var info = document.getElementById('info');
  d.buffers.forEach(function (b, i) {{
    var hue = (i * 137.508) % 360;
    var r = el('rect', {{'class': 'buf', x: x(b.start), y: y(b.offset + b.size),
      width: Math.max(0.5, x(b.end) - x(b.start)), height: Math.max(0.5, b.size * H / arena),
      fill: 'hsl(' + hue + ',60%,70%)'}}, svg);
    var text = b.tensors.join(', ') + '\n' + b.size + ' B (' + mib(b.size) + ') at offset ' +
      b.offset + ', steps ' + b.start + '..' + (b.end - 1);
    el('title', {{}}, r).textContent = text;
    r.addEventListener('mouseover', function () {{ info.textContent = text; }});
  }});
  var px = x(d.peak_step + 0.5);
  el('line', {{x1: px, x2: px, y1: T, y2: T + H, stroke: '#d00', 'stroke-width': 1.5,
    'stroke-dasharray': '5,3'}}, svg);
  el('text', {{x: px + 4, y: T + 14, fill: '#d00', 'font-size': 12}}, svg).textContent =
    'peak: step ' + d.peak_step + ' ' + (d.step_names[d.peak_step] || '') + ', ' + mib(d.lower_bound);
  el('text', {{x: L + W / 2, y: T + H + 32, 'text-anchor': 'middle', 'font-size': 13}}, svg)
    .textContent = 'time (steps 0..' + (steps - 1) + ')';
  el('text', {{x: 14, y: T + H / 2, 'font-size': 13, transform: 'rotate(-90 14 ' + (T + H / 2) + ')',
    'text-anchor': 'middle'}}, svg).textContent = 'address (0..' + mib(arena) + ')';
  document.getElementById('summary').textContent = d.buffers.length + ' buffers, arena ' +
    mib(d.arena_bytes) + ' (' + d.solver + '), lower bound ' + mib(d.lower_bound) +
    ', weights ' + mib(d.weights_bytes) + ' (separate region)';
  // For the tests only (an attribute): the page shows nothing when all went well.
  document.body.setAttribute('data-status', 'rendered-ok');
}})();
</script>
</body></html>
)html";
  return fmt::format(fmt::runtime(kPage), fmt::arg("title", escape_html(title)),
                     fmt::arg("data", escape_script(data.dump())));
}

std::string render_json_text(const ModelPlan& mp,
                             const std::vector<std::pair<std::string, std::string>>& extra) {
  plan::PlanInfo info = plan_info(mp.graph, mp.plan);
  info.extra.emplace_back("runtime", nlohmann::json(runtime_name(mp.options.runtime)).dump());
  info.extra.emplace_back("dtype", nlohmann::json(mp.options.dtype).dump());
  info.extra.emplace_back("ideal_arena_bytes", std::to_string(mp.ideal_arena));
  info.extra.emplace_back("eager_peak_bytes", std::to_string(mp.eager_peak));
  for (const auto& e : extra) info.extra.push_back(e);
  return plan::plan_json_text(mp.plan.lifetimes.problem, *mp.plan.solve.plan, info);
}

nlohmann::json render_json(const ModelPlan& mp) {
  return nlohmann::json::parse(render_json_text(mp));
}

std::string render_html(const ModelPlan& mp) {
  return plan_html(mp.graph, mp.plan, "modelmem plan: " + mp.graph.source);
}

}  // namespace modelmem::model
