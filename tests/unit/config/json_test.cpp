// The strict flat-object JSON parser.
#include "config/json.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuslice::config::json {
namespace {

std::string parse_error(const std::string& text) {
  auto r = parse_flat_object(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? std::string() : r.error();
}

TEST(Json, ParsesNumbersAndStrings) {
  auto r = parse_flat_object(R"( { "0" : 4294967296 , "GPU-abc":"8Gi", "x": -1.5e3 } )");
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].key, "0");
  EXPECT_EQ((*r)[0].value, "4294967296");
  EXPECT_FALSE((*r)[0].is_string);
  EXPECT_EQ((*r)[1].key, "GPU-abc");
  EXPECT_EQ((*r)[1].value, "8Gi");
  EXPECT_TRUE((*r)[1].is_string);
  EXPECT_EQ((*r)[2].value, "-1.5e3");
}

TEST(Json, EmptyObjectAndWhitespaceKinds) {
  auto r = parse_flat_object("\t\r\n{\n}\n");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->empty());
}

TEST(Json, DecodesEscapes) {
  auto r = parse_flat_object(R"({"a\"b\\c\/d\b\f\n\r\t": "\u0041\u00e9\u20AC\ud83d\ude00"})");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)[0].key, "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ((*r)[0].value, "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
}

TEST(Json, RefusesBadEscapes) {
  EXPECT_NE(parse_error(R"({"a": "\x41"})").find("invalid escape"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a": "\u12"})").find("hex digit"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a": "\u12G4"})").find("hex digit"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a": "\ud83d"})").find("unpaired high surrogate"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a": "\ud83d\u0041"})").find("unpaired high surrogate"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a": "\ude00"})").find("unpaired low surrogate"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\": \"\\u00").find("truncated"), std::string::npos);
  parse_error("{\"a\": \"\\");
}

TEST(Json, RefusesControlCharactersInStrings) {
  EXPECT_NE(parse_error("{\"a\": \"x\ny\"}").find("control character"), std::string::npos);
  parse_error(std::string("{\"a\": \"x\0y\"}", 12));
}

TEST(Json, RefusesTruncatedInput) {
  for (const char* text :
       {"", "{", "{\"a\"", "{\"a\":", "{\"a\": 1", "{\"a\": 1,", "{\"a", "{\"a\": \"b", "{\"a\": -"}) {
    parse_error(text);
  }
  EXPECT_NE(parse_error("{\"a\": 1").find("unterminated object"), std::string::npos);
}

TEST(Json, RefusesTrailingCommaAndMissingSeparators) {
  EXPECT_NE(parse_error(R"({"a": 1,})").find("trailing comma"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a": 1 "b": 2})").find("expected ',' or '}'"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a" 1})").find("expected ':'"), std::string::npos);
  parse_error(R"({,})");
  parse_error(R"({"a": 1,, "b": 2})");
}

TEST(Json, RefusesNestingAndOtherValueTypes) {
  EXPECT_NE(parse_error(R"({"a": {"b": 1}})").find("nested"), std::string::npos);
  EXPECT_NE(parse_error(R"({"a": [1]})").find("nested"), std::string::npos);
  EXPECT_NE(parse_error(std::string(100000, '[')).find("longer than 65536"), std::string::npos);
  EXPECT_NE(parse_error(std::string(1000, '{')).find("expected a string key"), std::string::npos);
  for (const char* text :
       {R"({"a": true})", R"({"a": null})", R"({"a": false})", R"({"a": 'x'})", R"({a: 1})"}) {
    parse_error(text);
  }
}

TEST(Json, RefusesNonObjectsAndTrailingData) {
  EXPECT_NE(parse_error("[1]").find("expected '{'"), std::string::npos);
  parse_error("\"a\"");
  parse_error("12");
  EXPECT_NE(parse_error(R"({"a": 1} x)").find("after the object"), std::string::npos);
  parse_error(R"({"a": 1}{"b": 2})");
}

TEST(Json, RefusesDuplicateKeys) {
  EXPECT_NE(parse_error(R"({"a": 1, "a": 2})").find("duplicate key 'a'"), std::string::npos);
  // Escapes decode before the comparison.
  parse_error(R"({"a": 1, "\u0061": 2})");
}

TEST(Json, NumberGrammar) {
  for (const char* text :
       {R"({"a": 01})", R"({"a": 1.})", R"({"a": .5})", R"({"a": 1e})", R"({"a": +1})", R"({"a": --1})",
        R"({"a": 1e+})", R"({"a": 0x10})", R"({"a": NaN})", R"({"a": Infinity})"}) {
    parse_error(text);
  }
  auto r = parse_flat_object(R"({"a": 0, "b": 1E-2, "c": 123456789012345678901234567890})");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)[2].value, "123456789012345678901234567890");
}

TEST(Json, BoundsWhatItAllocates) {
  EXPECT_NE(parse_error("{\"a\": " + std::string(300, '1') + "}").find("number too long"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\": \"" + std::string(300, 'x') + "\"}").find("longer than 256"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"" + std::string(300, 'k') + "\": 1}").find("longer than 256"), std::string::npos);
  std::string many = "{";
  for (int i = 0; i < 257; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
  many += "}";
  EXPECT_NE(parse_error(many).find("more than 256 entries"), std::string::npos);
}

TEST(Json, ErrorsCarryTheOffset) {
  EXPECT_NE(parse_error(R"({"a": tru})").find("offset 6"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::config::json
