// The shared best-fit, coalescing free list (see modelmem/core/free_list.hpp).
#include "modelmem/core/free_list.hpp"

#include <iterator>

namespace modelmem::core {

void FreeList::insert(std::size_t offset, std::size_t size) {
  if (spare_offset_.empty()) {
    by_offset_.emplace(offset, size);
  } else {
    auto node = std::move(spare_offset_.back());
    spare_offset_.pop_back();
    node.key() = offset;
    node.mapped() = size;
    by_offset_.insert(std::move(node));
  }
  if (spare_size_.empty()) {
    by_size_.emplace(size, offset);
  } else {
    auto node = std::move(spare_size_.back());
    spare_size_.pop_back();
    node.value() = {size, offset};
    by_size_.insert(std::move(node));
  }
  bytes_ += size;
}

void FreeList::remove(ByOffset::iterator it) {
  spare_size_.push_back(by_size_.extract({it->second, it->first}));
  bytes_ -= it->second;
  spare_offset_.push_back(by_offset_.extract(it));
}

void FreeList::release(std::size_t offset, std::size_t size) {
  if (size == 0) return;
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first == offset + size) {
    size += next->second;
    auto after = std::next(next);
    remove(next);
    next = after;
  }
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      remove(prev);
    }
  }
  insert(offset, size);
}

std::optional<FreeList::Range> FreeList::best_fit(std::size_t size) const {
  auto it = by_size_.lower_bound({size, 0});
  if (it == by_size_.end()) return std::nullopt;
  return Range{it->second, it->first};
}

std::optional<std::size_t> FreeList::allocate(std::size_t size) {
  auto range = best_fit(size);
  if (!range) return std::nullopt;
  take(*range, range->offset, size);
  return range->offset;
}

void FreeList::take(Range range, std::size_t at, std::size_t size) {
  remove(by_offset_.find(range.offset));
  if (at > range.offset) insert(range.offset, at - range.offset);
  if (range.end() - at > size) insert(at + size, range.end() - at - size);
}

void FreeList::erase(std::size_t offset) {
  remove(by_offset_.find(offset));
}

std::optional<FreeList::Range> FreeList::last() const {
  if (by_offset_.empty()) return std::nullopt;
  auto it = std::prev(by_offset_.end());
  return Range{it->first, it->second};
}

}  // namespace modelmem::core
