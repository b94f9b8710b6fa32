// streampool: the host backend's happens-before checker (see host.hpp, "Checking mode").
//
// Glossary
//   clock     per queue, the number of commands it has run. A vector clock maps every queue to
//             the last clock of it that this queue is ordered after.
//   granule   256 bytes of device memory, the unit of the shadow state (the pool's minimum block
//             size and alignment, so two live blocks never share a granule).
//   observed  per queue, the highest clock that a host wait or a successful query has seen
//             complete; any command that runs later is ordered after it in real time. A marker
//             seen complete publishes its whole vector clock, not only its own queue's clock:
//             what its queue had waited for is complete too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace streampool::detail {

using vector_clock = std::vector<std::uint64_t>;  // indexed by queue index

void merge_into(vector_clock& into, const vector_clock& from);

class race_checker {
 public:
  static constexpr std::size_t granule = 256;

  void add_segment(const void* p, std::size_t bytes);
  void remove_segment(const void* p, std::size_t bytes);
  /// Forgets the shadow state of [p, p + bytes) (its memory was unmapped or released).
  void forget(const void* p, std::size_t bytes);
  /// The host saw a marker complete whose queue's vector clock was `vc`.
  void observe(const vector_clock& vc);

  /// Checks and records one access by `queue` whose vector clock is `vc` (vc[queue] is the
  /// clock of the command doing the access).
  void access(std::size_t queue, const vector_clock& vc, const void* p, std::size_t bytes,
              bool write);

  void violation(std::string message);
  [[nodiscard]] std::vector<std::string> violations() const;

 private:
  struct use {
    std::uint32_t queue;
    std::uint64_t clock;
  };
  struct shadow {
    use writer{~0u, 0};
    std::vector<use> readers;  // since the last write
  };
  [[nodiscard]] bool ordered(const use& u, std::size_t queue, const vector_clock& vc) const;
  void forget_locked(std::uintptr_t start, std::size_t bytes);

  mutable std::mutex mu_;                              // guards everything below
  std::map<std::uintptr_t, std::size_t> segments_;     // start -> bytes
  std::unordered_map<std::uintptr_t, shadow> shadow_;  // granule index -> state
  std::vector<std::uint64_t> observed_;
  std::vector<std::string> violations_;
};

}  // namespace streampool::detail
