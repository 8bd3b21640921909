// analyze(), the renderers: the text report of `modelmem analyze` and its JSON (`--json`). Both
// show the same numbers; the JSON has every field of Analysis.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "analysis_internal.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::trace {

using detail::percent;

std::string to_text(const Analysis& a) {
  std::string out;
  auto line = [&out](const std::string& s) {
    out += s;
    out += '\n';
  };
  line(fmt::format("trace {}", a.name));
  line(fmt::format("  events {} (alloc {}, free {}, mark {}, oom {}, device {}), threads {}",
                   a.events, a.allocs, a.frees, a.marks, a.ooms, a.device_events, a.threads));
  line(fmt::format("  allocated {} in {:.3f} s: {:.0f} allocs/s, {}/s",
                   format_bytes(a.bytes_allocated), a.duration_s, a.allocs_per_s,
                   format_bytes(static_cast<std::size_t>(a.bytes_per_s))));
  line(fmt::format("  peak live {}{} at event {} ({:.3f} s from the first event){}",
                   format_bytes(a.peak_live), a.snapshot ? " (requested bytes)" : "",
                   a.peak_live_event, static_cast<double>(a.peak_live_time_ns) * 1e-9,
                   a.peak_reserved
                       ? fmt::format(", peak reserved {}", format_bytes(*a.peak_reserved))
                       : std::string(", reserved unknown")));
  if (a.never_freed > 0)
    line(fmt::format("  never freed: {} blocks, {}{}", a.never_freed,
                     format_bytes(a.never_freed_bytes), a.snapshot ? " (requested bytes)" : ""));
  if (a.snapshot) out += pools_text(*a.snapshot);
  line(fmt::format("  distinct sizes {}; histogram:", a.distinct_sizes));
  std::size_t max_count = 1;
  for (const SizeBin& b : a.histogram) max_count = std::max(max_count, b.count);
  for (const SizeBin& b : a.histogram)
    line(fmt::format("    [{:>10}, {:>10})  {:>6}  {:>10}  {}", format_bytes(b.low),
                     format_bytes(b.high), b.count, format_bytes(b.bytes),
                     std::string(1 + 39 * b.count / max_count, '#')));
  if (a.period.found)
    line(fmt::format("  period: {} events from event {}, {} repeats, {} match", a.period.length,
                     a.period_start_event, a.period.repeats, percent(a.period.match)));
  else
    line("  period: none found");
  if (!a.steps.empty()) {
    line(fmt::format("  steps ({}): {}", a.steps_from_marks ? "from marks" : "from the period",
                     a.steps.size()));
    for (std::size_t k = 0; k < a.steps.size(); ++k) {
      const StepStats& s = a.steps[k];
      line(
          fmt::format("    step {:>3}: events [{}, {}), {} allocs, {} allocated, peak live {}, "
                      "live in {}, kind {}",
                      k, s.window.begin, s.window.end, s.allocs, format_bytes(s.bytes_allocated),
                      format_bytes(s.peak_live), format_bytes(s.live_in), s.group));
    }
    for (std::size_t g = 0; g < a.groups.size(); ++g)
      line(fmt::format("    kind {}: {} step(s), scale x{:g}, planned {} ({}), lower bound {}", g,
                       a.groups[g].steps.size(), a.groups[g].scale,
                       format_bytes(a.groups[g].planned), a.solver,
                       format_bytes(a.groups[g].lower_bound)));
  }
  line("diagnosis:");
  for (const Advice& adv : a.advice) {
    line(fmt::format("  [{}] {}", adv.topic, adv.message));
    if (!adv.config.empty()) line(fmt::format("      config: {}", adv.config));
    if (!adv.mindspore.empty()) line(fmt::format("      MindSpore: {}", adv.mindspore));
  }
  if (!a.skipped.empty()) {
    line("skipped / notes:");
    for (const std::string& s : a.skipped) line("  " + s);
  }
  return out;
}

nlohmann::json to_json(const Analysis& a) {
  using nlohmann::json;
  json j;
  j["name"] = a.name;
  j["summary"] = {{"events", a.events},
                  {"allocs", a.allocs},
                  {"frees", a.frees},
                  {"marks", a.marks},
                  {"ooms", a.ooms},
                  {"device_events", a.device_events},
                  {"threads", a.threads},
                  {"distinct_sizes", a.distinct_sizes},
                  {"bytes_allocated", a.bytes_allocated},
                  {"peak_live", a.peak_live},
                  {"peak_live_event", a.peak_live_event},
                  {"start_time_ns", a.start_time_ns},
                  {"peak_live_time_ns", a.peak_live_time_ns},
                  {"peak_reserved", a.peak_reserved ? json(*a.peak_reserved) : json(nullptr)},
                  {"never_freed", a.never_freed},
                  {"never_freed_bytes", a.never_freed_bytes},
                  {"duration_s", a.duration_s},
                  {"allocs_per_s", a.allocs_per_s},
                  {"bytes_per_s", a.bytes_per_s},
                  {"best_fit_pool", a.best_fit_pool},
                  {"static_pool_bytes", a.static_pool_bytes}};
  json hist = json::array();
  for (const SizeBin& b : a.histogram)
    hist.push_back({{"low", b.low}, {"high", b.high}, {"count", b.count}, {"bytes", b.bytes}});
  j["summary"]["histogram"] = hist;
  j["period"] = {{"found", a.period.found},
                 {"length", a.period.length},
                 {"start_event", a.period_start_event},
                 {"repeats", a.period.repeats},
                 {"match", a.period.match}};
  json steps = json::array();
  for (const StepStats& s : a.steps)
    steps.push_back({{"begin", s.window.begin},
                     {"end", s.window.end},
                     {"allocs", s.allocs},
                     {"bytes_allocated", s.bytes_allocated},
                     {"peak_live", s.peak_live},
                     {"live_in", s.live_in},
                     {"kind", s.group},
                     {"common_size", s.common_size}});
  j["steps"] = {{"from_marks", a.steps_from_marks}, {"list", steps}};
  json groups = json::array();
  for (const StepGroup& g : a.groups)
    groups.push_back({{"steps", g.steps},
                      {"scale", g.scale},
                      {"peak_live", g.peak_live},
                      {"planned", g.planned},
                      {"lower_bound", g.lower_bound},
                      {"live_in", g.live_in}});
  j["step_kinds"] = groups;
  j["solver"] = a.solver;
  if (a.reserved) {
    const ReservedBreakdown& r = *a.reserved;
    j["reserved_at_peak"] = {{"reserved", r.reserved},
                             {"live", r.live},
                             {"unused", r.unused},
                             {"live_total", r.live_total},
                             {"in_empty_ranges", r.in_empty_ranges},
                             {"dead_cached", r.dead_cached},
                             {"oversize", r.oversize},
                             {"fragmented", r.fragmented},
                             {"largest_free_gap", r.largest_free_gap},
                             {"ranges", r.ranges}};
  } else {
    j["reserved_at_peak"] = nullptr;
  }
  json advice = json::array();
  for (const Advice& adv : a.advice) {
    json check = nullptr;
    if (adv.check)
      check = {{"ooms", adv.check->ooms},
               {"peak_reserved", adv.check->peak_reserved},
               {"peak_live", adv.check->peak_live}};
    advice.push_back({{"topic", adv.topic},
                      {"message", adv.message},
                      {"config", adv.config.empty() ? json(nullptr) : json(adv.config)},
                      {"check", check},
                      {"mindspore", adv.mindspore.empty() ? json(nullptr) : json(adv.mindspore)}});
  }
  j["advice"] = advice;
  j["skipped"] = a.skipped;
  j["snapshot"] = nullptr;
  if (a.snapshot) {
    json pools = json::array();
    for (const SnapshotPool& p : a.snapshot->pools)
      pools.push_back({{"index", p.index},
                       {"device", p.device},
                       {"id", p.id},
                       {"kind", p.kind},
                       {"segments", p.segments},
                       {"blocks", p.blocks},
                       {"reserved", p.reserved},
                       {"allocated", p.allocated},
                       {"requested", p.requested},
                       {"pending_free", p.pending_free},
                       {"kv_cache", p.kv_cache},
                       {"top_site", p.top_site},
                       {"top_site_bytes", p.top_site_bytes}});
    j["snapshot"] = {{"pools", pools},
                     {"reserved", a.snapshot->reserved()},
                     {"allocated", a.snapshot->allocated()},
                     {"requested", a.snapshot->requested()},
                     {"pending_free", a.snapshot->pending_free()},
                     {"step_annotation", a.snapshot->step_annotation},
                     {"step_marks", a.snapshot->step_marks}};
  }
  return j;
}

nlohmann::json to_json(const Analysis& analysis, const std::vector<AllocationSite>& sites) {
  nlohmann::json j = to_json(analysis);
  j["sites"] = nlohmann::json::array();
  for (const auto& s : sites)
    j["sites"].push_back({{"site", s.site},
                          {"allocs", s.allocs},
                          {"bytes", s.bytes},
                          {"live_at_end", s.live_at_end}});
  return j;
}

}  // namespace modelmem::trace
