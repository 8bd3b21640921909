// Packing replicas onto devices and the report of `modelmem place`
// (modelmem/sizing/placement.hpp).
#include "modelmem/sizing/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/checked.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::sizing {
namespace {

constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
constexpr std::size_t kNodeBudget = 2'000'000;  // search nodes before the exact search gives up

// The general problem: item i takes size[i][b] on bin b (kNever: cannot go there); two items
// of one group (>= 0) never share a bin; bins of one class holding the same room and groups are
// interchangeable. Objective: most weight placed, then fewest bins used.
struct Problem {
  std::vector<std::size_t> weight;
  std::vector<std::vector<std::size_t>> size;
  std::vector<std::size_t> cap;
  std::vector<int> bin_class;
  std::vector<int> group;  ///< empty: no groups
};

int group_of(const Problem& p, std::size_t i) {
  return p.group.empty() ? -1 : p.group[i];
}

// The groups each bin holds, for the rule that a group's items never share a bin.
struct Groups {
  std::vector<std::vector<int>> in;  // per bin, sorted
  explicit Groups(std::size_t bins) : in(bins) {}
  bool blocks(int group, std::size_t b) const {
    return group >= 0 && std::binary_search(in[b].begin(), in[b].end(), group);
  }
  void add(int group, std::size_t b) {
    if (group >= 0) in[b].insert(std::upper_bound(in[b].begin(), in[b].end(), group), group);
  }
  void remove(int group, std::size_t b) {
    if (group >= 0) in[b].erase(std::lower_bound(in[b].begin(), in[b].end(), group));
  }
};

std::vector<std::size_t> by_weight_desc(const Problem& p) {
  std::vector<std::size_t> order(p.weight.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return p.weight[a] > p.weight[b]; });
  return order;
}

std::vector<int> best_fit_decreasing(const Problem& p) {
  std::vector<int> out(p.weight.size(), -1);
  std::vector<std::size_t> used(p.cap.size(), 0);
  Groups groups(p.cap.size());
  for (std::size_t i : by_weight_desc(p)) {
    int best = -1;
    std::size_t best_room = kNever;
    for (std::size_t b = 0; b < p.cap.size(); ++b) {
      const std::size_t s = p.size[i][b];
      if (s == kNever || used[b] + s > p.cap[b] || groups.blocks(group_of(p, i), b)) continue;
      const std::size_t room = p.cap[b] - used[b] - s;
      if (room < best_room) best = static_cast<int>(b), best_room = room;
    }
    if (best >= 0) {
      out[i] = best;
      used[static_cast<std::size_t>(best)] += p.size[i][static_cast<std::size_t>(best)];
      groups.add(group_of(p, i), static_cast<std::size_t>(best));
    }
  }
  return out;
}

struct Score {
  std::size_t placed = 0;
  std::size_t bins = 0;
  bool better_than(const Score& o) const {
    return placed > o.placed || (placed == o.placed && bins < o.bins);
  }
};

Score score(const Problem& p, const std::vector<int>& a) {
  Score s;
  std::set<int> bins;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] >= 0) s.placed += p.weight[i], bins.insert(a[i]);
  s.bins = bins.size();
  return s;
}

struct Search {
  const Problem& p;
  std::vector<std::size_t> order;
  std::vector<std::size_t> suffix;  // weight of order[k..]
  std::vector<std::size_t> used;
  Groups groups;
  std::vector<int> current, best;
  Score best_score;
  std::size_t nodes = 0;
  bool out_of_budget = false;

  void run(std::size_t k, std::size_t placed, std::size_t bins) {
    if (++nodes > kNodeBudget) {
      out_of_budget = true;
      return;
    }
    if (placed + suffix[k] < best_score.placed) return;
    if (placed + suffix[k] == best_score.placed && bins >= best_score.bins) return;
    if (k == order.size()) {
      best = current;
      best_score = {placed, bins};
      return;
    }
    const std::size_t i = order[k];
    const int g = group_of(p, i);
    // Bins tried at this level: a bin of the same class holding the same room and groups as
    // one of them leads to the same subtrees.
    std::vector<std::size_t> tried;
    for (std::size_t b = 0; b < p.cap.size() && !out_of_budget; ++b) {
      const std::size_t s = p.size[i][b];
      if (s == kNever || used[b] + s > p.cap[b] || groups.blocks(g, b)) continue;
      const bool same = std::any_of(tried.begin(), tried.end(), [&](std::size_t t) {
        return p.bin_class[t] == p.bin_class[b] && used[t] == used[b] &&
               groups.in[t] == groups.in[b];
      });
      if (same) continue;
      tried.push_back(b);
      const bool opens = used[b] == 0;
      used[b] += s;
      groups.add(g, b);
      current[i] = static_cast<int>(b);
      run(k + 1, placed + p.weight[i], bins + (opens ? 1 : 0));
      current[i] = -1;
      groups.remove(g, b);
      used[b] -= s;
    }
    if (!out_of_budget) run(k + 1, placed, bins);  // leave it without a device
  }
};

Packing solve(const Problem& p, std::size_t exact_limit) {
  Packing out;
  out.assignment = best_fit_decreasing(p);
  if (p.weight.size() > exact_limit) {
    out.method = fmt::format(
        "best-fit decreasing ({} replicas > {}: each replica, largest first, onto the device it "
        "leaves with the least room)",
        p.weight.size(), exact_limit);
    return out;
  }
  Search s{p,
           by_weight_desc(p),
           {},
           std::vector<std::size_t>(p.cap.size(), 0),
           Groups(p.cap.size()),
           {},
           {},
           {}};
  s.suffix.assign(s.order.size() + 1, 0);
  for (std::size_t k = s.order.size(); k-- > 0;)
    s.suffix[k] = s.suffix[k + 1] + p.weight[s.order[k]];
  s.current.assign(p.weight.size(), -1);
  s.best = out.assignment;
  s.best_score = score(p, out.assignment);
  // The search must beat best-fit decreasing, or proves that nothing does.
  s.run(0, 0, 0);
  out.assignment = s.best;
  out.exact = true;
  out.proven = !s.out_of_budget;
  out.method = out.proven
                   ? "exact search, proven (most bytes placed, then fewest devices)"
                   : fmt::format("exact search stopped after {} nodes: best found kept, not proven",
                                 kNodeBudget);
  return out;
}

// What a device's scheduler accounts for a replica of `request` bytes: on Ascend with
// templates, the smallest vNPU template that holds it, else the whole device.
std::pair<std::size_t, std::string> charge_on(std::size_t request, const Device& d,
                                              bool templates) {
  if (!templates || !accelerator(d.kind).ascend) return {request, ""};
  if (const VnpuTemplate* t = vnpu_template(request, d)) return {t->mib * kMiB, t->name};
  if (request <= d.bytes) return {d.bytes, ""};
  return {request, ""};
}

}  // namespace

const VnpuTemplate* vnpu_template(std::size_t request, const Device& device) {
  for (const auto& t : accelerator(device.kind).templates)
    if (t.mib * kMiB >= request && t.mib * kMiB <= device.bytes) return &t;
  return nullptr;
}

Packing pack(const std::vector<std::size_t>& items, const std::vector<std::size_t>& bins,
             std::size_t exact_limit) {
  Problem p;
  p.weight = items;
  p.cap = bins;
  for (std::size_t b = 0; b < bins.size(); ++b)  // bins of one capacity are interchangeable
    p.bin_class.push_back(
        static_cast<int>(std::find(bins.begin(), bins.end(), bins[b]) - bins.begin()));
  p.size.assign(items.size(), items);
  for (std::size_t i = 0; i < items.size(); ++i) p.size[i].assign(bins.size(), items[i]);
  return solve(p, exact_limit);
}

std::size_t Placement::used(std::size_t device) const {
  std::size_t sum = 0;
  for (const auto& r : replicas)
    if (r.device == static_cast<int>(device)) sum = checked_add(sum, r.charge, "device use");
  return sum;
}

long long Placement::headroom(std::size_t device) const {
  return static_cast<long long>(devices.at(device).bytes) - static_cast<long long>(used(device));
}

std::string Placement::replica_name(std::size_t replica) const {
  const Replica& r = replicas.at(replica);
  return fmt::format("{}-{}", models.at(r.model).name, r.number);
}

const PlacementNeed& Placement::need_on(std::size_t model, const Device& device) const {
  const auto& by_kind = needs.at(model);
  auto it = by_kind.find(accelerator(device.kind).backend);
  if (it == by_kind.end())
    throw Error(fmt::format("model {}: no need computed for {} devices", models.at(model).name,
                            device.kind));
  return it->second;
}

const PlacementNeed& Placement::need_of(std::size_t replica) const {
  const Replica& r = replicas.at(replica);
  if (r.device < 0) throw InvalidInput(fmt::format("{} has no device", replica_name(replica)));
  return need_on(r.model, devices.at(static_cast<std::size_t>(r.device)));
}

std::string pool_conf(const Placement& pl, std::size_t model, Backend backend) {
  const PlacementNeed& n = pl.needs.at(model).at(backend);
  const std::string& pool = pl.models.at(model).name;
  return fmt::format("{},pools:[{}:{}],default_pool:{}", n.strategy, pool, n.need / kMiB, pool);
}

namespace {

void check_models(const std::vector<ModelSpec>& models, const std::vector<Device>& devices) {
  if (models.empty()) throw InvalidInput("no model to place");
  if (devices.empty()) throw InvalidInput("no device to place the models on");
  std::set<std::string> names;
  for (const auto& m : models) {
    if (m.name.empty()) throw InvalidInput("a model without a name");
    if (!names.insert(m.name).second)
      throw InvalidInput(fmt::format("model name '{}' given twice (names must be unique)", m.name));
    if (m.replicas < 1) throw InvalidInput(fmt::format("model {}: replicas must be >= 1", m.name));
  }
  for (const auto& d : devices) accelerator(d.kind);
}

Placement pack_needs(const std::vector<ModelSpec>& models,
                     std::vector<std::map<Backend, PlacementNeed>> needs,
                     const std::vector<Device>& devices, const PlaceOptions& options);

}  // namespace

Placement place(const std::vector<ModelSpec>& models, const std::vector<Device>& devices,
                const PlaceOptions& options) {
  check_models(models, devices);
  validate_sizing(models, options);
  std::set<Backend> backends;
  for (const auto& d : devices) backends.insert(accelerator(d.kind).backend);
  std::vector<std::map<Backend, PlacementNeed>> needs(models.size());
  for (std::size_t i = 0; i < models.size(); ++i) {
    const ModelSpec& m = models[i];
    if (m.serve) {
      for (Backend b : backends) needs[i][b] = model_need(m, b, options);
      continue;
    }
    // One plan per model, its need on each kind of device the fleet has.
    const model::ModelPlan plan = model::plan_model(m.path, plan_options(m));
    for (Backend b : backends) needs[i][b] = model_need(m, plan, b, options);
  }
  // One --dim list for several files: each dim must be some model's.
  for (const auto& m : models)
    for (const auto& [dim, value] : m.dims) {
      bool used = false;
      for (const auto& by_kind : needs)
        for (const auto& [b, n] : by_kind)
          used = used ||
                 std::find(n.dims_bound.begin(), n.dims_bound.end(), dim) != n.dims_bound.end();
      if (!used) {
        std::set<std::string> known;
        for (const auto& by_kind : needs)
          for (const auto& [b, n] : by_kind) known.insert(n.dims_bound.begin(), n.dims_bound.end());
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        throw InvalidInput(
            fmt::format("--dim {}: none of the models has a dim named '{}' (they have: {})", dim,
                        dim, list.empty() ? "none" : list));
      }
    }
  return pack_needs(models, std::move(needs), devices, options);
}

Placement place(const std::vector<ModelSpec>& models, const std::vector<PlacementNeed>& needs,
                const std::vector<Device>& devices, const PlaceOptions& options) {
  check_models(models, devices);
  if (needs.size() != models.size()) throw InvalidInput("place: one need per model");
  std::vector<std::map<Backend, PlacementNeed>> by_kind(models.size());
  for (std::size_t m = 0; m < models.size(); ++m)
    for (const auto& d : devices) {
      PlacementNeed n = needs[m];
      n.backend = accelerator(d.kind).backend;
      n.need = checked_add(n.need, kMiB - 1, "need") / kMiB * kMiB;
      n.request = checked_add(n.need + n.overhead.bytes, kMiB - 1, "request") / kMiB * kMiB;
      by_kind[m][n.backend] = n;
    }
  return pack_needs(models, std::move(by_kind), devices, options);
}

namespace {

Placement pack_needs(const std::vector<ModelSpec>& models,
                     std::vector<std::map<Backend, PlacementNeed>> needs,
                     const std::vector<Device>& devices, const PlaceOptions& options) {
  Placement pl;
  pl.models = models;
  pl.needs = std::move(needs);
  pl.devices = devices;
  for (std::size_t m = 0; m < models.size(); ++m) {
    for (const auto& [b, n] : pl.needs[m])
      if (n.need == 0)
        throw InvalidInput(fmt::format("model {}: a need of 0 bytes", models[m].name));
    for (int r = 0; r < models[m].replicas; ++r) pl.replicas.push_back({m, r, 0, 0, "", -1});
  }
  auto request_on = [&](const Replica& r, const Device& d) {
    return pl.need_on(r.model, d).request;
  };
  Problem p;
  std::vector<std::string> kinds;
  for (const auto& d : devices) {
    p.cap.push_back(d.bytes);
    auto it = std::find(kinds.begin(), kinds.end(), d.kind + "/" + std::to_string(d.bytes));
    p.bin_class.push_back(static_cast<int>(it - kinds.begin()));
    if (it == kinds.end()) kinds.push_back(d.kind + "/" + std::to_string(d.bytes));
  }
  for (const auto& r : pl.replicas) {
    if (options.spread) p.group.push_back(static_cast<int>(r.model));
    std::vector<std::size_t> row;
    std::size_t least = kNever;
    for (const auto& d : devices) {
      row.push_back(charge_on(request_on(r, d), d, options.templates).first);
      least = std::min(least, request_on(r, d));
    }
    p.weight.push_back(least);
    p.size.push_back(std::move(row));
  }
  pl.packing = solve(p, options.exact_limit);
  std::vector<std::size_t> room(devices.size());
  for (std::size_t b = 0; b < devices.size(); ++b) room[b] = devices[b].bytes;
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    Replica& r = pl.replicas[i];
    r.device = pl.packing.assignment[i];
    if (r.device < 0) {
      r.request = p.weight[i];
      continue;
    }
    const Device& d = devices[static_cast<std::size_t>(r.device)];
    r.request = request_on(r, d);
    std::tie(r.charge, r.template_name) = charge_on(r.request, d, options.templates);
    room[static_cast<std::size_t>(r.device)] -= r.charge;
  }
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    Replica& r = pl.replicas[i];
    if (r.device >= 0) continue;
    Shortfall s;
    s.replica = i;
    std::size_t best_short = kNever;
    bool blocked_room = false;  // a device with room that holds a replica of this model
    bool any_open = false;
    std::size_t largest = 0;        // the device with the most memory
    bool larger_everywhere = true;  // the request exceeds every device's memory
    for (std::size_t b = 0; b < devices.size(); ++b) {
      const std::size_t request = request_on(r, devices[b]);
      const auto [charge, name] = charge_on(request, devices[b], options.templates);
      const std::size_t short_by = charge > room[b] ? charge - room[b] : 0;
      if (devices[b].bytes > devices[largest].bytes) largest = b;
      larger_everywhere = larger_everywhere && request > devices[b].bytes;
      bool holds = false;
      for (const auto& other : pl.replicas)
        holds = holds || (options.spread && other.model == r.model && other.device == int(b));
      if (holds) {
        blocked_room = blocked_room || short_by == 0;
        continue;
      }
      any_open = true;
      if (short_by < best_short) {
        best_short = short_by, s.device = static_cast<int>(b), s.room = room[b];
        r.request = request, r.charge = charge, r.template_name = name;
      }
    }
    const std::string spread_note =
        blocked_room ? fmt::format(
                           " (devices with room hold another replica of {}: replicas go "
                           "to distinct devices unless --no-spread)",
                           models[r.model].name)
                     : "";
    if (!any_open) {
      pl.messages.push_back(fmt::format(
          "{}: every one of the {} devices already holds a replica of {}: {} replicas need {} "
          "devices, {} short (replicas go to distinct devices unless --no-spread)",
          pl.replica_name(i), devices.size(), models[r.model].name, models[r.model].replicas,
          models[r.model].replicas,
          static_cast<std::size_t>(models[r.model].replicas) - devices.size()));
      pl.shortfalls.push_back(s);
      continue;
    }
    s.short_by = best_short;
    const Device& d = devices[static_cast<std::size_t>(s.device)];
    const std::string charged =
        r.charge == r.request
            ? ""
            : fmt::format(" (charged {})",
                          r.template_name.empty() ? "the whole device" : r.template_name);
    const Device& big = devices[largest];
    const std::size_t big_request = request_on(r, big);
    if (larger_everywhere)
      pl.messages.push_back(fmt::format(
          "{} needs {} MiB: larger than every device (the largest, {}, has {} MiB), short by {} "
          "MiB",
          pl.replica_name(i), big_request / kMiB, big.name(), big.bytes / kMiB,
          (big_request - big.bytes + kMiB - 1) / kMiB));
    else
      pl.messages.push_back(fmt::format(
          "{} needs {} MiB{}: no device has room; the most is {} MiB on {}, short by {} MiB{}",
          pl.replica_name(i), r.request / kMiB, charged, s.room / kMiB, d.name(),
          (s.short_by + kMiB - 1) / kMiB, spread_note));
    pl.shortfalls.push_back(s);
  }
  return pl;
}

}  // namespace

std::string render_text(const Placement& pl) {
  std::string out;
  std::size_t replicas = pl.replicas.size();
  std::map<std::string, int> kinds;
  for (const auto& d : pl.devices) ++kinds[fmt::format("{} {} MiB", d.kind, d.bytes / kMiB)];
  std::string devs;
  for (const auto& [k, n] : kinds) devs += fmt::format("{}{} x {}", devs.empty() ? "" : ", ", n, k);
  out += fmt::format("placement      {} models, {} replicas on {} devices ({})\n", pl.models.size(),
                     replicas, pl.devices.size(), devs);
  out += fmt::format("method         {}\n", pl.packing.method);
  out +=
      "need           the pool's need on its strategy (modelmem plan --device-memory's figure; a "
      "served LLM: its serving loop's need on its strategy), the quota in MODELMEM_ALLOC_CONF and "
      "the allocator's cap; "
      "request = need + overhead in whole MiB, what the container asks its scheduler for\n";
  // Each overhead once, with where it comes from.
  std::set<std::string> overheads;
  for (const auto& by_kind : pl.needs)
    for (const auto& [b, n] : by_kind)
      if (overheads.insert(backend_name(b) + n.overhead.source).second)
        out += fmt::format("overhead       {} on {}: {}\n", format_bytes(n.overhead.bytes),
                           backend_name(b), n.overhead.source);
  out += "\n";
  std::size_t w = 5;
  for (const auto& m : pl.models) w = std::max(w, m.name.size());
  out += fmt::format("{:<{}}  {:<4}  {:>8}  {:>8}  {:>10}  {:>12}  {}\n", "model", w, "on",
                     "replicas", "need", "overhead", "request", "basis");
  for (std::size_t m = 0; m < pl.models.size(); ++m)
    for (const auto& [b, n] : pl.needs[m])
      out += fmt::format("{:<{}}  {:<4}  {:>8}  {:>4} MiB  {:>10}  {:>8} MiB  {}\n",
                         pl.models[m].name, w, backend_name(b), pl.models[m].replicas,
                         n.need / kMiB, format_bytes(n.overhead.bytes), n.request / kMiB, n.basis);
  out += "\n";
  for (std::size_t m = 0; m < pl.models.size(); ++m)
    for (const auto& [b, n] : pl.needs[m]) {
      out += fmt::format("config         {} on {}: {}\n", pl.models[m].name, backend_name(b),
                         pool_conf(pl, m, b));
      for (const auto& [var, value] : n.engine_env)
        out += fmt::format("engine         {} on {}: {}={}\n", pl.models[m].name, backend_name(b),
                           var, value);
    }
  std::size_t dw = 6;
  for (const auto& d : pl.devices) dw = std::max(dw, d.name().size());
  out += fmt::format("\n{:<{}}  {:<5}  {:>10}  {:>10}  {:>10}  {}\n", "device", dw, "kind",
                     "memory", "used", "headroom", "replicas (charged)");
  std::size_t used_devices = 0;
  for (std::size_t b = 0; b < pl.devices.size(); ++b) {
    const Device& d = pl.devices[b];
    std::string list;
    for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
      const Replica& r = pl.replicas[i];
      if (r.device != static_cast<int>(b)) continue;
      list += fmt::format("{}{}", list.empty() ? "" : ", ", pl.replica_name(i));
      if (!r.template_name.empty())
        list += fmt::format(" ({} {} MiB)", r.template_name, r.charge / kMiB);
      else if (r.charge != r.request)
        list += " (whole device)";
    }
    if (!list.empty()) ++used_devices;
    out += fmt::format("{:<{}}  {:<5}  {:>6} MiB  {:>6} MiB  {:>6} MiB  {}\n", d.name(), dw, d.kind,
                       d.bytes / kMiB, pl.used(b) / kMiB,
                       pl.headroom(b) / static_cast<long long>(kMiB), list.empty() ? "-" : list);
  }
  out += "\n";
  if (pl.fits()) {
    out += fmt::format("fits           yes: {} replicas on {} of {} devices\n", replicas,
                       used_devices, pl.devices.size());
  } else {
    out += fmt::format("fits           no: {} of {} replicas have no device{}\n",
                       pl.shortfalls.size(), replicas,
                       pl.packing.proven ? " in any placement (the search is exhaustive)"
                                         : " in the placement found (heuristic)");
    for (const auto& m : pl.messages) out += "does not fit   " + m + "\n";
  }
  return out;
}

}  // namespace modelmem::sizing
