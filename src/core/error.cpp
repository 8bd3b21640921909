// The one line an out-of-memory error carries (core/error.hpp).
#include "modelmem/core/error.hpp"

namespace modelmem {

std::string describe(const OomInfo& info) {
  std::string s = "out of memory";
  if (!info.where.empty()) s += " in " + info.where;
  s += ": requested " + format_bytes(info.requested);
  s += ", device free " + format_bytes(info.device_free);
  s += ", reserved " + format_bytes(info.reserved);
  s += ", allocated " + format_bytes(info.allocated);
  s += ", largest free block " + format_bytes(info.largest_free_block);
  if (info.quota) s += ", quota " + format_bytes(*info.quota);
  return s;
}

}  // namespace modelmem
