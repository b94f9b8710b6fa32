// streampool: the little JSON the library writes and reads back (a snapshot's; snapshot_json.cpp).
//
// writer  appends tokens to a string, putting the commas itself; it trusts its caller to nest
//         objects and arrays properly (a logic error otherwise, asserted).
// value   a parsed document. Integers that fit are kept exact as 64-bit (a snapshot's addresses
//         and byte counts do not survive a double); other numbers as double. Lookups that fail
//         throw logic_error naming the key or the expected type, so a reader's error says what
//         was wrong where.
// parse   reads one document (RFC 8259: objects, arrays, strings with escapes, numbers, true,
//         false, null); throws logic_error naming the byte offset and what it expected there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace streampool::detail::json {

class writer {
 public:
  void begin_object() { open('{'); }
  void end_object() { close('}'); }
  void begin_array() { open('['); }
  void end_array() { close(']'); }
  /// The next member's name (inside an object); its value follows.
  void key(std::string_view name);
  void value(std::uint64_t n);
  void value(bool b);
  void value(std::string_view s);
  void value(const char* s) { value(std::string_view(s)); }
  void null();
  /// key(name) then value(v).
  template <class T>
  void member(std::string_view name, const T& v) {
    key(name);
    value(v);
  }
  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  void open(char c);
  void close(char c);
  void separate();  // a comma before every element but the first of its container

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

class value {
 public:
  enum class kind : std::uint8_t { null, boolean, integer, number, string, array, object };

  [[nodiscard]] kind type() const noexcept { return kind_; }
  /// The member `name` of an object; throws naming `name` when it is missing or this is no object.
  [[nodiscard]] const value& at(std::string_view name) const;
  [[nodiscard]] bool has(std::string_view name) const;
  [[nodiscard]] const std::vector<value>& items(std::string_view what) const;
  [[nodiscard]] std::uint64_t as_uint(std::string_view what) const;
  [[nodiscard]] bool as_bool(std::string_view what) const;
  [[nodiscard]] const std::string& as_string(std::string_view what) const;

 private:
  friend class parser;
  kind kind_ = kind::null;
  bool boolean_ = false;
  bool negative_ = false;  // integer: below zero (as_uint refuses it)
  std::uint64_t integer_ = 0;
  double number_ = 0;
  std::string string_;
  std::vector<value> items_;        // array elements, or object member values
  std::vector<std::string> names_;  // object member names, parallel to items_
};

/// Parses one JSON document; `what` names it in errors ("snapshot JSON").
[[nodiscard]] value parse(std::string_view text, const char* what);

}  // namespace streampool::detail::json
