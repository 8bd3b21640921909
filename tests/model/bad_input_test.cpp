// Every kind of bad model gives InvalidInput (CLI exit code 2) with a message naming the file
// and the node or tensor, never a crash.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "builder.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::model {
namespace {

using testing::ModelBuilder;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidInput thrown";
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

ModelBuilder valid() {
  ModelBuilder b;
  b.input("X", {1, 16}).weight("W", {16, 16}).output("Y");
  b.node("MatMul", {"X", "W"}, {"A"}, "mm");
  b.node("Relu", {"A"}, {"Y"}, "relu");
  return b;
}

std::filesystem::path temp_file(const std::string& name, const std::string& bytes) {
  auto dir = std::filesystem::temp_directory_path() /
             ("modelmem_model_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(BadInput, ValidModelLoads) {
  EXPECT_EQ(valid().load().nodes.size(), 2u);
}

TEST(BadInput, NotOnnx) {
  auto path = temp_file("text.onnx", "this is a text file, not a model\n");
  auto msg = error_of([&] { load_onnx(path.string()); });
  EXPECT_HAS(msg, path.string());
  EXPECT_HAS(msg, "not an ONNX model");
}

TEST(BadInput, MissingFile) {
  EXPECT_HAS(error_of([] { load_onnx("/nonexistent/model.onnx"); }),
             "/nonexistent/model.onnx: cannot open");
}

TEST(BadInput, TruncatedAtEveryLength) {
  std::string bytes = valid().bytes();
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    try {
      Graph g = load_onnx_bytes(std::string_view(bytes).substr(0, len), "cut.onnx", "");
      // Protobuf may end cleanly at a field boundary; what loads must still be consistent.
      EXPECT_LE(g.nodes.size(), 2u);
    } catch (const InvalidInput& e) {
      EXPECT_HAS(std::string(e.what()), "cut.onnx");
    }
  }
  auto msg = error_of([&] { load_onnx_bytes(bytes.substr(0, bytes.size() / 2), "cut.onnx", ""); });
  EXPECT_HAS(msg, "cut.onnx");
}

TEST(BadInput, Cycle) {
  ModelBuilder b;
  b.input("X", {1, 16}).output("Y");
  b.node("Add", {"X", "C"}, {"A"}, "first");
  b.node("Relu", {"A"}, {"B"}, "second");
  b.node("Relu", {"B"}, {"C"}, "third");
  b.node("Relu", {"A"}, {"Y"}, "out");
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "test.onnx");
  EXPECT_HAS(msg, "cycle");
  EXPECT_HAS(msg, "node 'first' (Add)");
  EXPECT_HAS(msg, "node 'third' (Relu)");
}

TEST(BadInput, MissingInput) {
  ModelBuilder b = valid();
  b.node("Add", {"Y", "nowhere"}, {"Z"}, "adder");
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "node 'adder' (Add)");
  EXPECT_HAS(msg, "input 'nowhere' is not produced");
}

TEST(BadInput, UnknownOperator) {
  ModelBuilder b = valid();
  b.node("FrobnicateTensor", {"Y"}, {"Z"}, "frob");
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "test.onnx");
  EXPECT_HAS(msg, "node 'frob' (FrobnicateTensor)");
  EXPECT_HAS(msg, "unknown operator");
}

TEST(BadInput, OperatorNewerThanTheOpset) {
  ModelBuilder b(9);  // Gelu does not exist in opset 9 (nor in ONNX 1.12 at all)
  b.input("X", {1, 16}).output("Y");
  b.node("Gelu", {"X"}, {"Y"}, "gelu");
  EXPECT_HAS(error_of([&] { b.load(); }), "node 'gelu' (Gelu)");
}

TEST(BadInput, OverflowingDims) {
  ModelBuilder b;
  b.input("X", {std::int64_t{1} << 40, std::int64_t{1} << 30}).output("Y");
  b.node("Relu", {"X"}, {"Y"}, "relu");
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "test.onnx");
  EXPECT_HAS(msg, "'X'");
  EXPECT_HAS(msg, "overflows");
}

TEST(BadInput, OverflowFromBoundDim) {
  ModelBuilder b;
  b.input("X", {std::string("batch"), std::int64_t{1} << 40}).output("Y");
  b.node("Relu", {"X"}, {"R"}, "relu");
  b.node("Sigmoid", {"R"}, {"Y"}, "sig");
  auto msg = error_of([&] { b.load({{{"batch", std::int64_t{1} << 30}}}); });
  EXPECT_HAS(msg, "overflows");
}

TEST(BadInput, OverflowingWeight) {
  ModelBuilder b = valid();
  b.weight("huge", {std::int64_t{1} << 62, 8});
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "'huge'");
  EXPECT_HAS(msg, "overflows");
}

TEST(BadInput, UnboundAndUnknownDims) {
  ModelBuilder b;
  b.input("X", {std::string("batch"), 16}).output("Y");
  b.node("Relu", {"X"}, {"Y"});
  EXPECT_HAS(error_of([&] { b.load(); }), "dim 0 'batch' is not bound (use --dim batch=VALUE)");
  EXPECT_HAS(error_of([&] { b.load({{{"batch", 1}, {"seq", 8}}}); }), "--dim seq");
  EXPECT_EQ(b.load({{{"batch", 3}}}).tensors[b.load({{{"batch", 3}}}).find_tensor("Y")].shape,
            (std::vector<std::int64_t>{3, 16}));
}

// Everything wrong with the dims is said at once: a decoder with three unbound dims and a typo
// took three runs, and the typo was never named.
TEST(BadInput, EveryUnboundDimAndEveryUnknownDimInOneError) {
  ModelBuilder b;
  b.input("ids", {std::string("batch"), std::string("seq")})
      .input("mask", {std::string("batch"), std::string("total")})
      .output("Y");
  b.node("Relu", {"ids"}, {"Y"});
  std::string msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg,
             "3 dims are not bound: 'batch' (graph input 'ids': dim 0), 'seq' (graph input "
             "'ids': dim 1), 'total' (graph input 'mask': dim 1) (use --dim batch=VALUE "
             "--dim seq=VALUE --dim total=VALUE)");
  msg = error_of([&] { b.load({{{"btach", 1}, {"seq", 8}}}); });
  EXPECT_HAS(msg, "2 dims are not bound: 'batch' (graph input 'ids': dim 0), 'total'");
  EXPECT_HAS(msg,
             "; --dim btach: the model's inputs have no dim named 'btach' (they have: batch, "
             "seq, total)");
  msg = error_of([&] { b.load({{{"batch", 1}, {"seq", 8}, {"total", 8}, {"sq", 2}, {"x", 1}}}); });
  EXPECT_EQ(msg.find("not bound"), std::string::npos) << msg;
  EXPECT_HAS(msg, "--dim sq, --dim x: the model's inputs have no dim named 'sq', 'x'");
}

TEST(BadInput, ShapeThatCannotSettle) {
  ModelBuilder b;
  b.input("X", {2, 16}).input("S", {2}, onnx::TensorProto::INT64).output("Y");
  b.node("Reshape", {"X", "S"}, {"Y"}, "dynamic_reshape");  // target known only at run time
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "tensor 'Y'");
  EXPECT_HAS(msg, "node 'dynamic_reshape' (Reshape)");
}

TEST(BadInput, InconsistentShapes) {
  ModelBuilder b;
  b.input("X", {1, 16}).weight("W", {8, 4}).output("Y");
  b.node("MatMul", {"X", "W"}, {"Y"}, "bad_mm");
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "shape inference failed");
  EXPECT_HAS(msg, "bad_mm");
}

TEST(BadInput, DuplicateProducer) {
  ModelBuilder b = valid();
  b.node("Relu", {"A"}, {"Y"}, "again");
  EXPECT_HAS(error_of([&] { b.load(); }), "output 'Y' is already produced");
}

TEST(ExternalData, FoundChecksLengthAndStaysInFolder) {
  ModelBuilder b = valid();
  auto* w = b.proto().mutable_graph()->mutable_initializer(0);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  auto model = temp_file("ext.onnx", b.bytes());
  auto dir = model.parent_path();
  std::filesystem::remove(dir / "weights.bin");
  EXPECT_HAS(error_of([&] { load_onnx(model.string()); }), "not found");
  temp_file("weights.bin", std::string(16 * 16 * 4 - 1, '\0'));
  EXPECT_HAS(error_of([&] { load_onnx(model.string()); }), "holds 1023 bytes");
  temp_file("weights.bin", std::string(16 * 16 * 4, '\0'));
  Graph g = load_onnx(model.string());
  EXPECT_EQ(g.tensors[g.find_tensor("W")].bytes, 1024u);
  loc->set_value("../escape.bin");
  auto model2 = temp_file("ext2.onnx", b.bytes());
  EXPECT_HAS(error_of([&] { load_onnx(model2.string()); }), "leaves the model's folder");
}

TEST(EmbeddedData, WeightsWithDataLoad) {
  ModelBuilder b = valid();
  auto* w = b.proto().mutable_graph()->mutable_initializer(0);
  w->set_raw_data(std::string(16 * 16 * 4, '\1'));
  Graph g = b.load();
  EXPECT_EQ(g.tensors[g.find_tensor("W")].bytes, 1024u);
  EXPECT_EQ(g.tensors[g.find_tensor("W")].kind, TensorKind::kWeight);
}

// Dims that claim more than the data hold: refused, not counted as weights that are not there.
TEST(EmbeddedData, DimsLargerThanTheDataAreRefused) {
  ModelBuilder b = valid();
  b.weight("liar", {std::int64_t{1} << 40});
  b.proto().mutable_graph()->mutable_initializer(1)->set_raw_data(std::string(16, '\1'));
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "initializer 'liar'");
  EXPECT_HAS(msg, "holds 16 bytes");
  ModelBuilder typed = valid();
  typed.weight("few", {1000});
  for (int i = 0; i < 4; ++i)
    typed.proto().mutable_graph()->mutable_initializer(1)->add_float_data(1.0f);
  msg = error_of([&] { typed.load(); });
  EXPECT_HAS(msg, "initializer 'few'");
  EXPECT_HAS(msg, "holds 4 values");
}

// ONNX's shape inference adds Concat's dims in int64 and wraps: 64 x 2^58 gives 0.
TEST(BadInput, ConcatWhoseOutputDimOverflows) {
  ModelBuilder b;
  std::vector<std::string> inputs;
  for (int i = 0; i < 64; ++i) {
    inputs.push_back("X" + std::to_string(i));
    b.input(inputs.back(), {std::int64_t{1} << 58}, onnx::TensorProto::UINT8);
  }
  b.output("Y", onnx::TensorProto::UINT8);
  ModelBuilder::int_attr(b.node("Concat", inputs, {"Y"}, "cat"), "axis", 0);
  auto msg = error_of([&] { b.load(); });
  EXPECT_HAS(msg, "'cat' (Concat)");
  EXPECT_HAS(msg, "overflows");
}

}  // namespace
}  // namespace modelmem::model
