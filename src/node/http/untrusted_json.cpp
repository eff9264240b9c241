#include "node/http/untrusted_json.h"

#include <set>
#include <vector>

#include "config/text_util.h"

namespace gpuslice::node {
namespace {

using nlohmann::json;

// nlohmann's SAX parser keeps its own state on the heap, so this pass never recurses.
class Checker final : public nlohmann::json_sax<json> {
 public:
  explicit Checker(std::size_t max_depth) : max_depth_(max_depth) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    kinds_.push_back(true);
    return deeper();
  }
  bool key(string_t& name) override {
    if (!keys_.back().insert(name).second) {
      error_ = "duplicate key \"" + config::detail::printable(name, 64) + "\"";
      return false;
    }
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    kinds_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    kinds_.push_back(false);
    return deeper();
  }
  bool end_array() override {
    kinds_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = std::string("not valid JSON: ") + e.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool deeper() {
    if (kinds_.size() <= max_depth_) return true;
    error_ = "nested deeper than " + std::to_string(max_depth_) + " levels";
    return false;
  }

  std::size_t max_depth_;
  std::vector<std::set<std::string>> keys_;
  std::vector<bool> kinds_;  // open containers, innermost last
  std::string error_;
};

}  // namespace

std::optional<std::string> parse_untrusted_json(std::string_view text, json& out, std::size_t max_depth) {
  Checker checker(max_depth);
  if (!json::sax_parse(text, &checker, json::input_format_t::json, /*strict=*/true)) {
    return checker.error().empty() ? std::string("not valid JSON") : checker.error();
  }
  out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) return std::string("not valid JSON");
  return std::nullopt;
}

std::string json_text(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace gpuslice::node
