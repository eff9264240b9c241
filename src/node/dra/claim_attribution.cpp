#include "node/dra/claim_attribution.h"

namespace gpuslice::node::dra {

Result<std::vector<ListedDevices>> ClaimAttribution::list() {
  std::vector<ListedDevices> out;
  for (const auto& claim : preparer_.claims()) {
    if (claim.entry.state != CheckpointEntry::State::Prepared) continue;
    ListedDevices listed;
    listed.resource = kClaimResource;
    listed.device_ids = {claim.uid};
    listed.owner = {claim.entry.ns, claim.entry.pod, "claim/" + claim.entry.name};
    out.push_back(std::move(listed));
  }
  return out;
}

}  // namespace gpuslice::node::dra
