// Kubernetes, DRA and Ray Serve objects for a Placement, and the caps inside each container
// (modelmem/sizing/requests.hpp). Units and field names: docs/fleet.md, with the sources.
#include "modelmem/sizing/requests.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::sizing {
namespace {

using Json = nlohmann::ordered_json;
// ---- a small YAML writer: block style, every string double-quoted (JSON escapes are YAML's) --

bool plain_key(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '/' || c == '-' ||
          c == '_'))
      return false;
  return true;
}

std::string scalar(const Json& v) {
  if (v.is_string()) return Json(v.get<std::string>()).dump();
  return v.dump();
}

bool empty_collection(const Json& v) {
  return (v.is_object() || v.is_array()) && v.empty();
}

void write(const Json& v, int indent, std::string& out);

void write_entry(const Json& v, int indent, std::string& out) {
  if (empty_collection(v))
    out += v.is_object() ? " {}\n" : " []\n";
  else if (v.is_object() || v.is_array())
    out += "\n", write(v, indent + 2, out);
  else
    out += " " + scalar(v) + "\n";
}

void write(const Json& v, int indent, std::string& out) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (v.is_object()) {
    for (const auto& [k, item] : v.items()) {
      out += pad + (plain_key(k) ? k : Json(k).dump()) + ":";
      write_entry(item, indent, out);
    }
  } else if (v.is_array()) {
    for (const auto& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- key: value" with the rest of the mapping aligned under the first key
        std::string inner;
        write(item, indent + 2, inner);
        out += pad + "- " + inner.substr(static_cast<std::size_t>(indent) + 2);
      } else {
        out += pad + "-";
        write_entry(item, indent, out);
      }
    }
  }
}

std::string yaml(const Json& doc) {
  std::string out;
  write(doc, 0, out);
  return out;
}

// ---- caps ----

// The fraction F with size_t(F * visible) == request exactly (request <= visible).
double exact_fraction(std::size_t request, std::size_t visible) {
  double f = static_cast<double>(request) / static_cast<double>(visible);
  auto cap = [&](double x) { return static_cast<std::size_t>(x * static_cast<double>(visible)); };
  for (int i = 0; i < 64 && cap(f) < request; ++i) f = std::nextafter(f, 2.0);
  for (int i = 0; i < 64 && cap(f) > request; ++i) f = std::nextafter(f, 0.0);
  if (cap(f) != request || f > 1.0)
    throw Error(fmt::format("no per_process_memory_fraction gives a cap of {} bytes out of {}",
                            request, visible));
  return f;
}

std::string fraction_text(double f) {
  // %.17g reads back as the same double; shorter forms are tried first.
  for (int digits = 6; digits <= 17; ++digits) {
    std::string s = fmt::format("{:.{}g}", f, digits);
    if (std::stod(s) == f) return s;
  }
  return fmt::format("{:.17g}", f);
}

const Device& device_of(const Placement& pl, std::size_t replica) {
  const Replica& r = pl.replicas.at(replica);
  if (r.device < 0)
    throw InvalidInput(
        fmt::format("{} has no device: nothing to emit for it", pl.replica_name(replica)));
  return pl.devices.at(static_cast<std::size_t>(r.device));
}

}  // namespace

Target parse_target(const std::string& text) {
  if (text == "hami") return Target::kHami;
  if (text == "vnpu") return Target::kVnpu;
  if (text == "dra") return Target::kDra;
  if (text == "ray") return Target::kRay;
  throw InvalidInput(fmt::format("--emit {}: expected hami, vnpu, dra or ray", text));
}

std::string target_name(Target target) {
  switch (target) {
    case Target::kHami:
      return "hami";
    case Target::kVnpu:
      return "vnpu";
    case Target::kDra:
      return "dra";
    case Target::kRay:
      return "ray";
  }
  return "";
}

ContainerCap container_cap(const Placement& pl, std::size_t replica, Target target) {
  const Replica& r = pl.replicas.at(replica);
  const Device& d = device_of(pl, replica);
  const Accelerator& kind = accelerator(d.kind);
  const bool host = kind.backend == Backend::kHost;
  if (host && target != Target::kRay)
    throw InvalidInput(fmt::format(
        "--emit {}: device {} is a cpu budget, which no scheduler hands out as a device (its "
        "MODELMEM_ALLOC_CONF is in the report's config lines)",
        target_name(target), d.name()));
  const PlacementNeed& n = pl.need_of(replica);
  ContainerCap c;
  c.request = r.request;
  c.need = n.need;
  const VnpuTemplate* t = vnpu_template(r.request, d);
  switch (target) {
    case Target::kHami:
      if (!kind.ascend) {
        // HAMi-core (libvgpu.so) makes the container's CUDA see its gpumem limit as the total.
        c.visible = r.request;
        c.seen = "a GPU whose total is the gpumem limit (HAMi-core)";
      } else if (t) {
        c.visible = t->mib * kMiB;
        c.seen = fmt::format("a vNPU {} of {} MiB (HAMi rounds up to a template)", t->name, t->mib);
      } else {
        c.visible = d.bytes;
        c.seen = fmt::format("the whole {} ({} MiB)", kind.name, d.bytes / kMiB);
      }
      break;
    case Target::kVnpu:
      if (!kind.ascend)
        throw InvalidInput(fmt::format(
            "--emit vnpu: device {} is a {}, which has no vNPU templates (use hami or dra)",
            d.name(), kind.name));
      c.visible = t ? t->mib * kMiB : d.bytes;
      c.seen = t ? fmt::format("a vNPU {} of {} MiB", t->name, t->mib)
                 : fmt::format("the whole {} ({} MiB)", kind.name, d.bytes / kMiB);
      break;
    case Target::kDra:
    case Target::kRay:
      c.visible = d.bytes;
      c.seen =
          host ? fmt::format("a cpu budget of {} MiB (the pool's quota is the cap)", d.bytes / kMiB)
               : fmt::format("the whole {} ({} MiB)", kind.name, d.bytes / kMiB);
      break;
  }
  // The allocator's cap is the need: the overhead lies outside it, and the two make the request.
  c.fraction = exact_fraction(c.need, c.visible);
  c.modelmem_conf = pool_conf(pl, r.model, kind.backend);
  c.engine_env = n.engine_env;
  if (host) return c;  // PyTorch's CPU allocator has no cap; the pool's quota is the cap
  c.torch_var = kind.ascend ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
  c.torch_conf = "per_process_memory_fraction:" + fraction_text(c.fraction);
  return c;
}

namespace {

Json env_of(const ContainerCap& c) {
  Json env = Json::array();
  env.push_back({{"name", "MODELMEM_ALLOC_CONF"}, {"value", c.modelmem_conf}});
  if (!c.torch_var.empty()) env.push_back({{"name", c.torch_var}, {"value", c.torch_conf}});
  for (const auto& [var, value] : c.engine_env) env.push_back({{"name", var}, {"value", value}});
  return env;
}

Json labels(const std::string& name) {
  return {{"app.kubernetes.io/name", name}, {"app.kubernetes.io/managed-by", "modelmem"}};
}

Json metadata(const std::string& name, const std::string& app, const EmitOptions& o) {
  Json m = {{"name", name}};
  if (!o.ns.empty()) m["namespace"] = o.ns;
  m["labels"] = labels(app);
  return m;
}

std::string comment(const Placement& pl, std::size_t i, const ContainerCap& c) {
  const Replica& r = pl.replicas[i];
  const Device& d = device_of(pl, i);
  const PlacementNeed& n = pl.need_of(i);
  return fmt::format(
      "# {} on device {} ({}): need {} MiB on {}, overhead {}, request {} MiB; the container sees "
      "{}; the allocator's cap {} bytes = need\n",
      pl.replica_name(i), d.name(), d.kind, n.need / kMiB, n.strategy,
      format_bytes(n.overhead.bytes), r.request / kMiB, c.seen,
      static_cast<std::size_t>(c.fraction * static_cast<double>(c.visible)));
}

// Replicas of model m; a Deployment gives every replica one spec, so their caps must agree.
std::vector<std::size_t> replicas_of(const Placement& pl, std::size_t m) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < pl.replicas.size(); ++i)
    if (pl.replicas[i].model == m) out.push_back(i);
  return out;
}

ContainerCap one_cap(const Placement& pl, std::size_t m, Target target, const char* what) {
  const auto reps = replicas_of(pl, m);
  ContainerCap first = container_cap(pl, reps.at(0), target);
  for (std::size_t i : reps) {
    const ContainerCap c = container_cap(pl, i, target);
    if (c.visible != first.visible || device_of(pl, i).kind != device_of(pl, reps[0]).kind)
      throw InvalidInput(fmt::format(
          "model {}: its replicas sit on devices that differ ({} and {}), so one {} cannot "
          "describe them all{}",
          pl.models[m].name, device_of(pl, reps[0]).name(), device_of(pl, i).name(), what,
          target == Target::kHami ? " (use --pods)" : ""));
  }
  return first;
}

Json limits_hami(const Placement& pl, std::size_t i) {
  const Replica& r = pl.replicas[i];
  const Device& d = device_of(pl, i);
  const Accelerator& kind = accelerator(d.kind);
  Json limits = {{kind.hami_resource, "1"}};
  // Without -memory HAMi gives an Ascend container the whole NPU.
  if (!kind.ascend || vnpu_template(r.request, d))
    limits[kind.hami_memory] = std::to_string(r.request / kMiB);
  return limits;
}

Json container(const Placement& pl, std::size_t m, const ContainerCap& c, Json resources) {
  const ModelSpec& spec = pl.models[m];
  return {{"name", spec.name},
          {"image", spec.image},
          {"env", env_of(c)},
          {"resources", std::move(resources)}};
}

Json pod(const Placement& pl, std::size_t i, const Json& container_json, const EmitOptions& o) {
  const Replica& r = pl.replicas[i];
  const Device& d = device_of(pl, i);
  Json spec = Json::object();
  if (!d.node.empty()) spec["nodeSelector"] = {{"kubernetes.io/hostname", d.node}};
  if (accelerator(d.kind).ascend) spec["runtimeClassName"] = "ascend";
  spec["containers"] = Json::array({container_json});
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", metadata(pl.replica_name(i), pl.models[r.model].name, o)},
          {"spec", std::move(spec)}};
}

std::string emit_hami(const Placement& pl, const EmitOptions& o) {
  std::string out;
  for (std::size_t m = 0; m < pl.models.size(); ++m) {
    const auto reps = replicas_of(pl, m);
    if (o.pods) {
      for (std::size_t i : reps) {
        const ContainerCap c = container_cap(pl, i, Target::kHami);
        out += "---\n" + comment(pl, i, c) +
               yaml(pod(pl, i, container(pl, m, c, {{"limits", limits_hami(pl, i)}}), o));
      }
      continue;
    }
    const ContainerCap c = one_cap(pl, m, Target::kHami, "Deployment");
    const std::string& name = pl.models[m].name;
    Json pod_spec = Json::object();
    // Replicas all placed on one node stay there (the packing holds on that node's devices).
    std::set<std::string> nodes;
    for (std::size_t i : reps) nodes.insert(device_of(pl, i).node);
    if (nodes.size() == 1 && !nodes.begin()->empty())
      pod_spec["nodeSelector"] = {{"kubernetes.io/hostname", *nodes.begin()}};
    if (accelerator(device_of(pl, reps[0]).kind).ascend) pod_spec["runtimeClassName"] = "ascend";
    pod_spec["containers"] =
        Json::array({container(pl, m, c, {{"limits", limits_hami(pl, reps[0])}})});
    Json dep = {{"apiVersion", "apps/v1"},
                {"kind", "Deployment"},
                {"metadata", metadata(name, name, o)},
                {"spec",
                 {{"replicas", reps.size()},
                  {"selector", {{"matchLabels", {{"app.kubernetes.io/name", name}}}}},
                  {"template", {{"metadata", {{"labels", labels(name)}}}, {"spec", pod_spec}}}}}};
    out += "---\n";
    for (std::size_t i : reps) out += comment(pl, i, container_cap(pl, i, Target::kHami));
    out += yaml(dep);
  }
  return out;
}

std::string emit_vnpu(const Placement& pl, const EmitOptions& o) {
  std::string out;
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const Replica& r = pl.replicas[i];
    const ContainerCap c = container_cap(pl, i, Target::kVnpu);
    const Device& d = device_of(pl, i);
    const Accelerator& kind = accelerator(d.kind);
    const VnpuTemplate* t = vnpu_template(r.request, d);
    const std::size_t given = t ? t->mib * kMiB : d.bytes;
    out += "---\n" + comment(pl, i, c) +
           fmt::format("# static vNPU: {} of {} MiB for a request of {} MiB: {} unused ({:.1f}%)\n",
                       t ? t->name : "no template holds it, the whole device", given / kMiB,
                       r.request / kMiB, format_bytes(given - r.request),
                       100.0 * static_cast<double>(given - r.request) / static_cast<double>(given));
    const std::string resource = t ? t->resource : kind.plugin_resource;
    out += yaml(pod(pl, i, container(pl, r.model, c, {{"limits", {{resource, "1"}}}}), o));
  }
  return out;
}

std::string emit_dra(const Placement& pl, const EmitOptions& o) {
  std::string out;
  std::set<std::string> classes;
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const Accelerator& kind = accelerator(device_of(pl, i).kind);
    if (kind.backend == Backend::kHost) container_cap(pl, i, Target::kDra);  // says why not
    const std::string driver = o.dra_driver.empty() ? kind.dra_driver : o.dra_driver;
    if (driver.empty())
      throw InvalidInput(fmt::format(
          "--emit dra on {} devices needs --dra-driver NAME: Ascend is scheduled by device "
          "plugins, and no Ascend DRA driver publishes a name modelmem could assume "
          "(docs/fleet.md)",
          kind.name));
    const std::string cls = "modelmem-" + object_name(kind.name);
    if (!classes.insert(cls).second) continue;
    Json dc = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "DeviceClass"},
        {"metadata", {{"name", cls}, {"labels", labels(cls)}}},
        {"spec",
         {{"selectors",
           Json::array(
               {{{"cel", {{"expression", fmt::format("device.driver == \"{}\"", driver)}}}}})}}}};
    out += "---\n" + yaml(dc);
  }
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const Replica& r = pl.replicas[i];
    const ContainerCap c = container_cap(pl, i, Target::kDra);
    const std::string cls = "modelmem-" + object_name(device_of(pl, i).kind);
    const std::string name = pl.replica_name(i);
    Json claim = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata", metadata(name, pl.models[r.model].name, o)},
        {"spec",
         {{"devices",
           {{"requests",
             Json::array(
                 {{{"name", "accelerator"},
                   {"exactly",
                    {{"deviceClassName", cls},
                     {"allocationMode", "ExactCount"},
                     {"count", 1},
                     {"capacity",
                      {{"requests",
                        {{o.dra_capacity, fmt::format("{}Mi", r.request / kMiB)}}}}}}}}})}}}}}};
    Json p =
        pod(pl, i,
            container(pl, r.model, c, {{"claims", Json::array({{{"name", "accelerator"}}})}}), o);
    p["spec"].erase("runtimeClassName");
    p["spec"]["resourceClaims"] =
        Json::array({{{"name", "accelerator"}, {"resourceClaimName", name}}});
    out += "---\n" + comment(pl, i, c) + yaml(claim) + "---\n" + yaml(p);
  }
  return out;
}

// Ray's name for a device's memory: a custom resource per device counted in MiB, declared by
// `ray start --resources` on the device's node (docs/fleet.md: why not GPU fractions).
std::string ray_resource(const Device& d) {
  std::string name = "modelmem_mib_" + d.name();
  for (char& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) c = '_';
  return name;
}

std::string ray_start_lines(const Placement& pl) {
  // One `ray start` per node, in the order the devices were given; the first node is the head.
  std::vector<std::string> nodes;
  std::map<std::string, Json> resources;
  for (const Device& d : pl.devices) {
    if (!resources.count(d.node)) nodes.push_back(d.node), resources[d.node] = Json::object();
    resources[d.node][ray_resource(d)] = d.bytes / kMiB;
  }
  std::string out;
  for (std::size_t n = 0; n < nodes.size(); ++n)
    out += fmt::format("# ray-start {}: ray start {} --resources='{}'\n",
                       nodes[n].empty() ? "(this node)" : nodes[n],
                       n == 0 ? "--head" : "--address=HEAD:6379", resources[nodes[n]].dump());
  return out;
}

std::string emit_ray(const Placement& pl, const EmitOptions& o) {
  Json applications = Json::array();
  std::string notes;
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const Replica& r = pl.replicas[i];
    const Device& d = device_of(pl, i);
    const Accelerator& kind = accelerator(d.kind);
    const ContainerCap c = container_cap(pl, i, Target::kRay);
    Json env = Json::object();
    env["MODELMEM_ALLOC_CONF"] = c.modelmem_conf;
    if (!c.torch_var.empty()) env[c.torch_var] = c.torch_conf;
    // The device the replica was placed on, as its runtime numbers them on the node (Ray sets no
    // visible-devices variable for an actor that asks for no GPUs).
    if (kind.backend != Backend::kHost)
      env[kind.ascend ? "ASCEND_RT_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES"] =
          std::to_string(d.index);
    // A CPU budget's pool holds MKL's GEMM buffers too: with MKL's own cache of them off, as
    // `modelmem run` has it (docs/preload.md), each goes back to the pool when its GEMM ends.
    if (kind.backend == Backend::kHost) env["MKL_DISABLE_FAST_MM"] = "1";
    for (const auto& [var, value] : c.engine_env) env[var] = value;
    const std::string name = pl.replica_name(i);
    Json options = {{"resources", {{ray_resource(d), r.request / kMiB}}},
                    {"runtime_env", {{"env_vars", env}}}};
    applications.push_back(
        {{"name", name},
         {"route_prefix", "/" + name},
         {"import_path", o.ray_app},
         {"args", {{"model", pl.models[r.model].name}, {"replica", name}, {"device", d.name()}}},
         {"deployments", Json::array({{{"name", pl.models[r.model].name},
                                       {"num_replicas", 1},
                                       {"ray_actor_options", options}}})}});
    notes += comment(pl, i, c);
  }
  // Serve's own defaults, written out: where `serve deploy` starts the HTTP proxy (one per node,
  // on every interface, port 8000) is then in the file the user deploys, to edit there.
  Json config = {{"proxy_location", "EveryNode"},
                 {"http_options", {{"host", "0.0.0.0"}, {"port", 8000}}},
                 {"applications", applications}};
  return "# Ray Serve config (serve deploy / serve run): one application per replica, pinned to "
         "the\n"
         "# device it was placed on by a custom resource counting that device's memory in MiB;\n"
         "# Serve's HTTP proxy on every node at 0.0.0.0:8000 (http_options, read when Serve "
         "starts);\n"
         "# start each node with its devices' resources:\n" +
         ray_start_lines(pl) + notes + yaml(config);
}

}  // namespace

std::string emit(const Placement& pl, Target target, const EmitOptions& o) {
  if (!pl.fits())
    throw InvalidInput(fmt::format("the models do not fit ({}): nothing to emit",
                                   pl.messages.empty() ? "" : pl.messages.front()));
  switch (target) {
    case Target::kHami:
      return emit_hami(pl, o);
    case Target::kVnpu:
      return emit_vnpu(pl, o);
    case Target::kDra:
      return emit_dra(pl, o);
    case Target::kRay:
      return emit_ray(pl, o);
  }
  return "";
}

}  // namespace modelmem::sizing
