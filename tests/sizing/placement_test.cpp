// Placement of many models on many devices (modelmem/sizing/placement.hpp, requests.hpp): the
// packer against brute force, the messages when nothing fits, the device lists, and each
// container's cap built by modelmem's own factory at exactly its request.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/sizing/placement.hpp"
#include "modelmem/sizing/requests.hpp"

namespace modelmem::sizing {
namespace {

// Every assignment of items to bins or to none: the most bytes placed, then the fewest bins.
std::pair<std::size_t, std::size_t> brute(const std::vector<std::size_t>& items,
                                          const std::vector<std::size_t>& bins) {
  std::pair<std::size_t, std::size_t> best{0, 0};
  std::vector<int> a(items.size(), -1);
  for (;;) {
    std::vector<std::size_t> used(bins.size(), 0);
    bool ok = true;
    std::size_t placed = 0;
    for (std::size_t i = 0; i < items.size(); ++i)
      if (a[i] >= 0) used[a[i]] += items[i], placed += items[i];
    std::size_t open = 0;
    for (std::size_t b = 0; b < bins.size(); ++b)
      ok = ok && used[b] <= bins[b], open += used[b] > 0;
    if (ok && (placed > best.first || (placed == best.first && open < best.second)))
      best = {placed, open};
    std::size_t k = 0;
    while (k < a.size() && ++a[k] == static_cast<int>(bins.size())) a[k++] = -1;
    if (k == a.size()) break;
  }
  return best;
}

TEST(Pack, ExactMatchesBruteForce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::vector<std::size_t> items(1 + rng() % 6), bins(1 + rng() % 4);
    for (auto& x : items) x = 1 + rng() % 10;
    for (auto& b : bins) b = 4 + rng() % 12;
    const Packing p = pack(items, bins, 12);
    ASSERT_TRUE(p.exact && p.proven);
    std::vector<std::size_t> used(bins.size(), 0);
    std::size_t placed = 0;
    std::set<int> open;
    for (std::size_t i = 0; i < items.size(); ++i)
      if (p.assignment[i] >= 0)
        used[p.assignment[i]] += items[i], placed += items[i], open.insert(p.assignment[i]);
    for (std::size_t b = 0; b < bins.size(); ++b) ASSERT_LE(used[b], bins[b]);
    const auto [best_placed, best_bins] = brute(items, bins);
    EXPECT_EQ(placed, best_placed) << "round " << round;
    EXPECT_EQ(open.size(), best_bins) << "round " << round;
  }
}

TEST(Pack, ExactFindsWhatBestFitDecreasingMisses) {
  // Best-fit decreasing puts both 4s on one device (2 left) and strands a 3; {4,3,3} twice fits.
  const std::vector<std::size_t> items = {4, 4, 3, 3, 3, 3}, bins = {10, 10};
  const Packing heuristic = pack(items, bins, 0);
  EXPECT_FALSE(heuristic.exact);
  EXPECT_NE(std::count(heuristic.assignment.begin(), heuristic.assignment.end(), -1), 0);
  const Packing exact = pack(items, bins);
  EXPECT_EQ(std::count(exact.assignment.begin(), exact.assignment.end(), -1), 0);
}

TEST(Pack, TwelveItemsThatDoNotFitEndInSeconds) {
  // Twelve distinct sizes, 1 more than four distinct bins hold: the search must prove it (or
  // stop at its node budget) quickly, and keep the most bytes it can place.
  const std::vector<std::size_t> items = {97, 89, 83, 79, 73, 71, 67, 61, 59, 53, 47, 43};
  const std::vector<std::size_t> bins = {211, 205, 199, 193};
  const auto start = std::chrono::steady_clock::now();
  const Packing p = pack(items, bins);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("12 items on 4 bins: %s in %.2f s\n", p.method.c_str(), seconds);
  EXPECT_LT(seconds, 20.0);
  EXPECT_TRUE(p.exact);
  EXPECT_NE(std::count(p.assignment.begin(), p.assignment.end(), -1), 0);
}

ModelSpec spec(const std::string& name, int replicas) {
  ModelSpec s;
  s.name = name;
  s.path = name + ".onnx";
  s.replicas = replicas;
  return s;
}

PlacementNeed need(std::size_t bytes, std::size_t overhead = 0) {
  PlacementNeed n;
  n.weights = bytes / 2;
  n.need = bytes;
  n.strategy = "strategy:caching";
  n.overhead = {overhead, "given"};
  n.basis = "given";
  return n;
}

TEST(Place, ReaddsEveryDeviceAgainstItsMemory) {
  const auto devices = parse_devices("8x910A");
  const Placement pl = place({spec("a", 3), spec("b", 2), spec("c", 4)},
                             {need(1500 * kMiB), need(7 * kGiB), need(3 * kGiB + 5)}, devices);
  ASSERT_TRUE(pl.fits());
  for (std::size_t d = 0; d < pl.devices.size(); ++d) {
    std::size_t sum = 0;
    for (const auto& r : pl.replicas)
      if (r.device == static_cast<int>(d)) sum += r.charge;
    EXPECT_LE(sum, pl.devices[d].bytes) << "device " << d;
    EXPECT_EQ(sum, pl.used(d));
  }
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const Replica& r = pl.replicas[i];
    EXPECT_GE(r.device, 0);
    EXPECT_EQ(r.request % kMiB, 0u);
    EXPECT_EQ(r.request, pl.need_of(i).request);
    EXPECT_GE(r.request, pl.need_of(i).need);
    EXPECT_LT(r.request - pl.need_of(i).need, kMiB);
    const VnpuTemplate* t = vnpu_template(r.request, pl.devices[r.device]);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(r.charge, t->mib * kMiB);  // the smallest template that holds it
  }
}

TEST(Place, SaysWhichReplicaDoesNotFitWhereAndByHowMuch) {
  const auto devices = parse_devices("2x40GiB");
  PlaceOptions share;
  share.spread = false;
  const Placement pl =
      place({spec("big", 1), spec("mid", 3)}, {need(30 * kGiB), need(20 * kGiB)}, devices, share);
  ASSERT_FALSE(pl.fits());
  // 70 GiB of 90 fit (big alone, two mids together): one mid is left, 10 GiB short of the
  // 10 GiB left beside big.
  ASSERT_EQ(pl.shortfalls.size(), 1u);
  EXPECT_EQ(pl.messages[0],
            "mid-2 needs 20480 MiB: no device has room; the most is 10240 MiB on 0, short by "
            "10240 MiB");
  const std::string text = render_text(pl);
  EXPECT_NE(text.find("fits           no"), std::string::npos) << text;

  const Placement huge = place({spec("huge", 1)}, {need(50 * kGiB)}, devices);
  ASSERT_EQ(huge.messages.size(), 1u);
  EXPECT_NE(huge.messages[0].find("larger than every device"), std::string::npos);
  EXPECT_NE(huge.messages[0].find("short by 10240 MiB"), std::string::npos) << huge.messages[0];
}

TEST(Place, ReplicasOfOneModelGoToDistinctDevices) {
  const auto devices = parse_devices("4x64GiB");
  const Placement pl = place({spec("a", 4), spec("b", 2)}, {need(kGiB), need(kGiB)}, devices);
  ASSERT_TRUE(pl.fits());
  std::set<std::pair<std::size_t, int>> seen;
  for (const auto& r : pl.replicas) EXPECT_TRUE(seen.insert({r.model, r.device}).second);

  const Placement more = place({spec("a", 6)}, {need(kGiB)}, devices);
  ASSERT_EQ(more.shortfalls.size(), 2u);
  EXPECT_NE(more.messages[0].find("every one of the 4 devices already holds a replica of a: 6 "
                                  "replicas need 6 devices, 2 short"),
            std::string::npos)
      << more.messages[0];
  PlaceOptions share;
  share.spread = false;
  EXPECT_TRUE(place({spec("a", 6)}, {need(kGiB)}, devices, share).fits());
}

TEST(Devices, Specs) {
  auto d = parse_devices("8x64GiB");
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(d[0].bytes, 64 * kGiB);
  EXPECT_EQ(d[0].kind, "gpu");
  d = parse_devices("2x4x910A, 1x80GiB:gpu");
  ASSERT_EQ(d.size(), 9u);
  EXPECT_EQ(d[4].name(), "node-1/0");
  EXPECT_EQ(d[0].bytes, 32768 * kMiB);
  EXPECT_EQ(d[8].kind, "gpu");
  for (const char* bad : {"", "8", "x64GiB", "8x", "0x910A", "8x64GiB:tpu", "8xgpu", "8x12Q"})
    EXPECT_THROW(parse_devices(bad), InvalidInput) << bad;
}

// Ascend products by the names users give them (HAMi's device configuration): each with its
// memory and scheduler names; aliases give the same kind; a family or an unknown word is an error
// listing the known kinds, never a size of 910 bytes.
TEST(Devices, AscendProductsAndAliases) {
  auto d = parse_devices("2x910B4");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].kind, "910B4");
  EXPECT_EQ(d[0].bytes, 32768 * kMiB);
  d = parse_devices("1x910B2,1x310P3,1x80GiB:cuda,1x16GiB:host");
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].bytes, 65536 * kMiB);
  EXPECT_EQ(d[1].kind, "310P");
  EXPECT_EQ(d[1].bytes, 21527 * kMiB);
  EXPECT_EQ(d[2].kind, "gpu");
  EXPECT_EQ(d[3].kind, "cpu");
  EXPECT_EQ(accelerator("910b2").hami_memory, "huawei.com/Ascend910B2-memory");
  EXPECT_EQ(accelerator("910B4").templates.size(), 2u);
  // the 64 GB 910B4 by its SoC name, with HAMi's resources
  d = parse_devices("2x910B4-1");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].kind, "910B4-1");
  EXPECT_EQ(d[1].bytes, 65536 * kMiB);
  EXPECT_EQ(accelerator("910b4-1").hami_resource, "huawei.com/Ascend910B4-1");
  EXPECT_TRUE(accelerator("910B4-1").templates.empty());
  auto says = [](const std::string& spec) {
    try {
      parse_devices(spec);
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string family = says("2x910B");
  EXPECT_NE(family.find("a family, not a product"), std::string::npos) << family;
  EXPECT_NE(family.find("910B4"), std::string::npos) << family;
  EXPECT_EQ(parse_devices("2x910C")[0].bytes, 65536 * kMiB);  // one die of an A3 package
  const std::string unknown = says("2x950");
  EXPECT_NE(unknown.find("'950' is neither a device kind (known: 910A, 910B3, 910B2, 910B4, "
                         "910B4-1, 910C, 310P=310P3, gpu=cuda, cpu=host)"),
            std::string::npos)
      << unknown;
  EXPECT_NE(says("2x512B").find("nor a size of at least 1 MiB"), std::string::npos);
  EXPECT_NE(says("2x64GiB:910X").find("device kind '910X': unknown (known: 910A"),
            std::string::npos);
}

TEST(Devices, File) {
  const auto dir = std::filesystem::temp_directory_path() / "modelmem_place_devices";
  std::filesystem::create_directories(dir);
  const auto path = (dir / "nodes.yaml").string();
  std::ofstream(path) << "nodes:\n  - name: a\n    devices: 4x910A\n  - name: b\n"
                         "    devices: [{kind: gpu, memory: 80GiB, count: 2}]\n";
  const auto d = read_devices(path);
  ASSERT_EQ(d.size(), 6u);
  EXPECT_EQ(d[5].name(), "b/1");
  EXPECT_EQ(d[5].bytes, 80 * kGiB);
  std::ofstream(path) << "nodes:\n  - name: a\n    devices: 4x910A\n    gpus: 3\n";
  try {
    read_devices(path);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'gpus'"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "nodes: [a, b\n";
  EXPECT_THROW(read_devices(path), InvalidInput);
}

// The cap inside each container, built by modelmem's factory on a device of exactly what the
// container sees: the request is served, a little more is refused.
void expect_cap(const ContainerCap& c, std::size_t overhead, const std::string& what) {
  ASSERT_EQ(c.visible % kMiB, 0u) << what;
  // The allocator's cap is the need; the overhead beside it makes the request.
  ASSERT_EQ(c.request, (c.need + overhead + kMiB - 1) / kMiB * kMiB) << what;
  ASSERT_EQ(static_cast<std::size_t>(c.fraction * static_cast<double>(c.visible)), c.need) << what;
  const std::string device =
      "device:limited,device_capacity_mb:" + std::to_string(c.visible / kMiB);
  {
    // per_process_memory_fraction: a static pool of exactly the request.
    auto built = config::build(config::parse_config(device + ",strategy:static," + c.torch_conf));
    void* p = built.allocator->allocate(c.need);
    ASSERT_NE(p, nullptr) << what;
    EXPECT_THROW(built.allocator->allocate(256), OutOfMemory) << what;
    built.allocator->deallocate(p);
  }
  {
    // MODELMEM_ALLOC_CONF: the model's pool and its quota (on a static stack: one block).
    std::string conf = c.modelmem_conf;
    conf.replace(0, conf.find(','), "strategy:static");
    auto built = config::build(config::parse_config(device + "," + conf));
    void* p = built.allocator->allocate(c.need);
    ASSERT_NE(p, nullptr) << what;
    EXPECT_THROW(built.allocator->allocate(256), OutOfMemory) << what;
    built.allocator->deallocate(p);
  }
}

TEST(Requests, EachContainersCapIsItsRequest) {
  for (const char* devs : {"4x910A", "2x910B3", "2x310P", "4x24GiB"}) {
    PlaceOptions share;
    share.spread = false;
    const std::size_t overhead = 300 * kMiB + 5;
    const Placement pl = place({spec("a", 2), spec("b", 3)},
                               {need(1300 * kMiB, overhead), need(5 * kGiB + 3 * kMiB, overhead)},
                               parse_devices(devs), share);
    ASSERT_TRUE(pl.fits()) << devs;
    for (std::size_t i = 0; i < pl.replicas.size(); ++i)
      for (Target t : {Target::kHami, Target::kVnpu, Target::kDra, Target::kRay}) {
        if (t == Target::kVnpu && pl.devices[0].kind == "gpu") continue;
        expect_cap(container_cap(pl, i, t), overhead,
                   std::string(devs) + " " + pl.replica_name(i) + " " + target_name(t));
      }
  }
}

TEST(Requests, RefusesWhatATargetCannotExpress) {
  const Placement gpu = place({spec("a", 1)}, {need(kGiB)}, parse_devices("1x16GiB"));
  EXPECT_THROW(emit(gpu, Target::kVnpu), InvalidInput);
  const Placement npu = place({spec("a", 1)}, {need(kGiB)}, parse_devices("1x910A"));
  try {
    emit(npu, Target::kDra);  // no Ascend DRA driver name assumed
    ADD_FAILURE() << "no refusal";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("needs --dra-driver NAME"), std::string::npos) << e.what();
  }
  EmitOptions o;
  o.dra_driver = "npu.example.com";
  EXPECT_NE(emit(npu, Target::kDra, o).find("device.driver == \\\"npu.example.com\\\""),
            std::string::npos);
  const Placement none = place({spec("a", 1)}, {need(20 * kGiB)}, parse_devices("1x16GiB"));
  EXPECT_THROW(emit(none, Target::kHami), InvalidInput);
}

TEST(Requests, RayPinsEachReplicaToItsDevicesMiB) {
  // Two nodes: one `ray start` each (the first the head) declaring its devices' MiB, and each
  // replica's application asks the MiB resource of the device it was placed on.
  const Placement pl = place({spec("a", 3)}, {need(kGiB)}, parse_devices("2x2x16GiB"));
  ASSERT_TRUE(pl.fits());
  EmitOptions o;
  o.ray_app = "serve_mod:build";
  const std::string y = emit(pl, Target::kRay, o);
  EXPECT_NE(
      y.find("# ray-start node-0: ray start --head "
             "--resources='{\"modelmem_mib_node-0_0\":16384,\"modelmem_mib_node-0_1\":16384}'"),
      std::string::npos)
      << y;
  EXPECT_NE(y.find("# ray-start node-1: ray start --address=HEAD:6379 --resources="),
            std::string::npos);
  EXPECT_NE(y.find("import_path: \"serve_mod:build\""), std::string::npos);
  // Serve's proxy options, written out for the user to edit before `serve deploy`.
  EXPECT_NE(y.find("proxy_location: \"EveryNode\"\nhttp_options:\n  host: \"0.0.0.0\"\n  port: "
                   "8000\napplications:\n"),
            std::string::npos)
      << y;
  for (std::size_t i = 0; i < pl.replicas.size(); ++i) {
    const Device& d = pl.devices[static_cast<std::size_t>(pl.replicas[i].device)];
    const std::string pinned =
        fmt::format("modelmem_mib_{}_{}: {}\n", d.node, d.index, pl.replicas[i].request / kMiB);
    EXPECT_NE(y.find("  - name: \"" + pl.replica_name(i) + "\""), std::string::npos);
    EXPECT_NE(y.find(pinned), std::string::npos) << pinned << y;
    EXPECT_NE(y.find(fmt::format("CUDA_VISIBLE_DEVICES: \"{}\"", d.index)), std::string::npos);
  }
}

}  // namespace
}  // namespace modelmem::sizing
