#include "cli/args.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "cli/terminal_text.h"
#include "config/settings.h"

namespace gpuslice::cli {

bool ParsedArgs::has(std::string_view name) const {
  for (const auto& entry : values_) {
    if (entry.first == name) return true;
  }
  return false;
}

std::optional<std::string> ParsedArgs::value(std::string_view name) const {
  for (const auto& entry : values_) {
    if (entry.first == name) return entry.second;
  }
  return std::nullopt;
}

Result<ParsedArgs> parse_args(const CommandSpec& spec, int argc, char** argv) {
  ParsedArgs parsed;
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (options_done) {
      parsed.positionals.emplace_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      parsed.positionals.emplace_back(arg);
      if (spec.stop_at_positional) options_done = true;
      continue;
    }
    std::string_view name = arg;
    std::optional<std::string_view> inline_value;
    if (std::size_t eq = arg.find('='); eq != std::string_view::npos && arg.rfind("--", 0) == 0) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const OptionSpec* option = nullptr;
    for (const OptionSpec& candidate : spec.options) {
      if (candidate.name == name) option = &candidate;
    }
    if (option == nullptr) return make_error("unknown option '" + std::string(name) + "'");
    if (parsed.has(option->name)) return make_error("option '" + std::string(name) + "' is given twice");
    if (option->value_name.empty()) {
      if (inline_value) return make_error("option '" + std::string(name) + "' takes no value");
      parsed.values_.emplace_back(std::string(option->name), std::string());
      continue;
    }
    std::string value;
    if (option->value_optional && !inline_value) {
      if (i + 1 < argc && argv[i + 1][0] != '-' && argv[i + 1][0] != '\0') value = argv[++i];
      parsed.values_.emplace_back(std::string(option->name), std::move(value));
      continue;
    }
    if (inline_value) {
      value = std::string(*inline_value);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return make_error("option '" + std::string(name) + "' needs a value (" +
                        std::string(option->value_name) + ")");
    }
    if (value.empty()) return make_error("option '" + std::string(name) + "' has an empty value");
    parsed.values_.emplace_back(std::string(option->name), std::move(value));
  }
  return parsed;
}

void print_usage(const CommandSpec& spec, std::FILE* out) {
  std::fprintf(out, "Usage: gpuslice %.*s %.*s\n\n%.*s\n", static_cast<int>(spec.name.size()),
               spec.name.data(), static_cast<int>(spec.synopsis.size()), spec.synopsis.data(),
               static_cast<int>(spec.summary.size()), spec.summary.data());
  std::fprintf(out, "\nOptions:\n");
  std::size_t width = std::strlen("-h, --help");
  auto label = [](const OptionSpec& o) {
    std::string text(o.name);
    if (!o.value_name.empty()) {
      text += o.value_optional ? " [" + std::string(o.value_name) + "]" : " " + std::string(o.value_name);
    }
    return text;
  };
  for (const OptionSpec& o : spec.options) width = std::max(width, label(o).size());
  for (const OptionSpec& o : spec.options) {
    std::string text = label(o);
    std::fprintf(out, "  %-*s  %.*s\n", static_cast<int>(width), text.c_str(),
                 static_cast<int>(o.help.size()), o.help.data());
  }
  std::fprintf(out, "  %-*s  %s\n", static_cast<int>(width), "-h, --help", "show this help and exit");
  if (!spec.details.empty()) {
    std::fprintf(out, "\n%.*s\n", static_cast<int>(spec.details.size()), spec.details.data());
  }
}

std::optional<int> parse_command(const CommandSpec& spec, int argc, char** argv, ParsedArgs& out) {
  auto parsed = parse_args(spec, argc, argv);
  if (!parsed) return usage_error(spec, parsed.error());
  out = std::move(parsed).value();
  if (out.help) {
    print_usage(spec, stdout);
    return kExitOk;
  }
  return std::nullopt;
}

int usage_error(const CommandSpec& spec, const std::string& message) {
  std::fprintf(stderr, "gpuslice %.*s: %s\nTry 'gpuslice %.*s --help'.\n", static_cast<int>(spec.name.size()),
               spec.name.data(), terminal_text(message).c_str(), static_cast<int>(spec.name.size()),
               spec.name.data());
  return kExitUsage;
}

int runtime_error(std::string_view command, const std::string& message) {
  std::fprintf(stderr, "gpuslice %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               terminal_text(message).c_str());
  return kExitRuntime;
}

std::optional<std::uint64_t> parse_uint(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

std::optional<std::uint64_t> parse_interval_seconds(std::string_view text) {
  std::size_t dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() && fraction.empty()) return std::nullopt;
  if (dot != std::string_view::npos && fraction.empty()) return std::nullopt;
  if (fraction.size() > 9) return std::nullopt;
  std::uint64_t seconds = 0;
  if (!whole.empty()) {
    auto parsed = parse_uint(whole);
    if (!parsed || *parsed > 86400) return std::nullopt;
    seconds = *parsed;
  }
  std::uint64_t nanos = 0;
  if (!fraction.empty()) {
    auto parsed = parse_uint(fraction);
    if (!parsed) return std::nullopt;
    nanos = *parsed;
    for (std::size_t i = fraction.size(); i < 9; ++i) nanos *= 10;
  }
  std::uint64_t total = seconds * 1000000000ULL + nanos;
  if (total < 10000000ULL || total > 86400ULL * 1000000000ULL) return std::nullopt;
  return total;
}

std::string absolute_path(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) == nullptr) return path;
  std::string base = cwd;
  if (base.back() != '/') base += '/';
  return base + path;
}

Result<std::string> resolve_state_file(const ParsedArgs& args) {
  if (auto file = args.value("--file")) return absolute_path(*file);
  if (auto dir = args.value("--shared-dir")) {
    std::string d = absolute_path(*dir);
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    return d == "/" ? std::string("/state") : d + "/state";
  }
  // Resolve exactly as the interposer does, looking only at the path variables so that an
  // unrelated malformed limit in this shell does not stop `status` from working.
  config::Settings settings = config::load_settings([](const char* name) -> const char* {
    static constexpr const char* kPathVariables[] = {"GPUSLICE_SHARED_DIR",
                                                     "CUDA_DEVICE_MEMORY_SHARED_CACHE"};
    for (const char* variable : kPathVariables) {
      if (std::strcmp(name, variable) == 0) return std::getenv(name);
    }
    return nullptr;
  });
  if (!settings.ok()) return make_error(settings.errors.front());
  return settings.shared_file;
}

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(fallback);
}

}  // namespace gpuslice::cli
