// The bundled models (models/*.onnx) as the plan tests open them, and the options that plan
// tiny.onnx (its one dim n at 1, a short solver limit).
#pragma once

#include <string>

#include "modelmem/model/plan_model.hpp"

namespace modelmem::testing {

inline const std::string kModels = std::string(MODELMEM_SOURCE_DIR) + "/models/";

inline model::PlanOptions tiny_options() {
  model::PlanOptions o;
  o.dims = {{"n", 1}};
  o.time_limit = 0.5;
  return o;
}

}  // namespace modelmem::testing
