// Variable sequence lengths (model/buckets.hpp): one plan per bucket, request-length files,
// padding waste.
#include "modelmem/model/buckets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/model/order.hpp"
#include "modelmem/model/solve.hpp"

namespace modelmem::model {

BucketSpec parse_buckets(const std::string& text) {
  BucketSpec spec;
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw InvalidInput(fmt::format("--buckets '{}': expected DIM=V1,V2,...", text));
  spec.dim = text.substr(0, eq);
  std::size_t pos = eq + 1;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v <= 0)
      throw InvalidInput(fmt::format("--buckets '{}': '{}' is not a positive integer", text, item));
    spec.values.push_back(v);
    pos = comma + 1;
  }
  std::sort(spec.values.begin(), spec.values.end());
  spec.values.erase(std::unique(spec.values.begin(), spec.values.end()), spec.values.end());
  return spec;
}

std::vector<BucketPlan> plan_buckets(const std::string& path, const LoadOptions& load,
                                     const BucketSpec& buckets, const LifetimeOptions& lifetimes,
                                     const std::string& solver, const plan::SolveOptions& options,
                                     bool memory_order) {
  std::vector<BucketPlan> out;
  for (std::int64_t v : buckets.values) {
    LoadOptions o = load;
    o.dims[buckets.dim] = v;
    Graph g = load_onnx(path, o);
    LifetimeOptions lo = lifetimes;
    lo.order.clear();  // an order found for one bucket's graph is not reused for another
    if (memory_order) lo.order = model::memory_order(g, lo).order;
    SolvedModel mp = solve_model(g, lo, solver, options);
    out.push_back({v, mp.solve.plan->arena_size, mp.lower_bound, mp.lifetimes.weights_bytes});
  }
  return out;
}

std::vector<std::int64_t> read_lengths(const std::string& path) {
  std::istringstream in(core::read_input_file(path, "request lengths", core::kMaxTextInput));
  std::vector<std::int64_t> out;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    const std::string item(core::trim(line, " \t\r"));
    if (item.empty() || item.front() == '#') continue;
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v <= 0)
      throw InvalidInput(
          fmt::format("{}:{}: '{}' is not a positive request length", path, number, item));
    out.push_back(v);
  }
  if (out.empty()) throw InvalidInput(fmt::format("{}: no request lengths", path));
  return out;
}

PaddingReport padding_waste(const BucketSpec& buckets, const std::vector<std::int64_t>& lengths) {
  PaddingReport r;
  r.per_bucket.assign(buckets.values.size(), 0);
  for (std::int64_t len : lengths) {
    ++r.requests;
    auto it = std::lower_bound(buckets.values.begin(), buckets.values.end(), len);
    if (it == buckets.values.end()) {
      ++r.too_long;
      continue;
    }
    ++r.per_bucket[it - buckets.values.begin()];
    r.tokens += static_cast<std::uint64_t>(len);
    r.padded_tokens += static_cast<std::uint64_t>(*it);
  }
  return r;
}

}  // namespace modelmem::model
