// streampool: the little JSON the library writes and reads back (a snapshot's; snapshot_json.cpp).
//
// writer  appends tokens to a string, putting the commas itself; it trusts its caller to nest
//         objects and arrays properly (a logic error otherwise, asserted). Strings are written as
//         UTF-8, each byte that is not part of UTF-8 as U+FFFD, so what it writes always reads.
// reader  reads one document in place, in the order it is written, building no tree: its caller
//         says what comes next (an object's members, an array's items, an unsigned integer...)
//         and keeps what it wants, so the reader's memory is the caller's (a tree of nodes would
//         cost many times the text: docs/performance.md, "Reading snapshots"). Before any
//         of it is read, the whole text is checked to be one JSON document (RFC 8259) of UTF-8
//         nested at most 64 deep, so that text which is not JSON, or is cut short, is refused as
//         that, at its byte offset, whatever it holds. Every later error names the JSON path of
//         the value ("ranges[3].blocks[7].size") and the byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace streampool::detail::json {

/// The length of the UTF-8 sequence at s[i] (RFC 3629: no overlong form, no surrogate, nothing
/// above U+10FFFF), 0 when the bytes there are not one.
[[nodiscard]] constexpr std::size_t utf8_length(std::string_view s, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) -> unsigned {
    return k < s.size() ? static_cast<unsigned char>(s[k]) : 0U;
  };
  const auto tail = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return byte(k) >= lo && byte(k) <= hi;
  };
  const unsigned c = byte(i);
  if (i < s.size() && c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return tail(i + 1) ? 2 : 0;
  if (c == 0xE0) return tail(i + 1, 0xA0) && tail(i + 2) ? 3 : 0;
  if (c == 0xED) return tail(i + 1, 0x80, 0x9F) && tail(i + 2) ? 3 : 0;  // no surrogates
  if (c >= 0xE1 && c <= 0xEF) return tail(i + 1) && tail(i + 2) ? 3 : 0;
  if (c == 0xF0) return tail(i + 1, 0x90) && tail(i + 2) && tail(i + 3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return tail(i + 1) && tail(i + 2) && tail(i + 3) ? 4 : 0;
  if (c == 0xF4) return tail(i + 1, 0x80, 0x8F) && tail(i + 2) && tail(i + 3) ? 4 : 0;
  return 0;
}

/// `s` as errors quote it: at most its first 40 bytes, each control character and byte that is
/// not part of UTF-8 written as \xHH.
[[nodiscard]] std::string printable(std::string_view s);

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

class reader {
 public:
  /// Checks that `text` is one JSON document (see above); `what` names it in errors ("snapshot
  /// JSON"). The text must outlive the reader.
  /// @throws logic_error "<what>: at byte N: ..." naming what was expected there, or that the text
  ///         ends early
  reader(std::string_view text, const char* what);

  /// The value here is an object: its members follow, through next_member().
  void begin_object();
  /// Moves to the innermost object's next member, whose value is next (its name: name(); the path
  /// ends in it); false at the object's end (the path is the object's again).
  bool next_member();
  [[nodiscard]] const std::string& name() const;
  /// The value here is an array: its items follow, through next_item().
  void begin_array();
  /// Moves to the innermost array's next item (the path ends in its index); false at its end.
  bool next_item();
  /// The value here, which must be an integer from 0 to 2^64 - 1 written without a fraction or an
  /// exponent.
  std::uint64_t read_uint();
  bool read_bool();
  /// The value here, which must be a string with no NUL character (a C caller would cut it).
  std::string read_string();

  /// The path of the value being read ("ranges[3].blocks[7].size"; empty at the top).
  [[nodiscard]] std::string path() const;
  /// @throws logic_error "<what>: <path>: <why> (at byte N)"
  [[noreturn]] void fail(std::string_view why) const;
  /// For a check made after reading: @throws logic_error "<what>: <path>: <why>"
  [[noreturn]] void fail_at(std::string_view path, std::string_view why) const;

 private:
  struct level {
    bool array = false;
    bool first = true;      // no member or item yet
    std::size_t index = 0;  // arrays: the item's
    std::string name;       // objects: the member's
  };

  void skip_space();
  /// What the value here is, for "expected ..., found ..." errors.
  [[nodiscard]] std::string found() const;
  [[noreturn]] void expected(const char* what) const;

  std::string_view text_;
  const char* what_;
  std::size_t pos_ = 0;
  std::vector<level> levels_;
};

}  // namespace streampool::detail::json
