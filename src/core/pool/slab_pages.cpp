// streampool: slab pages (slab_pages.hpp).
#include "core/pool/slab_pages.hpp"

#include <algorithm>

#include "core/pool/segment.hpp"
#include "streampool/error.hpp"

namespace streampool::detail {
namespace {

std::uint64_t run_mask(std::size_t first, std::size_t n) noexcept {
  const std::uint64_t ones = n >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n) - 1;
  return ones << first;
}

constexpr std::size_t round_up(std::size_t n, std::size_t a) noexcept {
  return (n + a - 1) / a * a;
}

}  // namespace

slab_pages::slab_pages(std::size_t page_bytes) noexcept
    : page_bytes_(page_bytes),
      slots_per_page_(page_bytes % slot_bytes == 0 && page_bytes / slot_bytes <= max_slots
                          ? page_bytes / slot_bytes
                          : 0) {}

std::size_t slab_pages::full_slab_bytes(std::size_t chunk) const noexcept {
  const std::size_t in_page = round_up(std::max(chunk * 4, slot_bytes), slot_bytes);
  if (shares(in_page)) return in_page;
  return round_up(std::max(chunk * 8, std::size_t{2} << 20), page_bytes_);
}

std::size_t slab_pages::smallest_slab_bytes(std::size_t chunk) const noexcept {
  const std::size_t in_page = round_up(chunk, slot_bytes);
  return shares(in_page) ? in_page : round_up(chunk, page_bytes_);
}

std::size_t slab_pages::slab_bytes(std::size_t chunk, std::size_t made) const noexcept {
  const std::size_t full = full_slab_bytes(chunk);
  std::size_t bytes = round_up(chunk, slot_bytes);
  for (std::size_t i = 0; i < made && bytes < full; ++i) bytes *= 2;
  if (bytes >= full) return full;
  // Below a full slab that is its own allocation, a step that does not fit a page is one too.
  // full is then a multiple of the granularity, so the rounding cannot pass it.
  return shares(bytes) ? bytes : round_up(bytes, page_bytes_);
}

void* slab_pages::take(std::size_t bytes) {
  STREAMPOOL_ASSERT(shares(bytes));
  const std::size_t n = bytes / slot_bytes;
  // Newest first: older pages are usually full, and a new page was added for this very request.
  for (std::size_t i = pages_.size(); i-- > 0;) {
    page& pg = pages_[i];
    for (std::size_t first = 0; first + n <= slots_per_page_; ++first) {
      const std::uint64_t m = run_mask(first, n);
      if ((pg.used & m) == 0) {
        pg.used |= m;
        return to_ptr(pg.base + first * slot_bytes);
      }
    }
  }
  return nullptr;
}

void slab_pages::add(void* base) { pages_.push_back({to_addr(base), 0}); }

void* slab_pages::give(const void* p, std::size_t bytes) {
  const std::uintptr_t a = to_addr(p);
  for (auto it = pages_.begin(); it != pages_.end(); ++it) {
    if (a < it->base || a >= it->base + page_bytes_) continue;
    const std::uint64_t m = run_mask((a - it->base) / slot_bytes, bytes / slot_bytes);
    STREAMPOOL_ASSERT((it->used & m) == m);
    it->used &= ~m;
    if (it->used != 0) return nullptr;
    void* base = to_ptr(it->base);
    pages_.erase(it);
    return base;
  }
  STREAMPOOL_ASSERT(false && "slab_pages::give: not a shared page's slab");
  return nullptr;
}

std::string slab_pages::find_broken(
    const std::vector<std::pair<std::uintptr_t, std::size_t>>& slabs, bool exact) const {
  std::vector<std::uint64_t> covered(pages_.size(), 0);
  for (const auto& slab : slabs) {
    const std::uintptr_t base = slab.first;
    const std::size_t bytes = slab.second;
    const auto in = std::find_if(pages_.begin(), pages_.end(), [&](const page& pg) {
      return base >= pg.base && base < pg.base + page_bytes_;
    });
    if (in == pages_.end() || (base - in->base) % slot_bytes != 0 || bytes % slot_bytes != 0 ||
        bytes == 0 || base + bytes > in->base + page_bytes_) {
      return format("slab pages: slab [%#zx, +%zu) is not a run of slots of one listed page",
                    static_cast<std::size_t>(base), bytes);
    }
    const auto i = static_cast<std::size_t>(in - pages_.begin());
    const std::uint64_t m = run_mask((base - in->base) / slot_bytes, bytes / slot_bytes);
    if ((covered[i] & m) != 0) {
      return format("slab pages: slab [%#zx, +%zu) overlaps another slab of page %#zx",
                    static_cast<std::size_t>(base), bytes, static_cast<std::size_t>(in->base));
    }
    covered[i] |= m;
    if ((in->used & m) != m) {
      return format("slab pages: slab [%#zx, +%zu) lies on slots %#llx of page %#zx, used %#llx",
                    static_cast<std::size_t>(base), bytes, static_cast<unsigned long long>(m),
                    static_cast<std::size_t>(in->base), static_cast<unsigned long long>(in->used));
    }
  }
  for (std::size_t i = 0; i < pages_.size(); ++i) {
    if (pages_[i].used == 0) {
      return format("slab pages: page %#zx is listed with no slot used",
                    static_cast<std::size_t>(pages_[i].base));
    }
    if (exact && pages_[i].used != covered[i]) {
      return format("slab pages: page %#zx has slots %#llx used, its slabs cover %#llx",
                    static_cast<std::size_t>(pages_[i].base),
                    static_cast<unsigned long long>(pages_[i].used),
                    static_cast<unsigned long long>(covered[i]));
    }
  }
  return {};
}

std::vector<void*> slab_pages::bases() const {
  std::vector<void*> out;
  out.reserve(pages_.size());
  for (const page& pg : pages_) out.push_back(to_ptr(pg.base));
  return out;
}

}  // namespace streampool::detail
