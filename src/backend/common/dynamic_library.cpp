// streampool: a runtime's shared library opened with dlopen (dynamic_library.hpp).
#include "backend/common/dynamic_library.hpp"

#include <dlfcn.h>

#include <utility>

namespace streampool::detail {

dynamic_library::dynamic_library(dynamic_library&& other) noexcept
    : name_(other.name_), handle_(std::exchange(other.handle_, nullptr)) {}

dynamic_library& dynamic_library::operator=(dynamic_library&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) (void)dlclose(handle_);
    name_ = other.name_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

dynamic_library::~dynamic_library() {
  if (handle_ != nullptr) (void)dlclose(handle_);
}

bool dynamic_library::open(const char* name, std::string& why) {
  if (handle_ != nullptr) (void)dlclose(handle_);
  name_ = name;
  handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (handle_ != nullptr) return true;
  const char* e = dlerror();
  why = std::string("dlopen(") + name + ") failed: " + (e != nullptr ? e : "unknown error");
  return false;
}

void* dynamic_library::find(const char* symbol) const noexcept {
  return handle_ != nullptr ? dlsym(handle_, symbol) : nullptr;
}

}  // namespace streampool::detail
