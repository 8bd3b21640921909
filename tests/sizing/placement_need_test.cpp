// Placement by the need on the strategy (modelmem/sizing/placement.hpp): each model's need per
// kind of device is `plan --device-memory`'s, the request adds the overhead once, bad strategies
// and overheads are one-line errors, and the promise: each placed container's
// MODELMEM_ALLOC_CONF, built by the factory on the CPU budget it was placed on, serves the
// model's allocation sequence at the planned dims with no out-of-memory, and refuses a larger
// batch inside the pool.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/sizing/placement.hpp"
#include "modelmem/sizing/plan_need.hpp"
#include "modelmem/sizing/requests.hpp"
#include "modelmem/sizing/serving.hpp"
#include "modelmem/sizing/serving_need.hpp"
#include "modelmem/trace/replay.hpp"

namespace modelmem::sizing {
namespace {

const std::string kPlacedModels = std::string(MODELMEM_SOURCE_DIR) + "/models/";

ModelSpec onnx(const std::string& file, std::map<std::string, std::int64_t> dims,
               model::Runtime runtime = model::Runtime::kStatic) {
  ModelSpec s;
  s.name = object_name(file.substr(0, file.find('.')));
  s.path = kPlacedModels + file;
  s.dims = std::move(dims);
  s.runtime = runtime;
  return s;
}

model::ModelPlan plan_of(const ModelSpec& m) {
  model::PlanOptions o;  // as `plan --dim ... --dtype ... --runtime ...` takes them
  o.dims = m.dims;
  o.dtype = m.dtype;
  o.runtime = m.runtime;
  return model::plan_model(m.path, o);
}

TEST(PlaceNeed, IsPlansNeedOnTheStrategyPerKindAndTheRequestAddsTheOverheadOnce) {
  ModelSpec r50 = onnx("resnet50.onnx", {{"batch", 4}}, model::Runtime::kEager);
  ModelSpec bert = onnx("bert_base.onnx", {{"batch", 2}, {"seq", 128}});
  bert.strategy = "static";
  bert.overhead = "300MiB";
  const Placement pl = place({r50, bert}, parse_devices("1x910A,1x24GiB,1x2GiB:cpu"));
  ASSERT_TRUE(pl.fits()) << render_text(pl);
  for (std::size_t m = 0; m < 2; ++m) {
    const ModelSpec& spec = pl.models[m];
    const model::ModelPlan mp = plan_of(spec);
    for (Backend b : {Backend::kNpu, Backend::kCuda, Backend::kHost}) {
      SCOPED_TRACE(spec.name + " on " + backend_name(b));
      SizingOptions so;
      so.backend = b;
      so.strategy = spec.strategy;
      so.overhead = spec.overhead;
      const PoolNeed want = need_of(mp, so);  // what `plan --device-memory` prints
      const PlacementNeed& got = pl.needs[m].at(b);
      EXPECT_EQ(got.need, want.need);
      EXPECT_EQ(got.strategy, want.strategy);
      EXPECT_EQ(got.overhead.bytes, want.overhead.bytes);
      EXPECT_EQ(got.request, (want.need + want.overhead.bytes + kMiB - 1) / kMiB * kMiB);
      EXPECT_NE(got.basis.find(want.strategy), std::string::npos) << got.basis;
      EXPECT_EQ(pool_conf(pl, m, b), fmt::format("{},pools:[{}:{}],default_pool:{}", want.strategy,
                                                 spec.name, want.need_mib, spec.name));
    }
  }
  // The kinds' default overheads, stated with their source; the host leaves requests below
  // 64 KiB to the C library, so its need differs from the device's.
  EXPECT_EQ(pl.needs[0].at(Backend::kNpu).overhead.bytes, std::size_t{1} << 30);
  EXPECT_NE(pl.needs[0].at(Backend::kNpu).overhead.source.find("not measured"), std::string::npos);
  EXPECT_EQ(pl.needs[0].at(Backend::kHost).overhead.bytes, 0u);
  EXPECT_EQ(pl.needs[1].at(Backend::kCuda).overhead.bytes, 300 * kMiB);
  const std::string text = render_text(pl);
  EXPECT_NE(text.find("overhead       1.00 GiB on npu: default for npu"), std::string::npos)
      << text;
  // Each replica is charged the request on its own device's kind, and the cap inside it is the
  // need: the allocator's share of the request.
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const Device& d = pl.devices[pl.replicas[i].device];
    EXPECT_EQ(pl.replicas[i].request, pl.need_on(pl.replicas[i].model, d).request);
    if (d.kind == "cpu") {
      EXPECT_THROW(container_cap(pl, i, Target::kHami), InvalidInput);
      EXPECT_THROW(container_cap(pl, i, Target::kDra), InvalidInput);
      // Ray counts a cpu budget like any device; the pool's quota is the only cap.
      const ContainerCap ray = container_cap(pl, i, Target::kRay);
      EXPECT_EQ(ray.need, pl.need_of(i).need);
      EXPECT_TRUE(ray.torch_var.empty());
      EXPECT_EQ(ray.modelmem_conf, pool_conf(pl, pl.replicas[i].model, Backend::kHost));
      continue;
    }
    const ContainerCap c = container_cap(pl, i, Target::kDra);
    EXPECT_EQ(c.need, pl.need_of(i).need);
    EXPECT_EQ(c.modelmem_conf, pool_conf(pl, pl.replicas[i].model, accelerator(d.kind).backend));
  }
}

TEST(PlaceNeed, ABadStrategyOrOverheadIsOneLineNamingTheModel) {
  ModelSpec m = onnx("tiny.onnx", {{"n", 4}});
  auto message = [&](const ModelSpec& spec, const PlaceOptions& o) -> std::string {
    try {
      place({spec}, parse_devices("1x910A"), o);
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "no error";
  };
  ModelSpec bad = m;
  bad.strategy = "bogus";
  EXPECT_EQ(message(bad, {}).rfind("model tiny: strategy bogus: expected caching", 0), 0u)
      << message(bad, {});
  bad = m;
  bad.overhead = "5%";
  EXPECT_NE(message(bad, {}).find("model tiny: overhead '5%': a fraction of the device"),
            std::string::npos)
      << message(bad, {});
  bad.overhead = "lots";
  EXPECT_EQ(message(bad, {}).rfind("model tiny: overhead", 0), 0u) << message(bad, {});
  PlaceOptions o;
  o.strategy = "strategy:caching,pools:[a:1]";
  EXPECT_EQ(message(m, o).rfind("--strategy", 0), 0u) << message(m, o);
  for (const std::string& text : {message(bad, {}), message(m, o)})
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
}

TEST(PlaceNeed, AServedLlmIsPlacedByItsServingNeedWithItsServingPlansEngineSettings) {
  ModelSpec gpt2;
  gpt2.name = "gpt2";
  gpt2.path = kPlacedModels + "gpt2_decoder.onnx";
  gpt2.serve = ServeSpec{};
  gpt2.serve->context = 1024;
  gpt2.serve->concurrency = 8;
  ModelSpec tokens = gpt2;
  tokens.name = "gpt2-tokens";
  tokens.serve->concurrency = 0;
  tokens.serve->kv_tokens = 5000;
  tokens.overhead = "256MiB";
  const Placement pl = place({gpt2, tokens}, parse_devices("1x24GiB"));
  ASSERT_TRUE(pl.fits()) << render_text(pl);
  for (std::size_t m = 0; m < 2; ++m) {
    const PlacementNeed& n = pl.needs[m].at(Backend::kCuda);
    SCOPED_TRACE(n.basis);
    // The serving plan on a device of its bytes (weights + activations + the cache asked +
    // overhead, in whole MiB): the same engine settings, a KV cache of at least what was asked;
    // the pool is the serving need on the strategy of holding that cache.
    ServeOptions o;
    o.context = 1024;
    o.max_num_seqs = m == 0 ? 8 : 256;
    o.overhead = std::to_string(n.overhead.bytes);
    o.device_memory = std::size_t{1} << 40;
    const ServePlan big = plan_serving(gpt2.path, o);
    const std::size_t asked = m == 0 ? 8 * big.sequence_bytes : 5008 / 16 * big.kv_block_bytes;
    o.device_memory = (big.need.need + asked + n.overhead.bytes + kMiB - 1) / kMiB * kMiB;
    const ServePlan p = plan_serving(gpt2.path, o);
    ServingLoad load;
    load.tokens = p.kv_tokens;
    load.sequences = m == 0 ? 8 : p.max_sequences;
    EXPECT_EQ(n.need, serving_need_on_strategy(gpt2.path, o, load, "caching").pool.need);
    EXPECT_GT(n.need, p.weights_bytes + p.kv_cache_bytes);
    if (m == 0)
      EXPECT_GE(p.kv_cache_bytes, 8 * p.sequence_bytes);
    else
      EXPECT_GE(p.kv_tokens, 5000u);
    EXPECT_LT(p.kv_cache_bytes, (m == 0 ? 8 * p.sequence_bytes : 5008 / 16 * p.kv_block_bytes) +
                                    kMiB + p.kv_block_bytes);
    EXPECT_EQ(n.request, n.need + (m == 0 ? std::size_t{1} << 30 : 256 * kMiB));
    for (const auto& e : p.engines)
      if (e.engine == "vllm") {
        EXPECT_EQ(n.engine_env.at("MODELMEM_VLLM_ARGS"), e.command);
      }
    EXPECT_NE(n.engine_env.at("MODELMEM_VLLM_ARGS")
                  .find("--kv-cache-memory-bytes " + std::to_string(p.kv_cache_bytes)),
              std::string::npos);
  }
  // The engine settings travel in the container's environment.
  const ContainerCap c = container_cap(pl, 0, Target::kHami);
  EXPECT_EQ(c.engine_env, pl.needs[0].at(Backend::kCuda).engine_env);
  EXPECT_NE(emit(pl, Target::kHami).find("MODELMEM_VLLM_ARGS"), std::string::npos);
}

// The promise: the string each placed container gets, built by the factory on the CPU budget
// the models were placed on, serves each model's allocation sequence at exactly the planned dims
// with no out-of-memory; four times the batch is refused inside that pool.
std::size_t ooms(const std::string& conf, std::size_t device_mib, const ModelSpec& spec) {
  const model::ModelPlan mp = plan_of(spec);
  // As the LD_PRELOAD library sends requests to the pools on the host: 64 KiB and up.
  const trace::Trace seq = allocation_sequence(mp, 3, true, 64 * 1024);
  auto built = config::build(config::parse_config(
      fmt::format("{},device:limited,device_capacity_mb:{}", conf, device_mib)));
  trace::ReplayOptions o;
  o.touch = false;
  return trace::replay(seq, *built.allocator, o).ooms;
}

TEST(PlaceNeed, EachPlacedContainersConfServesItsModelAndALargerBatchIsRefused) {
  ModelSpec r50 = onnx("resnet50.onnx", {{"batch", 2}}, model::Runtime::kEager);
  ModelSpec bert = onnx("bert_base.onnx", {{"batch", 4}, {"seq", 128}}, model::Runtime::kEager);
  ModelSpec tiny = onnx("tiny.onnx", {{"n", 512}});
  tiny.strategy = "static";
  const std::vector<Device> devices = parse_devices("1x800MiB:cpu");
  const Placement pl = place({r50, bert, tiny}, devices);
  ASSERT_TRUE(pl.fits()) << render_text(pl);
  const std::size_t device_mib = devices[0].bytes / kMiB;
  std::size_t quotas = 0;
  for (std::size_t m = 0; m < pl.models.size(); ++m) {
    const std::string conf = pool_conf(pl, m, Backend::kHost);
    SCOPED_TRACE(conf);
    quotas += pl.needs[m].at(Backend::kHost).need;
    EXPECT_EQ(ooms(conf, device_mib, pl.models[m]), 0u);
    ModelSpec twice = pl.models[m];
    for (auto& [dim, value] : twice.dims)
      if (dim == "batch" || dim == "n") value *= 4;
    EXPECT_GT(ooms(conf, device_mib, twice), 0u);
  }
  EXPECT_LE(quotas, devices[0].bytes);
}

}  // namespace
}  // namespace modelmem::sizing
