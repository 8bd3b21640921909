// Device kinds, device lists and model lists of `modelmem place` (modelmem/sizing/placement.hpp).
// The kinds' figures and names come from HAMi's Ascend device configuration, the MindCluster
// static vNPU table and HAMi's GPU resources; docs/fleet.md cites each.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/sizing/placement.hpp"
#include "sizing/yaml_json.hpp"

namespace modelmem::sizing {
namespace {

using nlohmann::json;
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<Accelerator>& accelerators() {
  // One row a kind; adding a kind is a row here and its test (tests/sizing/placement_test.cpp).
  static const std::vector<Accelerator> kinds = {
      {.name = "910A",
       .ascend = true,
       .mib = 32768,
       .hami_resource = "huawei.com/Ascend910A",
       .hami_memory = "huawei.com/Ascend910A-memory",
       .plugin_resource = "huawei.com/Ascend910",
       .templates = {{"vir02", 2184, 2, "huawei.com/Ascend910-2c"},
                     {"vir04", 4369, 4, "huawei.com/Ascend910-4c"},
                     {"vir08", 8738, 8, "huawei.com/Ascend910-8c"},
                     {"vir16", 17476, 16, "huawei.com/Ascend910-16c"}},
       .backend = Backend::kNpu},
      {.name = "910B3",
       .ascend = true,
       .mib = 65536,
       .hami_resource = "huawei.com/Ascend910B3",
       .hami_memory = "huawei.com/Ascend910B3-memory",
       .plugin_resource = "huawei.com/Ascend910",
       .templates = {{"vir05_1c_16g", 16384, 5, "huawei.com/Ascend910-5c.1cpu.16g"},
                     {"vir10_3c_32g", 32768, 10, "huawei.com/Ascend910-10c.3cpu.32g"}},
       .backend = Backend::kNpu},
      {.name = "910B2",
       .ascend = true,
       .mib = 65536,
       .hami_resource = "huawei.com/Ascend910B2",
       .hami_memory = "huawei.com/Ascend910B2-memory",
       .plugin_resource = "huawei.com/Ascend910",
       .templates = {{"vir03_1c_8g", 8192, 3, "huawei.com/Ascend910-3c.1cpu.8g"},
                     {"vir06_1c_16g", 16384, 6, "huawei.com/Ascend910-6c.1cpu.16g"},
                     {"vir12_3c_32g", 32768, 12, "huawei.com/Ascend910-12c.3cpu.32g"}},
       .backend = Backend::kNpu},
      {.name = "910B4",
       .ascend = true,
       .mib = 32768,
       .hami_resource = "huawei.com/Ascend910B4",
       .hami_memory = "huawei.com/Ascend910B4-memory",
       .plugin_resource = "huawei.com/Ascend910",
       .templates = {{"vir05_1c_8g", 8192, 5, "huawei.com/Ascend910-5c.1cpu.8g"},
                     {"vir10_3c_16g", 16384, 10, "huawei.com/Ascend910-10c.3cpu.16g"}},
       .backend = Backend::kNpu},
      // The 64 GB 910B4 (SoC name Ascend910B4-1): HAMi's chip row (memoryCapacity 65536) and
      // its newer resource names (older HAMi configurations request it as Ascend910B4); their
      // vNPU templates differ between HAMi versions, so none is offered.
      {.name = "910B4-1",
       .ascend = true,
       .mib = 65536,
       .hami_resource = "huawei.com/Ascend910B4-1",
       .hami_memory = "huawei.com/Ascend910B4-1-memory",
       .plugin_resource = "huawei.com/Ascend910",
       .backend = Backend::kNpu},
      // Atlas A3 (910C): HAMi schedules each of a package's two dies as a device of 65536 MiB
      // under its own resource names; no vNPU template offered (as above).
      {.name = "910C",
       .ascend = true,
       .mib = 65536,
       .hami_resource = "huawei.com/Ascend910C",
       .hami_memory = "huawei.com/Ascend910C-memory",
       .plugin_resource = "huawei.com/Ascend910",
       .backend = Backend::kNpu},
      {.name = "310P",
       .ascend = true,
       .mib = 21527,
       .hami_resource = "huawei.com/Ascend310P",
       .hami_memory = "huawei.com/Ascend310P-memory",
       .plugin_resource = "huawei.com/Ascend310P",
       .templates = {{"vir01", 3072, 1, "huawei.com/Ascend310P-1c"},
                     {"vir02", 6144, 2, "huawei.com/Ascend310P-2c"},
                     {"vir04", 12288, 4, "huawei.com/Ascend310P-4c"}},
       .backend = Backend::kNpu,
       .aliases = {"310P3"}},  // HAMi's chipName; its resources say Ascend310P
      {.name = "gpu",
       .ascend = false,
       .mib = 0,
       .hami_resource = "nvidia.com/gpu",
       .hami_memory = "nvidia.com/gpumem",
       .plugin_resource = "nvidia.com/gpu",
       .dra_driver = "gpu.nvidia.com",
       .backend = Backend::kCuda,
       .aliases = {"cuda"}},
      // A host memory budget (device:limited) for PyTorch on the CPU under the LD_PRELOAD
      // library: placed and configured, but no scheduler resource to request.
      {.name = "cpu", .backend = Backend::kHost, .aliases = {"host"}},
  };
  return kinds;
}

namespace {

const Accelerator* find_accelerator(const std::string& name) {
  for (const auto& k : accelerators()) {
    if (lower(k.name) == lower(name)) return &k;
    for (const auto& a : k.aliases)
      if (lower(a) == lower(name)) return &k;
  }
  return nullptr;
}

}  // namespace

std::string known_device_kinds() {
  std::string names;
  for (const auto& k : accelerators()) {
    names += (names.empty() ? "" : ", ") + k.name;
    for (const auto& a : k.aliases) names += "=" + a;
  }
  return names;
}

const Accelerator& accelerator(const std::string& name) {
  if (const Accelerator* k = find_accelerator(name)) return *k;
  // A family, not a product: its members differ in memory and in their scheduler names.
  if (lower(name) == "910b")
    throw InvalidInput(fmt::format(
        "device kind '{}': a family, not a product: name it (910B2, 910B3, 910B4-1: 64 GiB; "
        "910B4: 32 GiB), or give the memory (8x64GiB:910B3); known: {}",
        name, known_device_kinds()));
  throw InvalidInput(
      fmt::format("device kind '{}': unknown (known: {})", name, known_device_kinds()));
}

std::string Device::name() const {
  return node.empty() ? std::to_string(index) : fmt::format("{}/{}", node, index);
}

namespace {

int parse_count(const std::string& text, const std::string& spec) {
  if (text.empty() || text.size() > 5 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw InvalidInput(
        fmt::format("--devices {}: '{}' is not a count (expected COUNTxSIZE, COUNTxKIND or "
                    "COUNTxSIZE:KIND, such as 8x64GiB or 8x910A)",
                    spec, text));
  const int n = std::stoi(text);
  if (n < 1 || n > 4096)
    throw InvalidInput(fmt::format("--devices {}: count {} must be 1 to 4096", spec, n));
  return n;
}

// One group: [NODESx]COUNTx(KIND | SIZE[:KIND]), on `node` when given (a devices file).
void add_group(const std::string& group, const std::string& node, std::vector<Device>& out) {
  std::vector<std::string> parts;
  std::string rest = group;
  for (std::size_t x; (x = rest.find_first_of("xX")) != std::string::npos && x > 0 &&
                      std::isdigit(static_cast<unsigned char>(rest[x - 1])) &&
                      std::all_of(rest.begin(), rest.begin() + static_cast<long>(x), [](char c) {
                        return std::isdigit(static_cast<unsigned char>(c));
                      });) {
    parts.push_back(rest.substr(0, x));
    rest = rest.substr(x + 1);
  }
  if (parts.empty() || parts.size() > 2 || rest.empty())
    throw InvalidInput(fmt::format(
        "--devices {}: expected COUNTxSIZE, COUNTxKIND or COUNTxSIZE:KIND (8x64GiB, 8x910A, "
        "8x32GiB:910A), or NODESxCOUNTx... for several nodes",
        group));
  if (parts.size() == 2 && !node.empty())
    throw InvalidInput(
        fmt::format("devices {} of node {}: a node's devices have no node count", group, node));
  const int nodes = parts.size() == 2 ? parse_count(parts[0], group) : 1;
  const int count = parse_count(parts.back(), group);
  std::string kind_name = "gpu";
  std::string size = rest;
  if (auto colon = rest.find(':'); colon != std::string::npos) {
    size = rest.substr(0, colon);
    kind_name = rest.substr(colon + 1);
  } else if (find_accelerator(rest) != nullptr || lower(rest) == "910b") {
    kind_name = rest;
    size.clear();
  }
  const Accelerator& kind = accelerator(kind_name);
  std::size_t bytes = 0;
  if (!size.empty()) {
    // Not a kind: a size, of at least 1 MiB (2x910B4 is not 910 bytes of unit 'B4').
    try {
      bytes = parse_size(size, "--devices " + group);
    } catch (const InvalidInput&) {
      bytes = 0;
    }
    if (bytes < kMiB)
      throw InvalidInput(fmt::format(
          "--devices {}: '{}' is neither a device kind (known: {}) nor a size of at least 1 MiB "
          "(8x64GiB, 8x32GiB:910A)",
          group, size, known_device_kinds()));
  } else if (kind.mib == 0)
    throw InvalidInput(fmt::format("--devices {}: a {} device needs its memory (8x80GiB:{})", group,
                                   kind.name, kind.name));
  else
    bytes = kind.mib * kMiB;
  if (bytes < kMiB)
    throw InvalidInput(fmt::format("--devices {}: a device of less than 1 MiB", group));
  const std::size_t first_node = out.empty() ? 0 : out.size();
  (void)first_node;
  for (int n = 0; n < nodes; ++n) {
    std::string node_name = node;
    if (parts.size() == 2) node_name = fmt::format("node-{}", n);
    int index = 0;
    for (const auto& d : out)
      if (d.node == node_name) index = std::max(index, d.index + 1);
    for (int i = 0; i < count; ++i) out.push_back({node_name, index + i, bytes, kind.name});
  }
}

}  // namespace

std::vector<Device> parse_devices(const std::string& spec) {
  std::vector<Device> out;
  std::string rest = spec;
  while (!rest.empty() || out.empty()) {
    auto comma = rest.find(',');
    std::string group = rest.substr(0, comma);
    group.erase(std::remove(group.begin(), group.end(), ' '), group.end());
    if (group.empty()) throw InvalidInput(fmt::format("--devices '{}': an empty group", spec));
    add_group(group, "", out);
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

namespace {

std::string text_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  return v.dump();
}

[[noreturn]] void bad_entry(const std::string& path, const std::string& where,
                            const std::string& why) {
  throw InvalidInput(fmt::format("{}: {}: {}", path, where, why));
}

void only_keys(const json& obj, std::initializer_list<const char*> keys, const std::string& path,
               const std::string& where) {
  for (const auto& [k, v] : obj.items()) {
    bool known = false;
    for (const char* key : keys) known = known || k == key;
    if (!known) {
      std::string list;
      for (const char* key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
      bad_entry(path, where, fmt::format("unknown key '{}' (known: {})", k, list));
    }
  }
}

// A served LLM's `serve:` mapping; `dtype` of the entry is the serving plan's (as stored when
// absent), `dims` and `runtime` do not apply.
ServeSpec read_serve(const json& m, const std::filesystem::path& dir, const std::string& path,
                     const std::string& where) {
  const json& v = m["serve"];
  if (!v.is_object())
    bad_entry(path, where,
              "serve: a mapping {context, max_num_seqs or kv_tokens, kv_dtype, tp, block_size, "
              "max_batched_tokens, onnx}");
  only_keys(v,
            {"context", "max_num_seqs", "concurrency", "kv_tokens", "kv_dtype", "tp", "block_size",
             "max_batched_tokens", "onnx"},
            path, where + " serve");
  if (m.contains("dims") || m.contains("runtime"))
    bad_entry(path, where,
              "dims and runtime are for a model placed by its plan; a served model (serve:) "
              "takes context, max_num_seqs or kv_tokens");
  ServeSpec s;
  auto whole = [&](const char* key, std::int64_t lo, std::int64_t hi) -> std::int64_t {
    if (!v.contains(key)) return 0;
    if (!v[key].is_number_integer() || v[key].get<long long>() < lo || v[key].get<long long>() > hi)
      bad_entry(path, where,
                fmt::format("serve: {} must be a whole number from {} to {}", key, lo, hi));
    return v[key].get<std::int64_t>();
  };
  s.context = whole("context", 1, std::int64_t{1} << 24);
  // max_num_seqs, as `serve --max-num-seqs` and the engines name it; concurrency: its older name
  if (v.contains("max_num_seqs") && v.contains("concurrency"))
    bad_entry(path, where, "serve: max_num_seqs and concurrency are one setting: give one");
  s.concurrency =
      v.contains("concurrency") ? whole("concurrency", 1, 65536) : whole("max_num_seqs", 1, 65536);
  s.kv_tokens = whole("kv_tokens", 1, std::int64_t{1} << 32);
  if (v.contains("block_size")) s.block_size = whole("block_size", 1, 1024);
  if (v.contains("max_batched_tokens"))
    s.max_batched_tokens = whole("max_batched_tokens", 1, std::int64_t{1} << 24);
  if (v.contains("tp")) s.tp = static_cast<int>(whole("tp", 1, 64));
  if ((s.concurrency > 0) == (s.kv_tokens > 0))
    bad_entry(path, where,
              "serve: give max_num_seqs (sequences at the context; also concurrency) or "
              "kv_tokens, one of them");
  if (v.contains("kv_dtype")) s.kv_dtype = text_of(v["kv_dtype"]);
  if (m.contains("dtype")) s.dtype = text_of(m["dtype"]);
  if (v.contains("onnx")) {
    const std::filesystem::path f = text_of(v["onnx"]);
    s.onnx = f.is_absolute() || dir.empty() ? f.string() : (dir / f).string();
  }
  return s;
}

}  // namespace

std::vector<Device> read_devices(const std::string& path) {
  const json doc = read_yaml_file(path);
  if (!doc.is_object() || !doc.contains("nodes") || !doc["nodes"].is_array() ||
      doc["nodes"].empty())
    throw InvalidInput(path + ": expected 'nodes:' with a list of {name, devices}");
  only_keys(doc, {"nodes"}, path, "top level");
  std::vector<Device> out;
  std::set<std::string> names;
  std::size_t i = 0;
  for (const auto& n : doc["nodes"]) {
    const std::string where = fmt::format("node {}", ++i);
    if (!n.is_object() || !n.contains("name") || !n["name"].is_string() || !n.contains("devices"))
      bad_entry(path, where, "expected {name: NODE, devices: ...}");
    only_keys(n, {"name", "devices"}, path, where);
    const std::string node = n["name"].get<std::string>();
    if (node.empty() || node.find('/') != std::string::npos)
      bad_entry(path, where, "a node name is not empty and has no '/'");
    if (!names.insert(node).second) bad_entry(path, where, "node " + node + " given twice");
    const json& devs = n["devices"];
    try {
      if (devs.is_string()) {
        add_group(devs.get<std::string>(), node, out);
        continue;
      }
      if (!devs.is_array() || devs.empty())
        bad_entry(path, where,
                  "devices: a string such as 8x910A or a list of {kind, memory, count}");
      for (const auto& g : devs) {
        if (!g.is_object()) bad_entry(path, where, "each device group is {kind, memory, count}");
        only_keys(g, {"kind", "memory", "count"}, path, where);
        const std::string count = g.contains("count") ? text_of(g["count"]) : "1";
        std::string spec = count + "x";
        if (g.contains("memory")) {
          spec += text_of(g["memory"]);
          if (g.contains("kind")) spec += ":" + text_of(g["kind"]);
        } else if (g.contains("kind")) {
          spec += text_of(g["kind"]);
        } else {
          bad_entry(path, where, "a device group needs a kind, a memory, or both");
        }
        add_group(spec, node, out);
      }
    } catch (const InvalidInput& e) {
      const std::string what = e.what();
      if (what.rfind(path, 0) == 0) throw;
      bad_entry(path, where, what);
    }
  }
  return out;
}

std::vector<Device> devices_from(const std::string& spec_or_file) {
  std::error_code ec;
  if (!spec_or_file.empty() && std::filesystem::exists(spec_or_file, ec))
    return read_devices(spec_or_file);
  return parse_devices(spec_or_file);
}

std::vector<ModelSpec> models_from_files(const std::vector<std::string>& paths,
                                         const std::map<std::string, std::int64_t>& dims,
                                         const std::string& dtype, model::Runtime runtime,
                                         int replicas) {
  if (paths.empty()) throw InvalidInput("no model: give ONNX files or a models file");
  if (dtype != "fp32" && dtype != "fp16" && dtype != "bf16")
    throw InvalidInput(fmt::format("--dtype {}: expected fp32, fp16 or bf16", dtype));
  if (replicas < 1 || replicas > 1024)
    throw InvalidInput(fmt::format("--replicas {}: must be 1 to 1024", replicas));
  std::vector<ModelSpec> specs;
  std::set<std::string> names;
  for (const auto& path : paths) {
    ModelSpec s;
    s.path = path;
    const std::string base = object_name(std::filesystem::path(path).stem().string());
    s.name = base;
    for (int n = 2; names.count(s.name); ++n) s.name = fmt::format("{}-{}", base, n);
    names.insert(s.name);
    s.dims = dims;
    s.dtype = dtype;
    s.runtime = runtime;
    s.replicas = replicas;
    s.shared_dims = paths.size() > 1;
    specs.push_back(std::move(s));
  }
  return specs;
}

std::string object_name(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u))
      out += static_cast<char>(std::tolower(u));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 40) out.resize(40);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty() || !std::isalpha(static_cast<unsigned char>(out[0]))) out = "m-" + out;
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::vector<ModelSpec> read_models(const std::string& path) {
  const json doc = read_yaml_file(path);
  if (!doc.is_object() || !doc.contains("models") || !doc["models"].is_array() ||
      doc["models"].empty())
    throw InvalidInput(path + ": expected 'models:' with a list of {name, model, ...}");
  only_keys(doc, {"models"}, path, "top level");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::vector<ModelSpec> out;
  std::size_t i = 0;
  for (const auto& m : doc["models"]) {
    const std::string where = fmt::format("model {}", ++i);
    if (!m.is_object() || !m.contains("model") || !m["model"].is_string())
      bad_entry(path, where, "expected {model: FILE.onnx, ...}");
    only_keys(m,
              {"name", "model", "dims", "dtype", "runtime", "replicas", "image", "strategy",
               "overhead", "serve"},
              path, where);
    ModelSpec s;
    std::filesystem::path file = m["model"].get<std::string>();
    s.path = file.is_absolute() || dir.empty() ? file.string() : (dir / file).string();
    s.name = object_name(m.contains("name") ? text_of(m["name"]) : file.stem().string());
    if (m.contains("dims")) {
      if (!m["dims"].is_object()) bad_entry(path, where, "dims: a mapping {NAME: VALUE}");
      for (const auto& [k, v] : m["dims"].items()) {
        if (!v.is_number_integer() || v.get<long long>() < 1)
          bad_entry(path, where, fmt::format("dims: {} must be a whole number >= 1", k));
        s.dims[k] = v.get<std::int64_t>();
      }
    }
    try {
      if (m.contains("dtype")) {
        s.dtype = text_of(m["dtype"]);
        if (s.dtype != "fp32" && s.dtype != "fp16" && s.dtype != "bf16")
          throw InvalidInput(fmt::format("dtype {}: expected fp32, fp16 or bf16", s.dtype));
      }
      if (m.contains("runtime")) s.runtime = model::parse_runtime(text_of(m["runtime"]));
    } catch (const InvalidInput& e) {
      bad_entry(path, where, e.what());
    }
    if (m.contains("replicas")) {
      if (!m["replicas"].is_number_integer() || m["replicas"].get<long long>() < 1 ||
          m["replicas"].get<long long>() > 1024)
        bad_entry(path, where, "replicas: a whole number from 1 to 1024");
      s.replicas = m["replicas"].get<int>();
    }
    if (m.contains("image")) s.image = text_of(m["image"]);
    if (m.contains("strategy")) s.strategy = text_of(m["strategy"]);
    if (m.contains("overhead")) s.overhead = text_of(m["overhead"]);
    if (m.contains("serve")) s.serve = read_serve(m, dir, path, where);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace modelmem::sizing
