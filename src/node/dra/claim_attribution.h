// Tells the collector which claim (and pod) each claim directory belongs to, from the prepared
// claims, the way PodResources does for device-plugin containers: metrics and the API then label a
// claim's state with namespace = the claim's namespace, pod = the first pod it is reserved for and
// container = "claim/<claim name>" (one state directory serves every container of a claim).
#pragma once

#include "node/dra/claim_preparer.h"
#include "node/kubelet/podresources.h"

namespace gpuslice::node::dra {

class ClaimAttribution final : public AllocationLister {
 public:
  explicit ClaimAttribution(const ClaimPreparer& preparer) : preparer_(preparer) {}
  Result<std::vector<ListedDevices>> list() override;

 private:
  const ClaimPreparer& preparer_;
};

}  // namespace gpuslice::node::dra
