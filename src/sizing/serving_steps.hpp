// The steps of a served decoder: serve_model (serving.cpp) loads one step graph and sets up its
// lifetimes here; `plan --serve`, the serving need and `place` all take the ServedModel it builds.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "modelmem/model/graph.hpp"
#include "modelmem/model/kv_cache.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/sizing/serving.hpp"

namespace modelmem::sizing {

/// One step of the ONNX decoder at `path` with `dims` bound (model::step_dims), its KV cache
/// inputs and outputs marked so that the arena leaves them out (model::mark_kv_cache).
model::Graph step_graph(const std::string& path, const model::DecoderSignature& sig,
                        const std::map<std::string, std::int64_t>& dims);

/// The lifetimes a step is planned with: activations and weights of o.dtype's float size (2 for
/// fp16/bf16, else 4) and, when o.runtime is "eager", PyTorch eager's: no in-place reuse, inputs
/// held through the step, a Conv's own buffers, a module's arguments held until it returns.
model::LifetimeOptions step_lifetimes(const ServeOptions& o);

}  // namespace modelmem::sizing
