// streampool: the little JSON writer and reader (json.hpp).
#include "json.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "streampool/error.hpp"

namespace streampool::detail::json {

// ---- writer
// ---------------------------------------------------------------------------------------

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
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
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
        } else {
          out_ += ch;  // UTF-8 passes through
        }
    }
  }
  out_ += '"';
}

// ---- value
// ----------------------------------------------------------------------------------------

namespace {
const char* kind_name(value::kind k) {
  switch (k) {
    case value::kind::null:
      return "null";
    case value::kind::boolean:
      return "a boolean";
    case value::kind::integer:
      return "an integer";
    case value::kind::number:
      return "a number";
    case value::kind::string:
      return "a string";
    case value::kind::array:
      return "an array";
    case value::kind::object:
      return "an object";
  }
  return "?";
}

[[noreturn]] void wrong_type(std::string_view what, const char* expected, value::kind got) {
  throw logic_error(format("%.*s: expected %s, found %s", static_cast<int>(what.size()),
                           what.data(), expected, kind_name(got)));
}
}  // namespace

bool value::has(std::string_view name) const {
  if (kind_ != kind::object) return false;
  for (const std::string& n : names_)
    if (n == name) return true;
  return false;
}

const value& value::at(std::string_view name) const {
  if (kind_ != kind::object) wrong_type(name, "a member of an object", kind_);
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return items_[i];
  throw logic_error(
      format("member \"%.*s\" is missing", static_cast<int>(name.size()), name.data()));
}

const std::vector<value>& value::items(std::string_view what) const {
  if (kind_ != kind::array) wrong_type(what, "an array", kind_);
  return items_;
}

std::uint64_t value::as_uint(std::string_view what) const {
  if (kind_ != kind::integer || negative_) wrong_type(what, "an unsigned integer", kind_);
  return integer_;
}

bool value::as_bool(std::string_view what) const {
  if (kind_ != kind::boolean) wrong_type(what, "a boolean", kind_);
  return boolean_;
}

const std::string& value::as_string(std::string_view what) const {
  if (kind_ != kind::string) wrong_type(what, "a string", kind_);
  return string_;
}

// ---- parser
// ---------------------------------------------------------------------------------------

/// Recursive descent over the text; depth-limited, so hostile input cannot overflow the stack.
class parser {
 public:
  parser(std::string_view text, const char* what) : text_(text), what_(what) {}

  value document() {
    value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("the end of the document");
    return v;
  }

 private:
  static constexpr int max_depth = 64;

  [[noreturn]] void fail(const char* expected) const {
    throw logic_error(format("%s: at byte %zu: expected %s", what_, pos_, expected));
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }
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

  value parse_value(int depth) {
    if (depth > max_depth) fail("less nesting (64 levels at most)");
    skip_space();
    if (pos_ >= text_.size()) fail("a value");
    value v;
    const char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      v.kind_ = value::kind::object;
      if (eat('}')) return v;
      do {
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] != '"') fail("a member name");
        const std::size_t at = pos_;
        std::string name = parse_string();
        for (const std::string& earlier : v.names_) {
          if (earlier == name) {
            pos_ = at;
            fail("a member name not used before in this object");
          }
        }
        v.names_.push_back(std::move(name));
        expect(':', "':' after a member name");
        v.items_.push_back(parse_value(depth + 1));
      } while (eat(','));
      expect('}', "',' or '}' in an object");
    } else if (c == '[') {
      ++pos_;
      v.kind_ = value::kind::array;
      if (eat(']')) return v;
      do {
        v.items_.push_back(parse_value(depth + 1));
      } while (eat(','));
      expect(']', "',' or ']' in an array");
    } else if (c == '"') {
      v.kind_ = value::kind::string;
      v.string_ = parse_string();
    } else if (word("true")) {
      v.kind_ = value::kind::boolean;
      v.boolean_ = true;
    } else if (word("false")) {
      v.kind_ = value::kind::boolean;
    } else if (word("null")) {
      v.kind_ = value::kind::null;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number(v);
    } else {
      fail("a value");
    }
    return v;
  }

  std::string parse_string() {
    ++pos_;  // the opening quote
    std::string s;
    for (;;) {
      if (pos_ >= text_.size()) fail("the end of a string");
      const char c = text_[pos_++];
      if (c == '"') return s;
      if (static_cast<unsigned char>(c) < 0x20) fail("no control character in a string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("an escape");
      switch (text_[pos_++]) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case '/':
          s += '/';
          break;
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
        case 'u':
          append_utf8(s, parse_code_point());
          break;
        default:
          --pos_;
          fail(R"(an escape (\" \\ \/ \b \f \n \r \t \uXXXX))");
      }
    }
  }

  unsigned parse_hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (pos_ >= text_.size()) fail("four hex digits");
      const char h = text_[pos_];
      u <<= 4;
      if (h >= '0' && h <= '9')
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

  /// After "\\u": one code point, a surrogate pair joined (Python's json.dumps writes characters
  /// outside the Basic Multilingual Plane so); a lone surrogate is not text.
  unsigned parse_code_point() {
    const unsigned u = parse_hex4();
    if (u >= 0xDC00 && u <= 0xDFFF) fail("a high surrogate before a low one");
    if (u < 0xD800 || u > 0xDBFF) return u;
    if (text_.substr(pos_, 2) != "\\u") fail("a low surrogate after a high one");
    pos_ += 2;
    const unsigned low = parse_hex4();
    if (low < 0xDC00 || low > 0xDFFF) fail("a low surrogate after a high one");
    return 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
  }

  static void append_utf8(std::string& s, unsigned u) {
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
  }

  void parse_number(value& v) {
    const std::size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (pos_ + 1 < text_.size() && text_[pos_] == '0' && text_[pos_ + 1] >= '0' &&
        text_[pos_ + 1] <= '9')
      fail("no leading zero");
    if (digits() == 0) fail("a digit");
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0) fail("a digit after '.'");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      integral = false;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("a digit in the exponent");
    }
    const std::string literal(text_.substr(start, pos_ - start));
    if (integral) {
      const bool negative = literal[0] == '-';
      errno = 0;
      const unsigned long long n = std::strtoull(literal.c_str() + (negative ? 1 : 0), nullptr, 10);
      if (errno == 0) {
        v.kind_ = value::kind::integer;
        v.negative_ = negative && n != 0;
        v.integer_ = n;
        return;
      }
    }
    v.kind_ = value::kind::number;
    v.number_ = std::strtod(literal.c_str(), nullptr);
  }

  std::string_view text_;
  const char* what_;
  std::size_t pos_ = 0;
};

value parse(std::string_view text, const char* what) { return parser(text, what).document(); }

}  // namespace streampool::detail::json
