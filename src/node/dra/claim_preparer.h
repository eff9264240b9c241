// NodePrepareResources / NodeUnprepareResources for one claim, independent of gRPC: reads the
// claim's allocation through a ClaimSource, then creates on the host
//   <root>/containers/dra-<uid>/state        the claim's shared state (GPUSLICE_SHARED_DIR)
//   <root>/containers/dra-<uid>/config/limits root-owned, read-only caps: what was scheduled, and
//                                             the claim's priority level
//   <root>/channel/dra-<uid>/                 its node-channel writer directory (a compute limit
//                                             or a priority), and beside it
//   <root>/channel/dra-<uid>.assigned         the operator's assignment (assignment_file.h)
//   <cdi dir>/gpuslice.io-claim_<uid>.json    the CDI spec naming all of the above
// and answers the CDI device id. Both directions are idempotent; the checkpoint (checkpoint.h)
// makes them safe against a daemon killed at any point.
#pragma once

#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "node/dra/checkpoint.h"
#include "node/dra/claim_reader.h"
#include "node/host/host_layout.h"

namespace gpuslice::node::dra {

// The resource name a claim's allocation record carries (node/allocation_record.h).
inline constexpr const char* kClaimResource = "gpuslice.io/claim";

// Where the claim object comes from: the API server (api_client.h), or a test.
class ClaimSource {
 public:
  virtual ~ClaimSource() = default;
  virtual Result<nlohmann::json> get_claim(const std::string& ns, const std::string& name) = 0;
  // Best effort: tell the API what was prepared (ResourceClaim status.devices). A failure is logged,
  // never fails the prepare: the claim is enforced either way.
  virtual Result<bool> report_prepared(const ClaimRef&, const std::vector<PreparedDevice>&) { return true; }
};

struct PreparerOptions {
  std::string root = kDefaultRoot;
  std::string cdi_dir = "/var/run/cdi";
  std::string dev_root = "/dev";
  DriverNode node;
  // Namespaces whose claims may ask for priority `high` (--priority-high-namespaces, as the
  // webhook's). A claim's configuration is written by its tenant, and a DeviceClass's can be chosen
  // by any tenant, so neither grants `high` by itself: elsewhere a claim asking for it is refused.
  std::vector<std::string> priority_high_namespaces;
  // The managed MPS control daemon's pipe directory (--mps): the CDI spec mounts it at the same path
  // and sets CUDA_MPS_PIPE_DIRECTORY. Empty: MPS is off.
  std::string mps_pipe_dir = {};
  // Called after each step of a prepare ("checkpointed", "directories", "limits", "cdi"); tests
  // end the process there to check recovery.
  std::function<void(const char* step)> after_step;
  // The checkpoint's bound: a claim that would pass it is refused (checkpoint.h).
  std::size_t max_checkpoint_bytes = kMaxCheckpointBytes;
};

struct ClaimSummary {
  std::string uid;
  CheckpointEntry entry;
};

class ClaimPreparer {
 public:
  ClaimPreparer(PreparerOptions options, ClaimSource& source);

  // Reads the checkpoint, removes the files of every claim left `preparing` (and of any claim
  // directory or spec the checkpoint does not know), and keeps the prepared ones.
  Result<bool> recover();

  Result<std::vector<PreparedDevice>> prepare(const ClaimRef& ref);
  Result<bool> unprepare(const std::string& uid);

  std::vector<ClaimSummary> claims() const;
  std::string checkpoint_path() const;
  // Bytes written to the checkpoint since the preparer was made (its cost per prepare).
  std::uint64_t checkpoint_bytes_written() const;

 private:
  Result<bool> remove_files(const std::string& uid, const CheckpointEntry& entry);
  // Why an entry read back from the checkpoint is not one this preparer wrote for `uid` ("" if it is).
  std::string entry_mismatch(const std::string& uid, const CheckpointEntry& entry) const;
  CheckpointEntry entry_paths(const std::string& uid) const;
  // The devices of `ref.uid` if it is prepared; an error if it was prepared under another name (one
  // prepare per uid: a second name never gets the first claim's devices). Called with mutex_ held.
  std::optional<Result<std::vector<PreparedDevice>>> prepared_before(const ClaimRef& ref) const;
  void step(const char* name) const;
  // Why the claim's memory guarantees, with those of every other claim in the checkpoint, would be more
  // than a GPU's memory; nullopt when they fit. Under mutex_.
  std::optional<std::string> guarantees_exceed_memory(const std::string& uid,
                                                      const ClaimAllocation& allocation) const;

  PreparerOptions options_;
  ClaimSource& source_;
  HostLayout layout_;
  mutable std::mutex mutex_;
  CheckpointStore store_;
};

// A claim uid as the API server writes it: 1-64 characters of [0-9a-zA-Z-].
bool valid_claim_uid(const std::string& uid);

}  // namespace gpuslice::node::dra
