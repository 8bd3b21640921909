// libFuzzer target for the ONNX loader: any bytes must either load into a consistent graph whose
// lifetimes build and validate-able problem passes check_problem, or raise a modelmem error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "modelmem/core/error.hpp"
#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/plan/problem.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace modelmem;
  try {
    model::Graph g = model::load_onnx_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.onnx", "");
    model::Lifetimes lt = model::build_lifetimes(g);
    if (!lt.problem.buffers.empty()) plan::check_problem(lt.problem);
    (void)plan::lower_bound(lt.problem);
  } catch (const Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
