// Renderers of plan_model() and plan_device() results (modelmem/model/plan_model.hpp): the text
// `modelmem plan` prints, the JSON plan the planned-arena runtime reads (`plan:` key), and a
// self-contained HTML picture. Shared by the CLI and the Python package; pure functions.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/model/graph.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/model/solve.hpp"

namespace modelmem::model {

struct TextOptions {
  std::size_t show_live = 8;  ///< live buffers listed at the peak
  /// Tensor names sharing a buffer beyond which only the first and last are printed.
  std::size_t max_chain = 4;
};

/// The report of `modelmem plan MODEL`, one line per figure, ending in a newline.
std::string render_text(const ModelPlan& plan, const TextOptions& options = {});
/// The plan file (docs/plan-format.md, the `plan:` key reads it) of the chosen plan, as
/// plan_json() writes it, plus runtime, dtype, ideal_arena_bytes and eager_peak_bytes. The text
/// is the plan file; `extra` adds members (name, JSON text) after those, as the sizing layer's
/// need (`modelmem plan --json` writes sizing::render_json_text).
std::string render_json_text(const ModelPlan& plan,
                             const std::vector<std::pair<std::string, std::string>>& extra = {});
nlohmann::json render_json(const ModelPlan& plan);
/// plan_html() of the chosen plan, titled "modelmem plan: MODEL".
std::string render_html(const ModelPlan& plan);

/// The plan file of one solved graph (docs/plan-format.md: format, version, source, solver,
/// arena_bytes, weights_bytes, total_bytes, lower_bound_bytes, proven_optimal, capacity_bytes,
/// buffers), followed by the model's members: model, dims, peak_step, steps (node names in
/// execution order) and per tensor: name, size, offset, first and last step (inclusive),
/// buffer.
nlohmann::json plan_json(const Graph& graph, const SolvedModel& plan);

/// A self-contained HTML page (inline SVG and script, no network) drawing the buffers as
/// rectangles in time x address with the peak step marked and tensor names on hover. When its
/// script has drawn the picture it sets `data-status="rendered-ok"` on <body>.
std::string plan_html(const Graph& graph, const SolvedModel& plan, const std::string& title);

/// "7,225,344 B (6.89 MiB)": exact bytes with thousands separators, and human units.
std::string bytes_text(std::size_t bytes);
/// "a = b = c", or "a = ... = z (N tensors)" past `max_chain` names.
std::string chain_text(const std::vector<std::string>& names, std::size_t max_chain);

}  // namespace modelmem::model
