// Many models on many devices: each model's need, the devices (kinds with the memory and the
// names Kubernetes schedulers give them), and a packing of every replica onto a device
// (`modelmem place`). Exact for a few replicas, best-fit decreasing beyond; when no packing
// exists, which replica does not fit where and by how much. The requests schedulers consume
// are emitted from a Placement by modelmem/sizing/requests.hpp. Value types; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "modelmem/model/plan_model.hpp"
#include "modelmem/sizing/need.hpp"

namespace modelmem::sizing {

// ---- devices ----

/// A static vNPU template of an Ascend chip (docs/fleet.md gives the sources): its memory as
/// HAMi accounts it, its AI cores, and the Ascend device plugin's resource name for it.
struct VnpuTemplate {
  std::string name = {};  ///< "vir02"
  std::size_t mib = 0;    ///< memory in MiB
  int ai_cores = 0;       ///< AI cores
  std::string resource;   ///< "huawei.com/Ascend910-2c"
};

/// An accelerator model and the names schedulers give it.
struct Accelerator {
  std::string name = {};             ///< "910A", "910B3", "310P", "gpu", "cpu"
  bool ascend = false;               ///< Ascend NPU (torch_npu) or NVIDIA GPU (PyTorch CUDA)
  std::size_t mib = 0;               ///< memory a scheduler hands out, MiB (0: must be given)
  std::string hami_resource = {};    ///< "huawei.com/Ascend910A", "nvidia.com/gpu"
  std::string hami_memory = {};      ///< "huawei.com/Ascend910A-memory", "nvidia.com/gpumem"
  std::string plugin_resource = {};  ///< the whole device under the vendor's plugin
  std::string dra_driver = {};       ///< the DRA driver a DeviceClass selects ("" : none assumed)
  std::vector<VnpuTemplate> templates = {};  ///< smallest first; empty for GPUs
  /// The allocator stack that serves a model on it, and the default memory outside it:
  /// npu (torch_npu with modelmem's NPU library), cuda (PyTorch CUDA), host (the "cpu" kind: a
  /// host budget that PyTorch reaches through the LD_PRELOAD library; no scheduler resource).
  Backend backend = Backend::kCuda;
  /// Other names users give it ("310P3" for "310P", "cuda" for "gpu", "host" for "cpu").
  std::vector<std::string> aliases = {};
};

/// Every known kind, and one by name or alias (case-insensitive); InvalidInput names the known
/// ones (and, for "910B", the products of that family).
const std::vector<Accelerator>& accelerators();
const Accelerator& accelerator(const std::string& name);
/// The kinds of accelerators(), their aliases after '=' ("910A, ..., gpu=cuda, cpu=host").
std::string known_device_kinds();

/// One device: where it is, its memory and its kind.
struct Device {
  std::string node;  ///< "" when the devices were given without nodes
  int index = 0;     ///< its number on the node
  std::size_t bytes = 0;
  std::string kind;
  std::string name() const;  ///< "3" or "node-a/3"
};

/// "8x64GiB" (GPUs of 64 GiB), "8x910A" (the kind's memory), "8x32GiB:910A", "2x8x910A"
/// (two nodes node-0 and node-1 of 8 each); several groups separated by commas. InvalidInput
/// for anything else.
std::vector<Device> parse_devices(const std::string& spec);

/// A YAML or JSON file: `nodes: [{name: N, devices: SPEC or [{kind, memory, count}]}]`.
std::vector<Device> read_devices(const std::string& path);

/// `--devices` as the command and Python take it: a file when one exists at that path
/// (read_devices), else a spec (parse_devices).
std::vector<Device> devices_from(const std::string& spec_or_file);

// ---- models ----

/// A decoder LLM placed by its serving plan (`modelmem plan --serve`, sizing/serving.hpp): the
/// KV cache for `concurrency` sequences at `context` tokens (or `kv_tokens` tokens), beside the
/// weights and one step's activations.
struct ServeSpec {
  std::int64_t context = 0;      ///< tokens per sequence; 0: the model's (plan --serve's default)
  std::int64_t concurrency = 0;  ///< sequences at the context held at once (the decode batch)
  std::int64_t kv_tokens = 0;    ///< or a number of KV tokens (then the decode batch is 256)
  std::int64_t block_size = 16;
  std::int64_t max_batched_tokens = 8192;  ///< the prefill chunk planned
  std::string kv_dtype;                    ///< "" = the weights' dtype; fp8/int8
  std::string dtype;                       ///< "" = as stored
  int tp = 1;
  std::string onnx;  ///< a checkpoint folder's ONNX export (activations planned from it)
};

/// One model to place, as the models file or the command's arguments give it.
struct ModelSpec {
  std::string name;  ///< unique: the pool's, the Deployment's and the container's name
  std::string path;  ///< ONNX file
  std::map<std::string, std::int64_t> dims;
  std::string dtype = "fp32";
  /// eager by default: a placed pool runs under PyTorch or torch_npu unless the file says static
  model::Runtime runtime = model::Runtime::kEager;
  int replicas = 1;
  std::string image = "modelmem-serve:latest";  ///< container image in the emitted objects
  std::string strategy;  ///< the pool's strategy (strategy_config); "" = PlaceOptions::strategy
  std::string overhead;  ///< a size (parse_overhead); "" = PlaceOptions::overhead
  std::optional<ServeSpec> serve;  ///< placed by its serving plan (path: ONNX or checkpoint)
  /// dims the model does not have are skipped (one --dim list for several files); place()
  /// then rejects a dim that no model has.
  bool shared_dims = false;
};

/// A YAML or JSON file: `models: [{name, model, dims: {d: v}, dtype, runtime, replicas,
/// image, strategy, overhead, serve: {context, max_num_seqs (or concurrency) | kv_tokens, kv_dtype,
/// tp, block_size, max_batched_tokens, onnx}}]` (model and onnx are relative to the file).
/// InvalidInput naming the file and the entry.
std::vector<ModelSpec> read_models(const std::string& path);

/// ONNX files given directly, all with the same dims, dtype, runtime and replicas; each named
/// after its file's stem (made unique). InvalidInput for no file, a dim given twice, a bad
/// dtype or runtime, or replicas out of 1..1024.
std::vector<ModelSpec> models_from_files(const std::vector<std::string>& paths,
                                         const std::map<std::string, std::int64_t>& dims,
                                         const std::string& dtype, model::Runtime runtime,
                                         int replicas);

/// A name usable as a pool, a Kubernetes object and a container name: lower-case letters,
/// digits and '-', at most 40 characters ("BERT_base.v2" -> "bert-base-v2").
std::string object_name(const std::string& text);

/// What one replica of a model needs on one kind of device (its Backend), and where each figure
/// comes from. The pool's quota is `need`; the container's request is `request`.
struct PlacementNeed {
  Backend backend = Backend::kCuda;
  std::size_t weights = 0;
  /// The pool's need, whole MiB: `modelmem plan --device-memory`'s need on the strategy for the
  /// model's dims, dtype and runtime (sizing::need_of), or for a served LLM its serving plan's
  /// weights + activations + KV cache. MODELMEM_ALLOC_CONF's quota; the allocator's cap.
  std::size_t need = 0;
  std::string strategy;     ///< the pool's stack (strategy_config), what MODELMEM_ALLOC_CONF sets
  Overhead overhead;        ///< memory outside the allocator, once per container, with its source
  std::size_t request = 0;  ///< need + overhead in whole MiB: the container's request
  std::string basis;        ///< how `need` was computed, in words
  std::vector<std::string> dims_bound;  ///< the symbolic dims the model took from its spec
  /// A served LLM: environment variable -> the engine's flags for exactly this KV cache.
  std::map<std::string, std::string> engine_env;
};

struct PlaceOptions;

/// The plan options of a model placed by its plan: its dims, dtype and runtime, as `plan` takes
/// them.
model::PlanOptions plan_options(const ModelSpec& model);

/// The need of one replica of `model` on a device of `backend`: the one function every figure
/// of the placement comes from. `options` gives the fleet-wide strategy and overhead.
PlacementNeed model_need(const ModelSpec& model, Backend backend, const PlaceOptions& options);
/// The same for a model already planned (`plan`), as place() calls it once per device kind.
PlacementNeed model_need(const ModelSpec& model, const model::ModelPlan& plan, Backend backend,
                         const PlaceOptions& options);

/// Rejects a bad strategy or overhead of a model or of the options (one line naming the model
/// and the key, or the flag) before anything is planned.
void validate_sizing(const std::vector<ModelSpec>& models, const PlaceOptions& options);

// ---- packing ----

/// The packer on its own: sizes onto capacities. assignment[i] is the bin of item i, or -1.
struct Packing {
  std::vector<int> assignment;
  bool exact = false;   ///< searched exhaustively (within the node budget)
  bool proven = false;  ///< the search finished: nothing places more bytes on fewer devices
  std::string method;   ///< in words
};
/// Exact branch and bound when items <= exact_limit (most bytes placed, then fewest devices
/// used), best-fit decreasing otherwise (each item, largest first, onto the device it leaves
/// with the least room).
Packing pack(const std::vector<std::size_t>& items, const std::vector<std::size_t>& bins,
             std::size_t exact_limit = 12);

/// The vNPU template that holds `request` bytes on `device` (the smallest whose memory is at
/// least the request), or nullptr when none does (a GPU, or more than the largest template:
/// the replica then takes the whole device).
const VnpuTemplate* vnpu_template(std::size_t request, const Device& device);

struct PlaceOptions {
  std::string strategy;          ///< every model's pool strategy unless it gives its own
  std::string overhead;          ///< every container's overhead unless its model gives its own
  std::size_t exact_limit = 12;  ///< replicas up to which the packing is exact
  bool templates = true;         ///< on Ascend, charge each replica its vNPU template
  bool spread = true;            ///< replicas of one model on distinct devices
};

/// One replica and what its device is charged for it.
struct Replica {
  std::size_t model = 0;      ///< index into Placement::models
  int number = 0;             ///< 0 .. replicas - 1
  std::size_t request = 0;    ///< need + overhead on its device's kind, whole MiB
  std::size_t charge = 0;     ///< what the device's scheduler accounts (template or request)
  std::string template_name;  ///< the vNPU template charged, "" for none / a whole device
  int device = -1;            ///< index into Placement::devices, -1 when it found no room
};

/// A replica that found no room: the device with the most room left, and the shortfall.
struct Shortfall {
  std::size_t replica = 0;  ///< index into Placement::replicas
  int device = -1;          ///< the device closest to holding it (-1: all hold its model)
  std::size_t room = 0;     ///< room left on it
  std::size_t short_by = 0;
};

struct Placement {
  std::vector<ModelSpec> models;
  std::vector<std::map<Backend, PlacementNeed>> needs;  ///< per model, per kind of its devices
  std::vector<Device> devices;
  std::vector<Replica> replicas;
  Packing packing;
  std::vector<Shortfall> shortfalls;
  std::vector<std::string> messages;  ///< one line per shortfall, for the report

  bool fits() const { return shortfalls.empty(); }
  std::size_t used(std::size_t device) const;  ///< charges of its replicas
  long long headroom(std::size_t device) const;
  std::string replica_name(std::size_t replica) const;  ///< "bert-1"
  /// Model m's need on the kind of `device`.
  const PlacementNeed& need_on(std::size_t model, const Device& device) const;
  /// A placed replica's need on its device.
  const PlacementNeed& need_of(std::size_t replica) const;
};

/// Needs every model (model_need), charges each replica, packs. InvalidInput for no models,
/// no devices, duplicate names, replicas < 1, or a bad model.
Placement place(const std::vector<ModelSpec>& models, const std::vector<Device>& devices,
                const PlaceOptions& options = {});
/// As place(), with the needs given (one per model, the same on every kind of device): what
/// tests and callers with their own figures use.
Placement place(const std::vector<ModelSpec>& models, const std::vector<PlacementNeed>& needs,
                const std::vector<Device>& devices, const PlaceOptions& options = {});

/// The report `modelmem place` prints: each model's need and request per kind with their
/// basis, each device's replicas and headroom, each replica that found no room, and each
/// model's MODELMEM_ALLOC_CONF per kind.
std::string render_text(const Placement& placement);

/// MODELMEM_ALLOC_CONF of model m's container on a kind:
/// STRATEGY,pools:[NAME:MIB],default_pool:NAME with MIB the need (what `modelmem run --conf` and
/// the libraries accept).
std::string pool_conf(const Placement& placement, std::size_t model, Backend backend);

}  // namespace modelmem::sizing
