// streampool: a runtime's shared library opened with dlopen, and its function table bound from it.
//
// The library never links a GPU runtime, so it builds and loads on machines without one; each
// runtime is opened at run time and its entry points are looked up into a table of function
// pointers, once per process.
//
// Glossary
//   symbol list  one per runtime: each entry names an exported function, the table slot its
//                address goes to, and whether the runtime is unusable without it (required) or
//                merely lacks a feature (optional: the slot stays null). Binding walks the list in
//                order and stops at the first required symbol that is missing.
//   loaded once  the table, the library and the reason for a failure, made on the first use and
//                never destroyed (load_once): a runtime must stay mapped until process exit,
//                because memory, queues and events may be released from static destructors after
//                any point at which it could be closed.
#pragma once

#include <span>
#include <string>
#include <type_traits>

namespace streampool::detail {

/// A library opened with dlopen(RTLD_NOW | RTLD_LOCAL), closed when the object goes. RTLD_LOCAL
/// keeps its symbols out of the global namespace, and a program that links the library itself
/// gets the same copy, loaded once.
class dynamic_library {
 public:
  dynamic_library() noexcept = default;
  dynamic_library(dynamic_library&& other) noexcept;
  dynamic_library& operator=(dynamic_library&& other) noexcept;
  dynamic_library(const dynamic_library&) = delete;
  dynamic_library& operator=(const dynamic_library&) = delete;
  ~dynamic_library();

  /// Opens `name` (a string that outlives the object), closing what the object held; false when
  /// dlopen fails, and then `why` says "dlopen(<name>) failed: <dlerror()>".
  bool open(const char* name, std::string& why);
  /// The address `symbol` has in the library; nullptr when the library does not export it.
  [[nodiscard]] void* find(const char* symbol) const noexcept;
  [[nodiscard]] const char* name() const noexcept { return name_; }

 private:
  const char* name_ = "";
  void* handle_ = nullptr;
};

/// One entry of a runtime's symbol list (see the glossary).
template <class Table>
struct symbol {
  const char* name;                                     ///< as exported: "cuMemAlloc_v2"
  void (*store)(Table& table, void* address) noexcept;  ///< sets the entry's slot
  bool required;
};

namespace symbol_slot {
template <class Slot>
struct traits;
template <class Table, class Function>
struct traits<Function Table::*> {
  using table = Table;
  using function = Function;
};

template <auto Slot>
using table_of = typename traits<decltype(Slot)>::table;

template <auto Slot>
void store(table_of<Slot>& table, void* address) noexcept {
  // dlsym returns an object pointer; POSIX makes its conversion to a function pointer valid.
  table.*Slot = reinterpret_cast<typename traits<decltype(Slot)>::function>(address);
}
}  // namespace symbol_slot

/// The entry of `name`, a symbol the runtime cannot do without, stored in `Slot`
/// (&table::member, a function pointer).
template <auto Slot>
constexpr symbol<symbol_slot::table_of<Slot>> required_symbol(const char* name) noexcept {
  return {name, &symbol_slot::store<Slot>, true};
}

/// The entry of `name`, a symbol of a feature the runtime may lack, stored in `Slot` (null when
/// the library does not export it).
template <auto Slot>
constexpr symbol<symbol_slot::table_of<Slot>> optional_symbol(const char* name) noexcept {
  return {name, &symbol_slot::store<Slot>, false};
}

/// Fills `table` from `library` by walking `symbols` in order. False at the first required symbol
/// the library lacks, with `why` = "<library> has no symbol <name>".
template <class Table>
bool bind_symbols(const dynamic_library& library, Table& table,
                  std::type_identity_t<std::span<const symbol<Table>>> symbols, std::string& why) {
  for (const symbol<Table>& s : symbols) {
    void* address = library.find(s.name);
    if (address == nullptr && s.required) {
      why = std::string(library.name()) + " has no symbol " + s.name;
      return false;
    }
    s.store(table, address);
  }
  return true;
}

/// What loading a runtime gave (see "loaded once" in the glossary).
template <class Table>
struct loaded_runtime {
  dynamic_library library;
  Table table{};
  bool ok = false;  ///< the table is bound and the runtime initialised
  std::string why;  ///< when not ok: why
  long code = 0;  ///< when not ok: the runtime's result of the failing call; 0 when dlopen or dlsym
};

/// The process's table of runtime `Table`, made by `Load` on the first call (thread-safe) and never
/// destroyed. nullptr when it could not be loaded; then `*why` (if given) says why, and `*code`
/// (if given) holds loaded_runtime::code. `what` names the runtime in the one message of its own
/// ("out of memory while loading <what>").
template <class Table, loaded_runtime<Table> (*Load)()>
const Table* load_once(std::string* why, long* code, const char* what) noexcept {
  static const loaded_runtime<Table>* const l = []() -> const loaded_runtime<Table>* {
    try {
      return new loaded_runtime<Table>(Load());  // deliberate leak: see the glossary
    } catch (...) {
      return nullptr;
    }
  }();
  if (l != nullptr && l->ok) return &l->table;
  if (code != nullptr) *code = l != nullptr ? l->code : 0;
  if (why != nullptr) {
    try {
      *why = l != nullptr ? l->why : std::string("out of memory while loading ") + what;
    } catch (...) {  // the caller only loses the reason
    }
  }
  return nullptr;
}

}  // namespace streampool::detail
