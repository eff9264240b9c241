#include "node/mps/mps_state.h"

#include "common/enum_names.h"

namespace gpuslice::node::mps {

const char* mps_state_name(MpsState state) {
  return enum_name<MpsState::Refused>(state, kMpsStateNames, "unknown");
}

std::optional<MpsState> parse_mps_state(std::string_view text) {
  return enum_value_from<MpsState::Off, MpsState::Refused>(text, kMpsStateNames);
}

}  // namespace gpuslice::node::mps
