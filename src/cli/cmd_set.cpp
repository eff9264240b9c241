// gpuslice set: change a running container's requested limits in its state file. Processes read
// the quota on every reservation and the compute limit at every limiter decision, so the change is
// live. The read-only limits file still caps the request: the state file keeps both and applies
// the smaller (shm::effective_quota), so nothing here can raise a cap or be undone by it.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/terminal_text.h"
#include "config/priority.h"
#include "config/settings.h"
#include "shared_state/ledger.h"

namespace gpuslice::cli {
namespace {

const CommandSpec& set_spec() {
  static const CommandSpec spec{
      "set",
      "[--memory SIZE] [--compute PCT] [--priority LEVEL] [--device DEV] [options]",
      "Change the memory quota, compute limit and/or priority of a running container.",
      "DEV is the DEV column of 'gpuslice status' (a device record) or a GPU UUID; without\n"
      "--device every device of the container is changed.\n"
      "--memory takes a size (8Gi, 512Mi, ...) or 'unlimited'; --compute a percentage 1-100 or\n"
      "'none'. Lowering the quota below current use frees nothing: new allocations are refused\n"
      "until usage drops. A cap from the container's read-only limits file still applies: the limit\n"
      "in force is the smaller of the two, and set prints it (and the cap) when the cap wins. The\n"
      "cap is the one the container's processes read, recorded in the state file, so the answer is\n"
      "the same from the host as from inside the container.\n"

      "--priority (high, normal or low) is the level the container asks for among containers sharing\n"
      "a GPU; it runs at the lower of that and the level the operator assigned it,\n"
      "for all its devices; its processes apply it within 100 ms.\n"
      "HAMi: 'shrreg-tool --set-sm-limit DEV PCT' is 'gpuslice set --device DEV --compute PCT'.\n"
      "Exit status: 0 when every limit in force is the one asked for; 3 when a cap holds a request\n"
      "('unlimited' included) or the operator's assignment holds --priority below the level asked\n"
      "(set prints the level it runs at): the request is recorded and applies once the cap allows\n"
      "it, but what is enforced now is the cap; 1 if nothing could be changed, 2 for usage errors.",
      {
          {"--memory", "SIZE", "new VRAM quota, or 'unlimited'"},
          {"--compute", "PCT", "new compute limit in percent, or 'none'"},
          {"--priority", "LEVEL", "new priority: high, normal or low"},
          {"--device", "DEV", "device record index or GPU UUID (default: all devices)"},
          {"--shared-dir", "DIR",
           "state directory (default: $GPUSLICE_SHARED_DIR, else /tmp/gpuslice-<uid>)"},
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

const char* level_name(std::optional<Priority> level) { return level ? priority_name(*level) : "not set"; }

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
  auto priority_text = args.value("--priority");
  if (!memory_text && !compute_text && !priority_text)
    return usage_error(spec, "nothing to set: give --memory, --compute and/or --priority");
  std::optional<Priority> priority;
  if (priority_text) {
    auto level = config::parse_priority(*priority_text);
    if (!level) return usage_error(spec, "--priority '" + *priority_text + "': " + level.error());
    priority = *level;
  }

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

  bool priority_capped = false;
  if (priority) {
    if (!ledger.writable())
      return runtime_error(spec.name, "cannot change " + *path + ": it is read-only for this user");
    ledger.set_priority(*priority);
    std::printf("priority %s -> %s", level_name(snap.priority), level_name(ledger.priority()));
    // The operator's assignment is the ceiling; the container's processes record it in the state
    // file, so this is right from the host as well.
    const shm::Snapshot now = ledger.snapshot();
    if (now.assigned_priority &&
        resolved_priority(priority_value(*priority), *now.assigned_priority) != *priority) {
      std::printf(" (the operator assigned %s%s, so it runs at %s)", priority_name(*now.assigned_priority),
                  now.assignment_refused ? ": its assignment file is refused" : "",
                  priority_name(resolved_priority(priority_value(*priority), *now.assigned_priority)));
      priority_capped = true;
    }
    std::printf("\n");
    if (priority_capped) {
      std::fprintf(stderr,
                   "gpuslice set: the operator's assignment holds the priority below the level asked for; "
                   "the request is kept and applies if the assignment allows it\n");
    }
    if (!memory && !compute) return priority_capped ? kExitCapped : kExitOk;
  }

  std::vector<const shm::DeviceRow*> targets;
  if (auto device = args.value("--device")) {
    auto index = parse_uint(*device);
    for (const auto& row : snap.devices) {
      bool named = index ? static_cast<std::uint64_t>(row.record) == *index
                         : row.record == ledger.find_device(*device);
      if (named) targets.push_back(&row);
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

  if (!ledger.writable()) {
    return runtime_error(spec.name, "cannot change " + *path + ": it is read-only for this user");
  }

  // Devices on which a cap holds what was asked: the request is kept, but the caller did not get it.
  int capped = 0;
  auto shown_percent = [](unsigned pct) {
    return pct == shm::kNoComputeLimit ? std::string("none") : std::to_string(pct) + "%";
  };
  for (const shm::DeviceRow* row : targets) {
    const int record = row->record;
    if (memory) {
      ledger.set_quota(record, *memory);
      // What is enforced is min(request, cap); the cap is the container's read-only limits file as
      // its processes read it (the ledger carries it), so this is right from the host as well.
      const std::uint64_t now = ledger.quota(record);
      const std::uint64_t cap = ledger.caps(record).quota;
      std::printf("device %d (%s): memory quota %s -> %s", record, terminal_text(row->uuid).c_str(),
                  format_bytes(row->quota).c_str(), format_bytes(now).c_str());
      if (now != *memory) {
        std::printf(" (requested %s; the container's cap is %s, so %s stays enforced)",
                    format_bytes(*memory).c_str(), format_bytes(cap).c_str(), format_bytes(now).c_str());
        ++capped;
      }
      std::printf("\n");
      std::uint64_t used = ledger.used(record);
      if (now != shm::kUnlimited && used > now) {
        std::printf("  note: %s in use is above the new quota; new allocations are refused until it drops\n",
                    format_bytes(used).c_str());
      }
    }
    if (compute) {
      ledger.set_compute_limit(record, *compute);
      const unsigned now = ledger.compute_limit(record);
      std::printf("device %d (%s): compute limit %s -> %s", record, terminal_text(row->uuid).c_str(),
                  shown_percent(row->compute_limit).c_str(), shown_percent(now).c_str());
      if (now != *compute) {
        std::printf(" (requested %s; the container's cap is %s, so %s stays enforced)",
                    shown_percent(*compute).c_str(), shown_percent(ledger.caps(record).compute).c_str(),
                    shown_percent(now).c_str());
        ++capped;
      }
      std::printf("\n");
    }
  }
  if (capped > 0) {
    // On stderr as well, so a script that keeps only the status and the errors still learns why.
    std::fprintf(stderr,
                 "gpuslice set: the container's limits file holds %d of the limits asked for below the "
                 "request (see above); the request is kept and applies once the cap allows it\n",
                 capped);
    return kExitCapped;
  }
  return priority_capped ? kExitCapped : kExitOk;
}

}  // namespace gpuslice::cli
