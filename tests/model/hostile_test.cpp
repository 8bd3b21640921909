// The hostile-model corpus: models that crashed ONNX 1.12's shape inference (SIGFPE on a zero
// stride, SIGSEGV on a weight of another rank or a Range without data) or made it wrap a size to
// 0, each built here with the ONNX protobuf API and each with the one-line error it must give.
// `modelmem plan` on them exits 2 with that line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "builder.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::model {
namespace {

using testing::ModelBuilder;
constexpr std::int64_t kTwo60 = std::int64_t{1} << 60;

struct Hostile {
  std::string name;
  std::function<ModelBuilder()> build;
  std::vector<std::string> says;  // parts of the one-line error
};

// X [1, C, 8, 8] -> OP -> Y, with the weight W (when given) and the attributes `set`.
ModelBuilder window(const std::string& op, std::int64_t channels,
                    const std::vector<std::int64_t>& weight,
                    const std::function<void(onnx::NodeProto&)>& set) {
  ModelBuilder b;
  b.input("X", {1, channels, 8, 8}).output("Y");
  std::vector<std::string> in{"X"};
  if (!weight.empty()) {
    b.weight("W", weight);
    in.push_back("W");
  }
  onnx::NodeProto& n = b.node(op, in, {"Y"}, "n");
  set(n);
  return b;
}

ModelBuilder conv(const std::function<void(onnx::NodeProto&)>& set,
                  std::vector<std::int64_t> weight = {4, 3, 3, 3}, std::int64_t channels = 3) {
  return window("Conv", channels, weight, set);
}

ModelBuilder pool(const std::string& op, const std::function<void(onnx::NodeProto&)>& set) {
  return window(op, 3, {}, set);
}

void ints(onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v) {
  ModelBuilder::ints_attr(n, name, v);
}

// A float scalar initializer, with its value or (graph-only) without.
void float_scalar(ModelBuilder& b, const std::string& name, std::optional<float> value) {
  auto* t = b.proto().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  if (value) t->add_float_data(*value);
}

ModelBuilder range(std::optional<float> start, float limit, float delta) {
  ModelBuilder b;
  b.input("X", {1}).output("Y");
  float_scalar(b, "start", start);
  float_scalar(b, "limit", limit);
  float_scalar(b, "delta", delta);
  b.node("Range", {"start", "limit", "delta"}, {"R"}, "range");
  b.node("Relu", {"R"}, {"Y"}, "relu");
  return b;
}

// X [4, 8] -> Shape -> OP(Shape, C) -> ConstantOfShape/Reshape... -> Y
ModelBuilder shape_then(const std::string& op, const std::vector<std::int64_t>& c) {
  ModelBuilder b;
  b.input("X", {4, 8}).ints("C", c).output("Y");
  b.node("Shape", {"X"}, {"S"}, "shape");
  b.node(op, {"S", "C"}, {"T"}, "arith");
  b.node("ConstantOfShape", {"T"}, {"Y"}, "fill");
  return b;
}

ModelBuilder with_shape_input(const std::string& op, const std::vector<std::int64_t>& shape) {
  ModelBuilder b;
  b.input("X", {4, 8}).ints("shape", shape).output("Y");
  b.node(op, {"X", "shape"}, {"Y"}, "n");
  return b;
}

std::vector<Hostile> corpus() {
  using N = onnx::NodeProto;
  return {
      {"conv_stride_0",
       [] { return conv([](N& n) {
              ints(n, "strides", {0, 1});
            }); },
       {"node 'n' (Conv): attribute 'strides' [0, 1] holds 0 at position 0",
        "strides must be at least 1"}},
      {"maxpool_stride_0",
       [] {
         return pool("MaxPool", [](N& n) {
           ints(n, "kernel_shape", {2, 2});
           ints(n, "strides", {1, 0});
         });
       },
       {"node 'n' (MaxPool): attribute 'strides' [1, 0] holds 0 at position 1"}},
      {"conv_group_0",
       [] { return conv([](N& n) { ModelBuilder::int_attr(n, "group", 0); }); },
       {"node 'n' (Conv): attribute 'group' is 0; it must be at least 1"}},
      {"conv_group_not_dividing",
       [] {
         return conv([](N& n) { ModelBuilder::int_attr(n, "group", 2); }, {4, 1, 3, 3});
       },
       {"node 'n' (Conv): attribute 'group' (2) does not divide the 3 channels of input 'X'"}},
      {"conv_weight_channels",
       [] {
         return conv([](N&) {}, {4, 2, 3, 3});
       },
       {"node 'n' (Conv): weight 'W' [4, 2, 3, 3]: 2 channels per group x group 1 is not the 3 "
        "channels of input 'X'"}},
      {"conv_dilation_0",
       [] { return conv([](N& n) {
              ints(n, "dilations", {1, 0});
            }); },
       {"node 'n' (Conv): attribute 'dilations'", "dilations must be at least 1"}},
      {"conv_pads_negative",
       [] { return conv([](N& n) {
              ints(n, "pads", {0, -1, 0, 0});
            }); },
       {"node 'n' (Conv): attribute 'pads' [0, -1, 0, 0] holds -1", "must not be negative"}},
      {"conv_kernel_shape_0",
       [] { return conv([](N& n) {
              ints(n, "kernel_shape", {0, 3});
            }); },
       {"node 'n' (Conv): attribute 'kernel_shape'", "a kernel must be at least 1"}},
      {"conv_weight_kernel_0",
       [] {
         return conv([](N&) {}, {4, 3, 0, 3});
       },
       {"node 'n' (Conv): weight 'W' [4, 3, 0, 3]: kernel dim 2 is 0"}},
      {"conv_weight_rank_3",
       [] {
         return conv([](N&) {}, {4, 3, 3});
       },
       {"node 'n' (Conv): weight 'W' has rank 3 [4, 3, 3], input 'X' rank 4 [1, 3, 8, 8]"}},
      {"conv_weight_rank_5",
       [] {
         return conv([](N&) {}, {4, 3, 3, 3, 3});
       },
       {"node 'n' (Conv): weight 'W' has rank 5"}},
      {"conv_weight_rank_behind_relu",
       [] {
         // The Conv's input gets its shape in the same inference pass: checked inside it.
         ModelBuilder b;
         b.input("X", {1, 3, 8, 8}).weight("W", {4, 3, 3}).output("Y");
         b.node("Relu", {"X"}, {"R"}, "relu");
         b.node("Conv", {"R", "W"}, {"Y"}, "n");
         return b;
       },
       {"node 'n' (Conv): weight 'W' has rank 3 [4, 3, 3], input 'R' rank 4 [1, 3, 8, 8]"}},
      {"maxpool_kernel_rank_behind_relu",
       [] {
         ModelBuilder b;
         b.input("X", {1, 3, 8, 8}).output("Y");
         b.node("Relu", {"X"}, {"R"}, "relu");
         ModelBuilder::ints_attr(b.node("MaxPool", {"R"}, {"Y"}, "n"), "kernel_shape", {2, 2, 2});
         return b;
       },
       {"node 'n' (MaxPool): attribute 'kernel_shape' has 3 values; input 'R' of rank 4 needs 2"}},
      {"conv_pads_wrapping",
       [] { return conv([](N& n) {
              ints(n, "pads", {INT64_MAX, 0, INT64_MAX, 0});
            }); },
       {"node 'n' (Conv): attribute 'pads': dim 2 of input 'X' (8) padded by 9223372036854775807 "
        "and 9223372036854775807 overflows 64 bits"}},
      {"maxpool_dilation_wrapping",
       [] {
         return pool("MaxPool", [](N& n) {
           ints(n, "kernel_shape", {3, 3});
           ints(n, "dilations", {std::int64_t{1} << 62, 1});
         });
       },
       {"node 'n' (MaxPool): attribute 'dilations': kernel dim 0 (3) dilated by "
        "4611686018427387904 overflows 64 bits"}},
      {"pad_wrapping",
       [] {
         ModelBuilder b;
         b.input("X", {4, 8}).ints("pads", {0, INT64_MAX, 0, INT64_MAX}).output("Y");
         b.node("Pad", {"X", "pads"}, {"Y"}, "pad");
         return b;
       },
       {"node 'pad' (Pad): input 'pads' (pads): dim 1 of input 'X' (8) padded by "
        "9223372036854775807 and 9223372036854775807 overflows 64 bits"}},
      {"reshape_zero_and_minus_one",
       [] {
         ModelBuilder b = with_shape_input("Reshape", {0, -1});
         ModelBuilder::int_attr(*b.proto().mutable_graph()->mutable_node(0), "allowzero", 1);
         return b;
       },
       {"node 'n' (Reshape): shape input 'shape' [0, -1] holds both 0 and -1 under allowzero"}},
      {"conv_rank_1",
       [] {
         ModelBuilder b;
         b.input("X", {3}).weight("W", {4}).output("Y");
         b.node("Conv", {"X", "W"}, {"Y"}, "n");
         return b;
       },
       {"(op_type:Conv, node name: n): [ShapeInferenceError] Input tensor must have atleast 2 "
        "dimensions"}},
      {"maxunpool_indices_rank_1",
       [] {
         ModelBuilder b;
         b.input("X", {8, 1}).weight("I", {1}, onnx::TensorProto::INT64).output("Y");
         b.node("Relu", {"X"}, {"R"}, "relu");
         ModelBuilder::ints_attr(b.node("MaxUnpool", {"R", "I"}, {"Y"}, "n"), "kernel_shape", {});
         return b;
       },
       {"node 'n' (MaxUnpool): indices 'I' have rank 1; they must have the rank of input 'R'"}},
      {"constant_of_shape_omitted_input",
       [] {
         ModelBuilder b;
         b.input("X", {1}).output("Y");
         b.node("ConstantOfShape", {""}, {"Y"}, "fill");
         return b;
       },
       {"tensor 'Y' (output of node 'fill' (ConstantOfShape))"}},
      {"split_without_outputs",
       [] {
         ModelBuilder b;
         b.input("X", {8, 4}).output("R");
         b.node("Relu", {"X"}, {"R"}, "relu");
         b.proto().mutable_graph()->mutable_node(0)->set_name("relu");
         onnx::NodeProto& split = b.node("Split", {"R"}, {"unused"}, "split");
         split.clear_output();
         return b;
       },
       {"node 'split' (Split): 0 outputs; the operator takes 1 to 2147483647"}},
      {"range_start_in_another_field",
       [] {
         ModelBuilder b;
         b.input("X", {1}).ints("limit", {9}).ints("delta", {1}).output("Y");
         auto* start = b.proto().mutable_graph()->add_initializer();
         start->set_name("start");
         start->set_data_type(onnx::TensorProto::INT64);
         start->add_int32_data(1);  // int64 values belong in int64_data
         b.node("Range", {"start", "limit", "delta"}, {"Y"}, "range");
         return b;
       },
       {"initializer 'start': 1 values in a field int64 does not use (its values belong in "
        "int64_data)"}},
      {"conv_strides_too_many",
       [] { return conv([](N& n) {
              ints(n, "strides", {1, 1, 1});
            }); },
       {"node 'n' (Conv): attribute 'strides' has 3 values; input 'X' of rank 4 needs 2"}},
      {"convtranspose_stride_0",
       [] {
         return window("ConvTranspose", 3, {3, 4, 3, 3}, [](N& n) { ints(n, "strides", {0, 0}); });
       },
       {"node 'n' (ConvTranspose): attribute 'strides' [0, 0] holds 0"}},
      {"convtranspose_group_0",
       [] {
         return window("ConvTranspose", 3, {3, 4, 3, 3},
                       [](N& n) { ModelBuilder::int_attr(n, "group", 0); });
       },
       {"node 'n' (ConvTranspose): attribute 'group' is 0"}},
      {"averagepool_kernel_0",
       [] { return pool("AveragePool", [](N& n) {
              ints(n, "kernel_shape", {0, 2});
            }); },
       {"node 'n' (AveragePool): attribute 'kernel_shape' [0, 2] holds 0 at position 0"}},
      {"lppool_stride_0",
       [] {
         return pool("LpPool", [](N& n) {
           ints(n, "kernel_shape", {2, 2});
           ints(n, "strides", {0, 2});
         });
       },
       {"node 'n' (LpPool): attribute 'strides' [0, 2] holds 0"}},
      {"range_start_without_data",
       [] { return range(std::nullopt, 10, 1); },
       {"tensor 'R'", "node 'range' (Range)"}},
      {"range_tiny_step",
       [] { return range(0, 1, 1e-30f); },
       {"node 'range' (Range): start 0, limit 1 and delta 1e-30 make 1e+30 elements",
        "more than a tensor can hold"}},
      {"range_delta_0",
       [] { return range(0, 1, 0); },
       {"node 'range' (Range): input 'delta' (delta) is 0"}},
      {"tile_2_60",
       [] {
         ModelBuilder b;
         b.input("X", {16}).ints("repeats", {kTwo60}).output("Y");
         b.node("Tile", {"X", "repeats"}, {"Y"}, "tile");
         return b;
       },
       {"node 'tile' (Tile): dim 0 of input 'X' (16) x repeat 1152921504606846976 overflows 64 "
        "bits"}},
      {"tile_negative",
       [] {
         ModelBuilder b;
         b.input("X", {16}).ints("repeats", {-2}).output("Y");
         b.node("Tile", {"X", "repeats"}, {"Y"}, "tile");
         return b;
       },
       {"node 'tile' (Tile): input 'repeats' (repeats) [-2] holds -2"}},
      {"concat_1024_x_2_54",
       [] {
         ModelBuilder b;
         std::vector<std::string> in;
         for (int i = 0; i < 1024; ++i) {
           in.push_back("X" + std::to_string(i));
           b.input(in.back(), {std::int64_t{1} << 54}, onnx::TensorProto::UINT8);
         }
         b.output("Y", onnx::TensorProto::UINT8);
         ModelBuilder::int_attr(b.node("Concat", in, {"Y"}, "cat"), "axis", 0);
         return b;
       },
       {"node 'cat' (Concat): the output's dim 0 (the sum of the inputs' dims) overflows 64 bits"}},
      {"shape_mul_chain",
       [] {
         return shape_then("Mul", {std::int64_t{1} << 62, 16});
       },
       {"node 'arith' (Mul): 4 Mul 4611686018427387904 overflows 64 bits"}},
      {"shape_add_chain",
       [] {
         return shape_then("Add", {INT64_MAX, 0});
       },
       {"node 'arith' (Add): 4 Add 9223372036854775807 overflows 64 bits"}},
      {"reshape_two_minus_one",
       [] {
         return with_shape_input("Reshape", {-1, -1});
       },
       {"node 'n' (Reshape): shape input 'shape' [-1, -1] has more than one -1"}},
      {"reshape_negative",
       [] {
         return with_shape_input("Reshape", {-4, 8});
       },
       {"node 'n' (Reshape): shape input 'shape' [-4, 8] holds the negative dim -4"}},
      {"reshape_overflowing",
       [] {
         return with_shape_input("Reshape", {kTwo60, 64});
       },
       {"node 'n' (Reshape): shape input 'shape' [1152921504606846976, 64]: the element count "
        "overflows 64 bits"}},
      {"expand_negative",
       [] {
         return with_shape_input("Expand", {4, -8});
       },
       {"node 'n' (Expand): shape input 'shape' [4, -8] holds the negative dim -8"}},
      {"constant_of_shape_overflowing",
       [] {
         ModelBuilder b;
         b.ints("shape", {kTwo60, kTwo60}).input("X", {1}).output("Y");
         b.node("ConstantOfShape", {"shape"}, {"Y"}, "fill");
         return b;
       },
       {"node 'fill' (ConstantOfShape): shape input 'shape'", "overflows 64 bits"}},
      {"constant_without_data",
       [] {
         ModelBuilder b;
         b.input("X", {1}).output("Y");
         onnx::NodeProto& c = b.node("Constant", {}, {"start"}, "c");
         auto* a = c.add_attribute();
         a->set_name("value");
         a->set_type(onnx::AttributeProto::TENSOR);
         a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
         a->mutable_t()->add_dims(1);
         b.node("Relu", {"start"}, {"Y"}, "relu");
         return b;
       },
       {"node 'c' (Constant): attribute 'value' holds no data for its 1 elements"}},
      {"constant_short_data",
       [] {
         ModelBuilder b;
         b.input("X", {1}).output("Y");
         onnx::NodeProto& c = b.node("Constant", {}, {"v"}, "c");
         auto* a = c.add_attribute();
         a->set_name("value");
         a->set_type(onnx::AttributeProto::TENSOR);
         a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
         a->mutable_t()->add_dims(std::int64_t{1} << 40);
         a->mutable_t()->add_int64_data(3);
         b.node("Relu", {"v"}, {"Y"}, "relu");
         return b;
       },
       {"node 'c' (Constant): attribute 'value': dims [1099511627776] hold 1099511627776 "
        "elements, but its data holds 1 values"}},
      {"float_data_2_40",
       [] {
         ModelBuilder b;
         b.input("X", {1}).output("Y");
         b.weight("W", {std::int64_t{1} << 40});
         b.proto().mutable_graph()->mutable_initializer(0)->add_float_data(1.0f);
         b.node("Relu", {"X"}, {"Y"}, "relu");
         return b;
       },
       {"initializer 'W': dims [1099511627776] hold 1099511627776 elements, but its data holds 1 "
        "values"}},
      {"resize_negative_scale",
       [] {
         ModelBuilder b;
         b.input("X", {1, 3, 8, 8}).output("Y");
         auto* roi = b.proto().mutable_graph()->add_initializer();
         roi->set_name("roi");
         roi->set_data_type(onnx::TensorProto::FLOAT);
         roi->add_dims(0);
         auto* scales = b.proto().mutable_graph()->add_initializer();
         scales->set_name("scales");
         scales->set_data_type(onnx::TensorProto::FLOAT);
         scales->add_dims(4);
         for (float f : {1.0f, 1.0f, -2.0f, 2.0f}) scales->add_float_data(f);
         b.node("Resize", {"X", "roi", "scales"}, {"Y"}, "resize");
         return b;
       },
       {"node 'resize' (Resize): input 'scales' (scales) holds -2; a scale must be positive"}},
  };
}

std::string hostile_error_of(const ModelBuilder& b) {
  try {
    b.load();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "(loaded without an error)";
}

TEST(Hostile, EveryModelOfTheCorpusGivesItsOneLineError) {
  for (const Hostile& h : corpus()) {
    SCOPED_TRACE(h.name);
    const std::string msg = hostile_error_of(h.build());
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("test.onnx: ", 0), 0u) << msg;
    for (const std::string& part : h.says) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

// What is valid stays valid: the same operators with their attributes in range load, a
// graph-only weight keeps its bytes; a Concat ONNX would wrap is refused, never a tensor of 0.
TEST(Hostile, TheSameOperatorsInRangeLoad) {
  Graph g = conv([](onnx::NodeProto& n) {
              ints(n, "strides", {2, 2});
              ints(n, "pads", {1, 1, 1, 1});
            }).load();
  EXPECT_EQ(g.tensors[g.find_tensor("Y")].shape, (std::vector<std::int64_t>{1, 4, 4, 4}));
  EXPECT_EQ(g.tensors[g.find_tensor("W")].bytes, 4u * 3 * 3 * 3 * 4);
  Graph depthwise =
      conv([](onnx::NodeProto& n) { ModelBuilder::int_attr(n, "group", 3); }, {6, 1, 3, 3}).load();
  EXPECT_EQ(depthwise.tensors[depthwise.find_tensor("Y")].shape,
            (std::vector<std::int64_t>{1, 6, 6, 6}));
  Graph r = range(0, 10, 2).load();
  EXPECT_EQ(r.tensors[r.find_tensor("Y")].shape, (std::vector<std::int64_t>{5}));
  // ONNX 1.12 sums Concat's dims in 32 bits: past 2^31 - 1 refused, below it exact.
  auto concat = [](int n, std::int64_t dim) {
    ModelBuilder b;
    std::vector<std::string> in;
    for (int i = 0; i < n; ++i) {
      in.push_back("X" + std::to_string(i));
      b.input(in.back(), {dim}, onnx::TensorProto::UINT8);
    }
    b.output("Y", onnx::TensorProto::UINT8);
    ModelBuilder::int_attr(b.node("Concat", in, {"Y"}, "cat"), "axis", 0);
    return b;
  };
  Graph cat = concat(2, std::int64_t{1} << 29).load();
  EXPECT_EQ(cat.tensors[cat.find_tensor("Y")].bytes, std::size_t{1} << 30);
  for (auto [n, dim] :
       {std::pair{2, std::int64_t{1} << 30}, std::pair{1024, std::int64_t{1} << 40}})
    EXPECT_NE(
        hostile_error_of(concat(n, dim))
            .find("node 'cat' (Concat): the output's dim 0 (the sum of the inputs' dims) is " +
                  std::to_string(n * dim) + ", more than ONNX 1.12's shape inference"),
        std::string::npos)
        << n << " x " << dim;
}

// `modelmem plan` on each model of the corpus, written to a file: status 2, nothing on stdout,
// one line on stderr; never a signal.
TEST(Hostile, PlanCommandExitsTwoWithTheLine) {
  const std::string cli = std::string(MODELMEM_BINARY_DIR) + "/modelmem";
  if (!std::filesystem::exists(cli)) GTEST_SKIP() << cli << " is not built";
  const auto dir =
      std::filesystem::temp_directory_path() / ("modelmem_hostile_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const Hostile& h : corpus()) {
    SCOPED_TRACE(h.name);
    const auto model = dir / (h.name + ".onnx");
    std::ofstream(model, std::ios::binary) << h.build().bytes();
    const std::string cmd = cli + " plan " + model.string() + " >" + (dir / "out").string() +
                            " 2>" + (dir / "err").string();
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 2);
    std::ifstream err(dir / "err"), out(dir / "out");
    std::stringstream e, o;
    e << err.rdbuf();
    o << out.rdbuf();
    EXPECT_EQ(o.str(), "");
    const std::string line = e.str();
    EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
    EXPECT_NE(line.find(h.says.front()), std::string::npos) << line;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace modelmem::model
