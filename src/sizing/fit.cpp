// `plan --fit DIM` (modelmem/sizing/fit.hpp): doubling, then bisection, over exact plans.
#include "modelmem/sizing/fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <optional>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/model/render.hpp"

namespace modelmem::sizing {

namespace {

struct Probe {
  bool fits = false;
  std::size_t total = 0;
  std::optional<model::TableLimit> limit;  ///< the model stopped this value
  DeviceNeed plan;
};

Probe probe(const FitRequest& r, std::int64_t value) {
  model::PlanOptions o = r.options;
  o.dims[r.dim] = value;
  Probe p;
  try {
    p.plan = plan_device(r.models, o, r.device_memory, r.sizing);
  } catch (const model::ModelLimitExceeded& e) {
    p.limit = e.limit();
    return p;
  }
  p.fits = p.plan.fits();
  p.total = p.plan.total;
  return p;
}

// What the every-value scan needs of a value the search planned.
struct Probed {
  bool fits = false;
  std::size_t total = 0;
};

std::string limit_text(const model::TableLimit& l) {
  return fmt::format("model: table '{}' has {} rows ({})", l.table, l.rows, l.node);
}

void check(const FitRequest& r) {
  if (r.models.empty()) throw InvalidInput("no model given");
  if (r.device_memory == 0) throw InvalidInput("--fit needs --device-memory SIZE");
  if (r.dim.empty()) throw InvalidInput("--fit needs a dim name (batch, seq, ...)");
  if (r.options.dims.count(r.dim))
    throw InvalidInput(fmt::format("--fit {} and --dim {} name the same dim", r.dim, r.dim));
  if (r.options.buckets) throw InvalidInput("--fit does not go with --buckets");
  if (r.max_value < 1) throw InvalidInput("--fit: the largest value searched must be >= 1");
  model::validate(r.options);
  validate(r.sizing, r.device_memory);
}

// The every-value answer: each value from 1 up, the search's plans reused, to the first value
// that does not fit, the single value found, or every_max.
// `planned`: what the search found at each value it planned (fits, total). The plan of the value
// that needs the most is kept; one the search made is planned once more at the end.
void every_value(const FitRequest& r, const std::map<std::int64_t, Probed>& planned,
                 FitResult& out) {
  if (r.every_max <= 0 || out.value <= 0) return;
  const std::int64_t top = std::min(out.value, r.every_max);
  std::size_t peak_total = 0;
  bool peak_planned = false;  // the peak's plan is in out.every_plan
  for (std::int64_t v = 1; v <= top; ++v) {
    Probed seen;
    std::optional<Probe> fresh;
    if (auto it = planned.find(v); it != planned.end()) {
      seen = it->second;
    } else {
      fresh = probe(r, v);
      ++out.every_probes;
      seen = {fresh->fits, fresh->total};
    }
    if (!seen.fits) {
      out.every_refused = v;
      break;
    }
    out.every_value = v;
    if (seen.total >= peak_total) {
      peak_total = seen.total;
      out.every_peak_value = v;
      peak_planned = fresh.has_value();
      if (fresh) out.every_plan = std::move(fresh->plan);
    }
  }
  if (out.every_value > 0 && !peak_planned) out.every_plan = probe(r, out.every_peak_value).plan;
  out.every_complete = out.every_value == out.value;
}

}  // namespace

FitResult fit(const FitRequest& r) {
  check(r);
  const auto t0 = std::chrono::steady_clock::now();
  FitResult out;
  out.dim = r.dim;
  if (r.models.size() == 1) out.model = r.models.front();
  std::map<std::int64_t, Probed> planned;  // every value the search planned
  auto probe_at = [&](std::int64_t v) {
    Probe p = probe(r, v);
    planned[v] = {p.fits, p.total};
    return p;
  };
  Probe lo_probe = probe_at(1);
  out.probes = 1;
  auto finish = [&](const Probe& at, const Probe* next) {
    out.need_bytes = at.fits ? at.total : 0;
    if (at.fits) out.at_value = at.plan;
    if (next != nullptr) {
      out.next_need_bytes = next->total;
      out.limit = next->limit ? limit_text(*next->limit) : "memory";
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  };
  if (!lo_probe.fits) {
    out.value = 0;
    return finish(lo_probe, &lo_probe);
  }
  std::int64_t lo = 1, hi = 0;
  Probe hi_probe;
  // Plans `v`: the largest value known to fit, or the smallest known not to, moves to it.
  std::int64_t smallest_refused = 0;  // for memory, among the values planned
  auto refused = [&](const Probe& p, std::int64_t v) {
    if (!p.fits && !p.limit && (smallest_refused == 0 || v < smallest_refused))
      smallest_refused = v;
  };
  auto step = [&](std::int64_t v) {
    Probe p = probe_at(v);
    ++out.probes;
    refused(p, v);
    if (p.fits) {
      lo = v;
      lo_probe = std::move(p);
    } else {
      hi = v;
      hi_probe = std::move(p);
    }
  };
  while (hi == 0) {
    if (lo >= r.max_value) {
      out.value = lo;
      out.limit = fmt::format("search: stopped at {}={}", r.dim, r.max_value);
      every_value(r, planned, out);
      return finish(lo_probe, nullptr);
    }
    step(std::min(lo * 2, r.max_value));
  }
  // The need is not always monotone in the dim (the caching pool's segments and rounding: a
  // larger batch can fit where a smaller one did not). Past the bisection, kAbove values between
  // the value found and the first doubling that failed are planned too; one that fits starts
  // the bisection again above it (at most kRestarts times), then the kNear values right above
  // the next one (a single value can be refused where its neighbours fit: ResNet-50's 288 on
  // 4 GiB, one request rounded to the next 2 MiB where the others were not).
  constexpr int kAbove = 4, kNear = 2, kRestarts = 2;
  const std::int64_t ceiling = hi;
  for (int round = 0;; ++round) {
    while (hi - lo > 1) step(lo + (hi - lo) / 2);
    if (round == kRestarts || hi_probe.limit) break;  // a model's table refuses every value above
    out.checked_above.clear();
    std::optional<std::int64_t> higher;
    std::optional<Probe> higher_probe;
    std::vector<std::int64_t> candidates;
    for (int k = kAbove; k >= 1; --k) candidates.push_back(hi + (ceiling - hi) * k / (kAbove + 1));
    for (int k = kNear; k >= 1; --k) candidates.push_back(hi + k);
    for (std::int64_t v : candidates) {
      if (higher) break;
      if (v <= hi || v >= ceiling ||
          std::ranges::find(out.checked_above, v) != out.checked_above.end())
        continue;
      Probe p = probe_at(v);
      ++out.probes;
      if (p.limit) continue;  // refused by the model: not a memory figure
      refused(p, v);
      if (p.fits) {
        higher = v;
        higher_probe = std::move(p);
      } else {
        out.checked_above.push_back(v);
      }
    }
    if (!higher) break;
    out.not_monotone = fmt::format("{}={} fits although {}={} does not", r.dim, *higher, r.dim, hi);
    lo = *higher;
    lo_probe = std::move(*higher_probe);
    hi = ceiling;
    for (std::int64_t v : out.checked_above)
      if (v > lo) hi = std::min(hi, v);
    hi_probe = probe_at(hi);
    ++out.probes;
  }
  // Listed: the values above the next one (which has its own line), in increasing order.
  std::erase_if(out.checked_above, [&](std::int64_t v) { return v <= lo + 1; });
  std::sort(out.checked_above.begin(), out.checked_above.end());
  out.value = lo;
  if (smallest_refused > 0 && smallest_refused < lo) out.refused_below = smallest_refused;
  every_value(r, planned, out);
  return finish(lo_probe, &hi_probe);
}

std::vector<FitResult> fit_each(const FitRequest& r) {
  check(r);
  std::vector<FitResult> out;
  for (const auto& m : r.models) {
    FitRequest one = r;
    one.models = {m};
    // Alone, a model takes the dims it has: the others' are left out.
    model::PlanOptions names = r.options;
    names.ignore_unknown_dims = true;
    names.solver = "greedy-size";
    names.dims[r.dim] = 1;
    const auto bound = model::plan_model(m, names).graph.dims;
    for (auto it = one.options.dims.begin(); it != one.options.dims.end();)
      it = bound.count(it->first) ? std::next(it) : one.options.dims.erase(it);
    out.push_back(fit(one));
  }
  return out;
}

std::string render_text(const FitResult& f) {
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  const std::string who = f.model.empty() ? "every model together" : f.model;
  const std::string strategy =
      f.at_value.needs.empty() ? "" : " on " + f.at_value.needs.front().strategy;
  if (f.found()) {
    line(fmt::format("fit            {}={}: the largest that fits {} ({}{})", f.dim, f.value,
                     format_bytes(f.at_value.plan.device_memory), who, strategy));
    line(fmt::format("  {}={:<10} need {} (the quotas and the overhead): fits", f.dim, f.value,
                     model::bytes_text(f.need_bytes)));
  } else {
    line(fmt::format("fit            no value of {} fits ({})", f.dim, who));
  }
  if (f.limit.rfind("model:", 0) == 0)
    line(fmt::format("  {}={:<10} refused by the model", f.dim, f.value + 1));
  else if (f.limit == "memory")
    line(fmt::format("  {}={:<10} need {}: does not fit", f.dim, f.value + 1,
                     model::bytes_text(f.next_need_bytes)));
  if (!f.checked_above.empty()) {
    std::string values;
    for (std::int64_t v : f.checked_above)
      values += fmt::format("{}{}", values.empty() ? "" : ", ", v);
    line(fmt::format("  {}={}: {} either (planned too: the need is not always monotone)", f.dim,
                     values, f.checked_above.size() > 1 ? "none fits" : "does not fit"));
  }
  if (!f.not_monotone.empty())
    line(fmt::format("monotone       no: {}; the search went on above", f.not_monotone));
  if (f.found() && f.every_value > 0) {
    const std::string peak =
        f.every_peak_value == f.value
            ? ""
            : fmt::format("; the most any of them needs: {} at {}={}",
                          model::bytes_text(f.every_plan.total), f.dim, f.every_peak_value);
    if (f.every_complete)
      line(fmt::format("answer         {}={}: every {} from 1 to {} fits (each planned){}", f.dim,
                       f.every_value, f.dim, f.every_value, peak));
    else if (f.every_refused > 0)
      line(
          fmt::format("answer         {}={}: every {} from 1 to {} fits (each planned); {}={} "
                      "does not, so {}={} above holds for that one {} only{}",
                      f.dim, f.every_value, f.dim, f.every_value, f.dim, f.every_refused, f.dim,
                      f.value, f.dim, peak));
    else
      line(
          fmt::format("answer         {}={}: every {} from 1 to {} fits (each planned); {}..{} "
                      "were not each planned (the scan's limit), {}={} fits alone{}",
                      f.dim, f.every_value, f.dim, f.every_value, f.every_value + 1, f.value - 1,
                      f.dim, f.value, peak));
  } else if (f.found() && f.refused_below > 0) {
    line(
        fmt::format("answer         for one {} only: {}={} does not fit, so not every {} up to {} "
                    "does",
                    f.dim, f.dim, f.refused_below, f.dim, f.value));
  } else if (f.found() && f.value > 1) {
    line(fmt::format("answer         for one {}: {}=1..{} were not each planned", f.dim, f.dim,
                     f.value - 1));
  }
  line(fmt::format("limit          {}", f.limit));
  line(fmt::format("probes         {} plans in {:.2f} s{}", f.probes + f.every_probes, f.seconds,
                   f.every_probes
                       ? fmt::format(" ({} of them for the every-{} answer)", f.every_probes, f.dim)
                       : ""));
  if (f.found()) {
    const model::DevicePlan& dp = f.at_value.plan;
    for (std::size_t i = 0; i < dp.models.size(); ++i)
      line(fmt::format("config         {}: {}", dp.models[i].pool, dp.config_string(i)));
    line(fmt::format("config         one process{}: {}",
                     dp.models.size() > 1 ? ", every model" : "", dp.config_string_all()));
  }
  if (f.found() && f.every_value > 0 && f.every_peak_value != f.value) {
    // The quotas that serve every value up to every_value: those of the one that needs most.
    const model::DevicePlan& dp = f.every_plan.plan;
    line(fmt::format("config         every {} up to {}, one process: {}", f.dim, f.every_value,
                     dp.config_string_all()));
  }
  return out;
}

nlohmann::json fit_json(const FitResult& f) {
  nlohmann::json j = {{"dim", f.dim},
                      {"value", f.value},
                      {"need_bytes", f.need_bytes},
                      {"next_need_bytes", f.next_need_bytes},
                      {"limit", f.limit},
                      {"probes", f.probes},
                      {"checked_above", f.checked_above},
                      {"not_monotone", f.not_monotone},
                      {"refused_below", f.refused_below},
                      {"every_value", f.every_value},
                      {"every_complete", f.every_complete},
                      {"every_refused", f.every_refused},
                      {"every_probes", f.every_probes},
                      {"every_peak_value", f.every_peak_value},
                      {"seconds", f.seconds}};
  if (!f.model.empty()) j["model"] = f.model;
  return j;
}

nlohmann::json render_json(const FitResult& f) {
  nlohmann::json j = f.found() ? render_json(f.at_value) : nlohmann::json::object();
  j["fit"] = fit_json(f);
  return j;
}

nlohmann::json render_json(const std::vector<FitResult>& each) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& f : each) all.push_back(render_json(f));
  return {{"fit_each", std::move(all)}};
}

}  // namespace modelmem::sizing
