// replay: counts as people read them, for the progress line and the page's subtitle.
#pragma once

#include <cstddef>
#include <string>

namespace streampool::replay {

/// 17779 -> "17,779".
inline std::string with_commas(std::size_t n) {
  std::string digits = std::to_string(n);
  for (std::size_t at = digits.size(); at > 3; at -= 3) digits.insert(at - 3, ",");
  return digits;
}

}  // namespace streampool::replay
