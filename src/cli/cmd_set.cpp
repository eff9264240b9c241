// gpuslice set: change a running container's limits in its state file. Processes read the quota
// on every reservation and the compute limit at every limiter decision, so the change is live.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "config/settings.h"
#include "shared_state/ledger.h"

namespace gpuslice::cli {
namespace {

const CommandSpec& set_spec() {
  static const CommandSpec spec{
      "set",
      "[--memory SIZE] [--compute PCT] [--device DEV] [options]",
      "Change the memory quota and/or compute limit of a running container.",
      "DEV is the DEV column of 'gpuslice status' (a device record) or a GPU UUID; without\n"
      "--device every device of the container is changed.\n"
      "--memory takes a size (8Gi, 512Mi, ...) or 'unlimited'; --compute a percentage 1-100 or\n"
      "'none'. Lowering the quota below current use frees nothing: new allocations are refused\n"
      "until usage drops. A limit from the read-only limits file ($GPUSLICE_LIMITS_FILE, default\n"
      "/etc/gpuslice/limits) cannot be raised from here.\n"
      "HAMi: 'shrreg-tool --set-sm-limit DEV PCT' is 'gpuslice set --device DEV --compute PCT'.",
      {
          {"--memory", "SIZE", "new VRAM quota, or 'unlimited'"},
          {"--compute", "PCT", "new compute limit in percent, or 'none'"},
          {"--device", "DEV", "device record index or GPU UUID (default: all devices)"},
          {"--shared-dir", "DIR", "state directory (default: $GPUSLICE_SHARED_DIR, else /tmp/gpuslice)"},
          {"--file", "PATH", "state file itself"},
      }};
  return spec;
}

bool is_word(const std::string& text, const char* word) {
  if (text.size() != std::char_traits<char>::length(word)) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != word[i]) return false;
  }
  return true;
}

}  // namespace

int cmd_set(int argc, char** argv) {
  const CommandSpec& spec = set_spec();
  ParsedArgs args;
  if (auto done = parse_command(spec, argc, argv, args)) return *done;
  if (!args.positionals.empty())
    return usage_error(spec, "unexpected argument '" + args.positionals[0] + "'");
  if (args.has("--file") && args.has("--shared-dir"))
    return usage_error(spec, "give --file or --shared-dir, not both");
  auto memory_text = args.value("--memory");
  auto compute_text = args.value("--compute");
  if (!memory_text && !compute_text)
    return usage_error(spec, "nothing to set: give --memory and/or --compute");

  std::optional<std::uint64_t> memory;
  if (memory_text) {
    if (is_word(*memory_text, "unlimited") || is_word(*memory_text, "none")) {
      memory = shm::kUnlimited;
    } else {
      auto size = config::parse_size(*memory_text);
      if (!size) return usage_error(spec, "--memory '" + *memory_text + "': " + size.error());
      memory = *size;
    }
  }
  std::optional<unsigned> compute;
  if (compute_text) {
    if (is_word(*compute_text, "none") || is_word(*compute_text, "unlimited")) {
      compute = shm::kNoComputeLimit;
    } else {
      auto percent = config::parse_percent(*compute_text);
      if (!percent) return usage_error(spec, "--compute '" + *compute_text + "': " + percent.error());
      compute = *percent;
    }
  }

  auto path = resolve_state_file(args);
  if (!path) return runtime_error(spec.name, path.error());
  auto opened = shm::Ledger::open(*path, shm::Ledger::Mode::Observer);
  if (!opened) return runtime_error(spec.name, opened.error());
  shm::Ledger& ledger = *opened.value();
  shm::Snapshot snap = ledger.snapshot();

  std::vector<const shm::DeviceRow*> targets;
  if (auto device = args.value("--device")) {
    auto index = parse_uint(*device);
    int record = index ? (*index < 64 ? static_cast<int>(*index) : -1) : ledger.find_device(*device);
    for (const auto& row : snap.devices) {
      if (row.record == record) targets.push_back(&row);
    }
    if (targets.empty()) {
      return runtime_error(spec.name, "no device '" + *device + "' in " + *path + " (see gpuslice status)");
    }
  } else {
    for (const auto& row : snap.devices) targets.push_back(&row);
    if (targets.empty()) {
      return runtime_error(spec.name, "no device is attached in " + *path + " yet; nothing to change");
    }
  }

  // Caps the administrator wrote: this command must not be a way around them.
  config::Settings caps;
  std::string limits_file = resolve_limits_file();
  config::apply_limits_file(caps, limits_file);
  if (!caps.ok()) return runtime_error(spec.name, caps.errors.front() + "; refusing to change limits");
  for (const shm::DeviceRow* row : targets) {
    if (memory) {
      auto cap = caps.memory.lookup(row->index, row->uuid);
      if (cap && *memory > *cap) {
        return runtime_error(spec.name, "refused: " + limits_file + " caps the memory of device " +
                                            std::to_string(row->record) + " (" + row->uuid + ") at " +
                                            format_bytes(*cap) + "; asked for " + format_bytes(*memory));
      }
    }
    if (compute) {
      auto cap = caps.compute.lookup(row->index, row->uuid);
      unsigned wanted = *compute == shm::kNoComputeLimit ? 100 : *compute;
      if (cap && wanted > *cap) {
        return runtime_error(
            spec.name,
            "refused: " + limits_file + " caps the compute of device " + std::to_string(row->record) + " (" +
                row->uuid + ") at " + std::to_string(*cap) + "%; asked for " +
                (*compute == shm::kNoComputeLimit ? std::string("none") : std::to_string(*compute) + "%"));
      }
    }
  }
  if (!ledger.writable()) {
    return runtime_error(spec.name, "cannot change " + *path + ": it is read-only for this user");
  }

  for (const shm::DeviceRow* row : targets) {
    if (memory) {
      ledger.set_quota(row->record, *memory);
      std::printf("device %d (%s): memory quota %s -> %s\n", row->record, row->uuid.c_str(),
                  format_bytes(row->quota).c_str(), format_bytes(*memory).c_str());
      std::uint64_t used = ledger.used(row->record);
      if (*memory != shm::kUnlimited && used > *memory) {
        std::printf("  note: %s in use is above the new quota; new allocations are refused until it drops\n",
                    format_bytes(used).c_str());
      }
    }
    if (compute) {
      ledger.set_compute_limit(row->record, *compute);
      auto shown = [](unsigned pct) {
        return pct == shm::kNoComputeLimit ? std::string("none") : std::to_string(pct) + "%";
      };
      std::printf("device %d (%s): compute limit %s -> %s\n", row->record, row->uuid.c_str(),
                  shown(row->compute_limit).c_str(), shown(*compute).c_str());
    }
  }
  return kExitOk;
}

}  // namespace gpuslice::cli
