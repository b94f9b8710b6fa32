// streampool: each thread's live cells (live_cell.hpp), found by pool id, folded into their pools
// when the thread exits.
#include "core/pool/live_cell.hpp"

#include <vector>

#include "core/pool/pool_state.hpp"

namespace streampool::detail {
namespace {

// The calling thread's cells, one per pool it counted on. The pool ids are never reused, so an
// entry of a pool that is gone can never be taken for another's.
class thread_cells {
 public:
  thread_cells() = default;
  thread_cells(const thread_cells&) = delete;
  thread_cells& operator=(const thread_cells&) = delete;
  ~thread_cells();

  live_cell& find(pool_state& pool) {
    if (pool.id() == last_id_) [[likely]]
      return *last_;
    return find_slow(pool);
  }

 private:
  struct entry {
    std::uint64_t pool_id;
    std::weak_ptr<pool_state> pool;
    std::shared_ptr<live_cell> cell;
  };
  live_cell& find_slow(pool_state& pool);

 public:
  /// The shared owner of the cell the last find() returned.
  [[nodiscard]] std::shared_ptr<live_cell> last_shared() const {
    for (const entry& e : entries_)
      if (e.pool_id == last_id_) return e.cell;
    return nullptr;
  }

 private:
  std::uint64_t last_id_ = 0;  // pool ids start at 1
  live_cell* last_ = nullptr;
  std::vector<entry> entries_;
};

// Set once the thread's registry is destroyed (thread exit): later calls of the thread, from
// other thread_local destructors, count on the pool's counter directly. Trivially destructible,
// so it can be read after that.
thread_local bool cells_destroyed = false;
thread_local thread_cells cells;

live_cell& thread_cells::find_slow(pool_state& pool) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->pool_id == pool.id()) {
      last_id_ = it->pool_id;
      last_ = it->cell.get();
      return *last_;
    }
    // A pool that is gone: its cell is only ours now.
    it = it->pool.expired() ? entries_.erase(it) : it + 1;
  }
  auto cell = std::make_shared<live_cell>();
  pool.register_cell(cell);
  entries_.push_back({pool.id(), pool.weak_from_this(), cell});
  last_id_ = pool.id();
  last_ = cell.get();
  return *last_;
}

thread_cells::~thread_cells() {
  cells_destroyed = true;
  for (entry& e : entries_) {
    // lock() may make this the pool's last owner, which then ends here: no lock is held.
    if (const std::shared_ptr<pool_state> p = e.pool.lock()) p->fold_thread_cell(*e.cell);
  }
}

}  // namespace

live_cell* thread_live_cell(pool_state& pool) {
  if (cells_destroyed) [[unlikely]]
    return nullptr;
  return &cells.find(pool);
}

std::shared_ptr<live_cell> thread_live_cell_shared(pool_state& pool) {
  if (cells_destroyed) [[unlikely]] {
    // An exiting thread makes a stream cache: the cell is the cache's alone, folded already as
    // far as the thread goes, and counted by statistics() while the registry holds it.
    auto cell = std::make_shared<live_cell>();
    cell->folded.store(true, std::memory_order_relaxed);
    pool.register_cell(cell);
    return cell;
  }
  (void)cells.find(pool);
  return cells.last_shared();
}

}  // namespace streampool::detail
