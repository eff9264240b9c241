// Hand-written argument parsing shared by the gpuslice commands (the CLI must build with nothing
// but a compiler): long options with a value as "--name VALUE" or "--name=VALUE", flags, "--" to
// end options, and a usage text generated from the same table that drives parsing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace gpuslice::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;
// `set`: the request is recorded, but a cap (the container's read-only limits file) holds it, so
// what is enforced is not what was asked for.
inline constexpr int kExitCapped = 3;

struct OptionSpec {
  std::string_view name;        // "--memory"
  std::string_view value_name;  // "SIZE"; empty for a flag
  std::string_view help;
  // The value may be left out ("--node", "--node ROOT", "--node=ROOT"): the next argument is taken
  // only when it does not start with '-'. value() is then "" when it was left out.
  bool value_optional = false;
};

struct CommandSpec {
  std::string_view name;      // "run"
  std::string_view synopsis;  // "[options] -- COMMAND [ARGS...]"
  std::string_view summary;   // one line
  std::string_view details;   // free text after the option list (may be empty)
  std::vector<OptionSpec> options;
  // Stop at the first positional argument and keep everything after it verbatim (run's COMMAND).
  bool stop_at_positional = false;
};

class ParsedArgs {
 public:
  bool help = false;
  std::vector<std::string> positionals;

  bool has(std::string_view name) const;
  std::optional<std::string> value(std::string_view name) const;

 private:
  friend Result<ParsedArgs> parse_args(const CommandSpec& spec, int argc, char** argv);
  std::vector<std::pair<std::string, std::string>> values_;  // name -> value ("" for flags)
};

// Parses argv[1..argc) (argv[0] is the command's own name). Errors are usage errors.
Result<ParsedArgs> parse_args(const CommandSpec& spec, int argc, char** argv);

void print_usage(const CommandSpec& spec, std::FILE* out);

// The start of every command: parses argv for `spec` into `out`. Returns the exit code when the
// command is already done (a usage error was printed, or --help was answered), nothing otherwise.
std::optional<int> parse_command(const CommandSpec& spec, int argc, char** argv, ParsedArgs& out);

// Prints "gpuslice NAME: message" and a hint to --help on stderr; returns kExitUsage.
int usage_error(const CommandSpec& spec, const std::string& message);
// Prints "gpuslice NAME: message" on stderr; returns kExitRuntime.
int runtime_error(std::string_view command, const std::string& message);

// A non-negative integer with no sign, spaces or junk.
std::optional<std::uint64_t> parse_uint(std::string_view text);
// Seconds as a decimal ("1", "0.5"), 0.01 to 86400; nanoseconds on success.
std::optional<std::uint64_t> parse_interval_seconds(std::string_view text);

// The state file for status/set/top: --file, else --shared-dir DIR (DIR/state), else what the
// environment names (GPUSLICE_SHARED_DIR, then CUDA_DEVICE_MEMORY_SHARED_CACHE, as the
// interposer resolves them), else /tmp/gpuslice-<uid>/state.
Result<std::string> resolve_state_file(const ParsedArgs& args);

// Makes a relative path absolute against the current directory (no symlink resolution).
std::string absolute_path(const std::string& path);

// $name when set and not empty, else `fallback`.
std::string env_or(const char* name, const char* fallback);

}  // namespace gpuslice::cli
