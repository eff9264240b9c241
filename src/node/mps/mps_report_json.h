// The one JSON shape of an MpsReport (docs/api.md "mps"): the daemon's /api/v1/status, the state
// file the manager keeps beside the pipe directory, and what `gpuslice status`/`gpuslice mps status`
// read back.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"
#include "node/mps/mps_state.h"

namespace gpuslice::node::mps {

nlohmann::json report_json(const MpsReport& report);
// Checked member by member; an error names the first that is missing or of the wrong type.
Result<MpsReport> report_from_json(const nlohmann::json& doc);

// The state file: written whole to a temporary name and renamed, so a reader never sees half.
Result<bool> write_state_file(const std::string& path, const MpsReport& report);
// Read without following a symlink, bounded; the directory must be the manager's (OwnerOnly).
Result<MpsReport> read_state_file(const std::string& path);

}  // namespace gpuslice::node::mps
