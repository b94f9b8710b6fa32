// streampool: the little JSON writer and reader (json.hpp).
#include "json.hpp"

#include <cstdio>

#include "streampool/error.hpp"

namespace streampool::detail::json {

// ---- writer ------------------------------------------------------------------------------------

void writer::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (first_.empty()) return;
  if (!first_.back()) out_ += ',';
  first_.back() = false;
}

void writer::open(char c) {
  separate();
  out_ += c;
  first_.push_back(true);
}

void writer::close(char c) {
  STREAMPOOL_ASSERT_INTERNAL(!first_.empty() && !after_key_);
  first_.pop_back();
  out_ += c;
}

void writer::key(std::string_view name) {
  value(name);
  out_ += ':';
  after_key_ = true;
}

void writer::value(std::uint64_t n) {
  separate();
  out_ += std::to_string(n);
}

void writer::value(bool b) {
  separate();
  out_ += b ? "true" : "false";
}

void writer::null() {
  separate();
  out_ += "null";
}

void writer::value(std::string_view s) {
  separate();
  out_ += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\t':
        out_ += "\\t";
        break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out_ += esc;
        } else if (const std::size_t n = utf8_length(s, i); n > 1) {
          out_.append(s.substr(i, n));  // UTF-8 passes through
          i += n;
          continue;
        } else if (n == 0) {
          out_ += "\xEF\xBF\xBD";  // U+FFFD for a byte that is not part of UTF-8
        } else {
          out_ += static_cast<char>(c);
        }
    }
    ++i;
  }
  out_ += '"';
}

// ---- the syntax check --------------------------------------------------------------------------

namespace {

constexpr int max_depth = 64;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// Recursive descent over the whole text, keeping nothing: depth-limited, so hostile input cannot
/// overflow the stack.
class syntax {
 public:
  syntax(std::string_view text, const char* what) : text_(text), what_(what) {}

  void document() {
    value(0);
    skip_space();
    if (pos_ != text_.size()) fail("the end of the document");
  }

 private:
  [[noreturn]] void fail(const char* expected) const {
    if (pos_ >= text_.size()) {
      throw logic_error(format("%s: at byte %zu: the text ends early (truncated?): expected %s",
                               what_, pos_, expected));
    }
    throw logic_error(format("%s: at byte %zu: expected %s", what_, pos_, expected));
  }
  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }
  [[nodiscard]] char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* expected) {
    if (!eat(c)) fail(expected);
  }
  bool word(std::string_view w) {
    if (text_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  void value(int depth) {
    if (depth > max_depth) fail("less nesting (64 levels at most)");
    skip_space();
    const char c = peek();
    if (c == '{') {
      ++pos_;
      if (eat('}')) return;
      do {
        skip_space();
        if (peek() != '"') fail("a member name");
        string();
        expect(':', "':' after a member name");
        value(depth + 1);
      } while (eat(','));
      expect('}', "',' or '}' in an object");
    } else if (c == '[') {
      ++pos_;
      if (eat(']')) return;
      do {
        value(depth + 1);
      } while (eat(','));
      expect(']', "',' or ']' in an array");
    } else if (c == '"') {
      string();
    } else if (!word("true") && !word("false") && !word("null")) {
      if (c != '-' && !is_digit(c)) fail("a value");
      number();
    }
  }

  void string() {
    ++pos_;  // the opening quote
    for (;;) {
      if (pos_ >= text_.size()) fail("the end of a string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return;
      }
      if (c < 0x20) fail("no control character in a string");
      if (c == '\\') {
        ++pos_;
        escape();
        continue;
      }
      const std::size_t n = utf8_length(text_, pos_);
      if (n == 0) fail("UTF-8 (a byte here is not part of it)");
      pos_ += n;
    }
  }

  void escape() {
    const char e = peek();
    if (e == 'u') {
      ++pos_;
      const unsigned u = hex4();
      if (u >= 0xDC00 && u <= 0xDFFF) fail("a high surrogate before a low one");
      if (u >= 0xD800 && u <= 0xDBFF) {
        if (text_.substr(pos_, 2) != "\\u") fail("a low surrogate after a high one");
        pos_ += 2;
        const unsigned low = hex4();
        if (low < 0xDC00 || low > 0xDFFF) fail("a low surrogate after a high one");
      }
      return;
    }
    if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos)
      fail(R"(an escape (\" \\ \/ \b \f \n \r \t \uXXXX))");
    ++pos_;
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char h = peek();
      u <<= 4;
      if (is_digit(h))
        u |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        u |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        u |= static_cast<unsigned>(h - 'A' + 10);
      else
        fail("four hex digits");
    }
    return u;
  }

  void number() {
    if (peek() == '-') ++pos_;
    if (peek() == '0' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1]))
      fail("no leading zero");
    if (!digits()) fail("a digit");
    if (peek() == '.') {
      ++pos_;
      if (!digits()) fail("a digit after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digits()) fail("a digit in the exponent");
    }
  }

  bool digits() {
    const std::size_t from = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    return pos_ != from;
  }

  std::string_view text_;
  const char* what_;
  std::size_t pos_ = 0;
};

}  // namespace

// ---- reader ------------------------------------------------------------------------------------

std::string printable(std::string_view s) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size() && i < 40) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = utf8_length(s, i);
    if (c < 0x20 || c == 0x7F || n == 0) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

reader::reader(std::string_view text, const char* what) : text_(text), what_(what) {
  syntax(text, what).document();
}

void reader::skip_space() {
  while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
}

std::string reader::path() const {
  std::string out;
  for (const level& l : levels_) {
    if (l.first) break;  // a container entered, nothing of it read yet: the path is its own
    if (l.array) {
      out += "[" + std::to_string(l.index) + "]";
    } else {
      if (!out.empty()) out += '.';
      out += printable(l.name);
    }
  }
  return out;
}

void reader::fail(std::string_view why) const {
  const std::string where = path();
  throw logic_error(format("%s: %s%s%.*s (at byte %zu)", what_, where.c_str(),
                           where.empty() ? "" : ": ", static_cast<int>(why.size()), why.data(),
                           pos_));
}

void reader::fail_at(std::string_view where, std::string_view why) const {
  throw logic_error(format("%s: %.*s%s%.*s", what_, static_cast<int>(where.size()), where.data(),
                           where.empty() ? "" : ": ", static_cast<int>(why.size()), why.data()));
}

std::string reader::found() const {
  const char c = pos_ < text_.size() ? text_[pos_] : '\0';
  switch (c) {
    case '{':
      return "an object";
    case '[':
      return "an array";
    case '"':
      return "a string";
    case 't':
    case 'f':
      return "a boolean";
    case 'n':
      return "null";
    case '-':
      return "a negative number";
    default:
      break;
  }
  // A number that starts with a digit (the syntax is checked).
  std::size_t end = pos_;
  bool fits = true;
  for (std::uint64_t v = 0; end < text_.size() && is_digit(text_[end]); ++end) {
    const auto digit = static_cast<std::uint64_t>(text_[end] - '0');
    fits = fits && v <= (UINT64_MAX - digit) / 10;
    v = v * 10 + digit;
  }
  if (end < text_.size() && (text_[end] == '.' || text_[end] == 'e' || text_[end] == 'E'))
    return "a number with a fraction or an exponent";
  return fits ? "a number" : "a number above 2^64-1";
}

void reader::expected(const char* what) const {
  fail(format("expected %s, found %s", what, found().c_str()));
}

void reader::begin_object() {
  skip_space();
  if (pos_ >= text_.size() || text_[pos_] != '{') expected("an object");
  ++pos_;
  levels_.push_back({});
}

bool reader::next_member() {
  level& l = levels_.back();
  skip_space();
  // The syntax is checked: here is '}' or, after the first member, ','.
  if (text_[pos_] == '}') {
    ++pos_;
    levels_.pop_back();
    return false;
  }
  if (!l.first) {
    ++pos_;  // ','
    skip_space();
  }
  l.name = read_string();
  l.first = false;
  skip_space();
  ++pos_;  // ':'
  return true;
}

const std::string& reader::name() const { return levels_.back().name; }

void reader::begin_array() {
  skip_space();
  if (pos_ >= text_.size() || text_[pos_] != '[') expected("an array");
  ++pos_;
  levels_.push_back({.array = true, .first = true, .index = 0, .name = {}});
}

bool reader::next_item() {
  level& l = levels_.back();
  skip_space();
  if (text_[pos_] == ']') {
    ++pos_;
    levels_.pop_back();
    return false;
  }
  if (!l.first) {
    ++pos_;  // ','
    ++l.index;
  }
  l.first = false;
  return true;
}

std::uint64_t reader::read_uint() {
  skip_space();
  const std::size_t start = pos_;
  std::uint64_t v = 0;
  bool fits = true;
  while (pos_ < text_.size() && is_digit(text_[pos_])) {
    const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
    fits = fits && v <= (UINT64_MAX - digit) / 10;
    v = v * 10 + digit;
    ++pos_;
  }
  const bool more =
      pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E');
  if (pos_ == start || more || !fits) {
    pos_ = start;
    expected("an unsigned integer");
  }
  return v;
}

bool reader::read_bool() {
  skip_space();
  if (text_.substr(pos_, 4) == "true") {
    pos_ += 4;
    return true;
  }
  if (text_.substr(pos_, 5) == "false") {
    pos_ += 5;
    return false;
  }
  expected("a boolean");
}

std::string reader::read_string() {
  skip_space();
  if (pos_ >= text_.size() || text_[pos_] != '"') expected("a string");
  const std::size_t start = pos_++;
  std::string s;
  const auto hex4 = [&] {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      u = u << 4 | static_cast<unsigned>(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return u;
  };
  for (;;) {
    const char c = text_[pos_++];
    if (c == '"') return s;
    if (c != '\\') {
      s += c;  // UTF-8, checked
      continue;
    }
    const char e = text_[pos_++];
    switch (e) {
      case 'b':
        s += '\b';
        break;
      case 'f':
        s += '\f';
        break;
      case 'n':
        s += '\n';
        break;
      case 'r':
        s += '\r';
        break;
      case 't':
        s += '\t';
        break;
      case 'u': {
        unsigned u = hex4();
        if (u >= 0xD800 && u <= 0xDBFF) {  // a pair, checked: Python writes such characters so
          pos_ += 2;
          u = 0x10000 + ((u - 0xD800) << 10) + (hex4() - 0xDC00);
        }
        if (u == 0) {
          pos_ = start;
          fail("a NUL character (\\u0000) in a string");
        }
        if (u < 0x80) {
          s += static_cast<char>(u);
        } else if (u < 0x800) {
          s += static_cast<char>(0xC0 | (u >> 6));
          s += static_cast<char>(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
          s += static_cast<char>(0xE0 | (u >> 12));
          s += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
          s += static_cast<char>(0x80 | (u & 0x3F));
        } else {
          s += static_cast<char>(0xF0 | (u >> 18));
          s += static_cast<char>(0x80 | ((u >> 12) & 0x3F));
          s += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
          s += static_cast<char>(0x80 | (u & 0x3F));
        }
        break;
      }
      default:  // '"', '\\', '/'
        s += e;
    }
  }
}

}  // namespace streampool::detail::json
