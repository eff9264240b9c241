// The one JSON shape of a container's status (docs/api.md): `gpuslice status --json`, each refresh
// of `gpuslice top --json`, and the container objects of the daemon's /api/v1/status and
// /api/v1/containers/<id>. Optional members are present as null when unknown, so every object has
// the same keys whatever produced it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "status/container_status.h"

namespace gpuslice::status {

// Version of the shape; bumped when a member changes meaning or disappears (additions keep it).
inline constexpr int kSchemaVersion = 1;

nlohmann::json to_json(const ContainerStatus& status);

// Reads a container object back (the CLI reading the daemon's API). Unknown members are ignored,
// missing optional ones stay empty; an error names the first member of the wrong type.
Result<ContainerStatus> container_from_json(const nlohmann::json& value);

// nlohmann's dump() throws on invalid UTF-8 (command lines are bytes); this replaces it with U+FFFD.
std::string dump(const nlohmann::json& value);

}  // namespace gpuslice::status
