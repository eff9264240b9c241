#include "config/json.h"

#include <cstdint>
#include <string>

#include "config/text_util.h"

namespace gpuslice::config::json {

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<std::vector<Member>> parse() {
    if (text_.size() > kMaxTextBytes) return make_error("JSON text longer than 65536 bytes");
    std::vector<Member> members;
    skip_whitespace();
    if (!consume('{')) return fail("expected '{'");
    skip_whitespace();
    if (!consume('}')) {
      while (true) {
        if (members.size() == kMaxMembers) return fail("more than 256 entries");
        Member member;
        skip_whitespace();
        if (peek() == '}') return fail("trailing comma before '}'");
        if (peek() != '"') return fail("expected a string key");
        if (!parse_string(member.key)) return fail(error_);
        for (const Member& seen : members) {
          if (seen.key == member.key)
            return fail("duplicate key '" + detail::printable(member.key, 64) + "'");
        }
        skip_whitespace();
        if (!consume(':')) return fail("expected ':'");
        skip_whitespace();
        if (!parse_value(member)) return fail(error_);
        members.push_back(std::move(member));
        skip_whitespace();
        if (consume('}')) break;
        if (!consume(',')) return fail(at_end() ? "unterminated object" : "expected ',' or '}'");
      }
    }
    skip_whitespace();
    if (!at_end()) return fail("unexpected characters after the object");
    return members;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  bool consume(char c) {
    if (at_end() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void skip_whitespace() {
    while (!at_end() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  Error fail(const std::string& why) const {
    return make_error("invalid JSON at offset " + std::to_string(pos_) + ": " + why);
  }
  bool set_error(const char* why) {
    error_ = why;
    return false;
  }

  bool parse_value(Member& member) {
    const char c = peek();
    if (c == '"') {
      member.is_string = true;
      return parse_string(member.value);
    }
    if (c == '-' || detail::is_digit(c)) return parse_number(member.value);
    if (c == '{' || c == '[') return set_error("nested objects and arrays are not allowed");
    if (at_end()) return set_error("expected a value");
    return set_error("expected a number or a string");
  }

  // JSON number grammar; the text is kept as written for the caller's own grammar.
  bool parse_number(std::string& out) {
    const std::size_t start = pos_;
    consume('-');
    if (consume('0')) {
      if (detail::is_digit(peek())) return set_error("leading zeros are not allowed in numbers");
    } else if (!digits()) {
      return set_error("expected digits");
    }
    if (consume('.') && !digits()) return set_error("expected digits after '.'");
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (!consume('+')) consume('-');
      if (!digits()) return set_error("expected digits in the exponent");
    }
    if (pos_ - start > kMaxTokenBytes) return set_error("number too long");
    out.assign(text_.substr(start, pos_ - start));
    return true;
  }

  bool digits() {
    const std::size_t start = pos_;
    while (detail::is_digit(peek())) ++pos_;
    return pos_ > start;
  }

  bool parse_string(std::string& out) {
    ++pos_;  // opening quote
    while (true) {
      if (at_end()) return set_error("unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return set_error("control character in a string");
      if (out.size() >= kMaxTokenBytes) return set_error("string longer than 256 bytes");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) return set_error("unterminated string");
      const char escape = text_[pos_++];
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          out += escape;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          if (!parse_unicode_escape(out)) return false;
          break;
        default:
          return set_error("invalid escape sequence");
      }
    }
  }

  bool hex4(std::uint32_t& unit) {
    if (text_.size() - pos_ < 4) return set_error("truncated \\u escape");
    unit = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      std::uint32_t digit;
      if (h >= '0' && h <= '9') {
        digit = static_cast<std::uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        digit = static_cast<std::uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        digit = static_cast<std::uint32_t>(h - 'A' + 10);
      } else {
        return set_error("invalid hex digit in \\u escape");
      }
      unit = unit * 16 + digit;
    }
    return true;
  }

  // The 'u' is consumed; decodes one code point (a surrogate pair included) to UTF-8.
  bool parse_unicode_escape(std::string& out) {
    std::uint32_t code = 0;
    if (!hex4(code)) return false;
    if (code >= 0xDC00 && code <= 0xDFFF) return set_error("unpaired low surrogate in \\u escape");
    if (code >= 0xD800 && code <= 0xDBFF) {
      if (text_.substr(pos_, 2) != "\\u") return set_error("unpaired high surrogate in \\u escape");
      pos_ += 2;
      std::uint32_t low = 0;
      if (!hex4(low)) return false;
      if (low < 0xDC00 || low > 0xDFFF) return set_error("unpaired high surrogate in \\u escape");
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
    return true;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::string error_;
};

}  // namespace

Result<std::vector<Member>> parse_flat_object(std::string_view text) { return Parser(text).parse(); }

}  // namespace gpuslice::config::json
