// What snapshot.cpp's reader and snapshot_frames.cpp share.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "modelmem/trace/snapshot.hpp"

namespace modelmem::trace::detail {

/// Gives a pool its kind ("KV cache" when KV-cache sites hold most of its allocated bytes,
/// else "default" for the default pool, else "private") and the site holding most of its bytes.
void name_pool(SnapshotPool& pool, bool default_pool,
               const std::map<std::string, std::size_t>& site_bytes);

}  // namespace modelmem::trace::detail
