#include "allocation_registry.hpp"

#include <algorithm>

namespace streampool::c_api {

void allocation::add_user_locked(const std::shared_ptr<timeline>& line) {
  std::erase_if(users, [](const std::shared_ptr<timeline>& l) { return l->retired(); });
  if (std::find(users.begin(), users.end(), line) == users.end()) users.push_back(line);
}

std::vector<token> allocation::pending_locked(const timeline* except) const {
  std::vector<token> tokens;
  for (const auto& l : users) {
    if (l.get() == except || l->retired()) continue;
    // current() covers all work submitted so far: what the free (or the next user) must follow.
    tokens.push_back(token{l, l->current()});
  }
  return tokens;
}

allocation_registry& allocation_registry::instance() {
  // Deliberately leaked: finalisers (a language runtime's, or atexit handlers) may free memory
  // during static destruction.
  static auto* r = new allocation_registry;
  return *r;
}

void allocation_registry::insert(std::shared_ptr<allocation> a) {
  std::lock_guard lock(mu_);
  const auto key = reinterpret_cast<std::uintptr_t>(a->ptr);
  live_[key] = std::move(a);
}

std::shared_ptr<allocation> allocation_registry::find(const void* p) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<std::uintptr_t>(p));
  return it == live_.end() ? nullptr : it->second;
}

std::shared_ptr<allocation> allocation_registry::containing(const void* p) const {
  const auto key = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mu_);
  auto it = live_.upper_bound(key);
  if (it == live_.begin()) return nullptr;
  --it;
  const allocation& a = *it->second;
  return key < it->first + a.size ? it->second : nullptr;
}

}  // namespace streampool::c_api
