// The shared status module: a ledger snapshot in the documented shape, the rates between two
// looks, and reading the shape back (what `status --api` does with the daemon's answer).
#include "status/status_json.h"

#include <gtest/gtest.h>

#include "shared_state/layout.h"
#include "status/container_status.h"

namespace {

using namespace gpuslice;

shm::Snapshot two_process_snapshot(std::uint64_t busy_a, std::uint64_t busy_b, std::uint64_t refused) {
  shm::Snapshot snap;
  snap.path = "/run/x/state";
  shm::DeviceRow dev;
  dev.uuid = "GPU-00000000-0000-4000-8000-000000000001";
  dev.index = 0;
  dev.record = 0;
  dev.total_bytes = 80;
  dev.quota = 8;
  dev.compute_limit = 30;
  dev.used = 5;
  dev.refused_allocations = refused;
  snap.devices.push_back(dev);
  shm::ProcessRow a;
  a.pid = 10;
  a.host_pid = 1010;
  a.command = "python";
  a.used_by_device = {3};
  a.busy_ns_by_device = {busy_a};
  shm::ProcessRow b = a;
  b.pid = 11;
  b.host_pid = 0;
  b.used_by_device = {2};
  b.busy_ns_by_device = {busy_b};
  snap.processes = {a, b};
  return snap;
}

TEST(StatusJson, ASnapshotBecomesTheDocumentedShape) {
  nlohmann::json doc = status::to_json(status::from_snapshot(two_process_snapshot(300, 100, 2)));
  EXPECT_EQ(doc["schema_version"], 1);
  EXPECT_EQ(doc["path"], "/run/x/state");
  EXPECT_TRUE(doc["id"].is_null());
  EXPECT_EQ(doc["layout_version"], shm::layout::kLayoutVersion);
  const auto& dev = doc["devices"][0];
  EXPECT_EQ(dev["quota_bytes"], 8);
  EXPECT_EQ(dev["compute_limit_percent"], 30);
  EXPECT_EQ(dev["busy_ns"], 400);
  EXPECT_TRUE(dev["compute_utilization_ratio"].is_null()) << "one look has no rate";
  EXPECT_EQ(doc["processes"][0]["host_pid"], 1010);
  EXPECT_TRUE(doc["processes"][1]["host_pid"].is_null());
  EXPECT_DOUBLE_EQ(doc["processes"][0]["devices"][0]["compute_share"].get<double>(), 0.75);
}

TEST(StatusJson, UnlimitedAndUnknownValuesAreNull) {
  shm::Snapshot snap = two_process_snapshot(0, 0, 0);
  snap.devices[0].quota = shm::kUnlimited;
  snap.devices[0].compute_limit = shm::kNoComputeLimit;
  nlohmann::json doc = status::to_json(status::from_snapshot(snap));
  EXPECT_TRUE(doc["devices"][0]["quota_bytes"].is_null());
  EXPECT_TRUE(doc["devices"][0]["compute_limit_percent"].is_null());
  EXPECT_TRUE(doc["processes"][0]["devices"][0]["compute_share"].is_null()) << "no busy time at all";
}

TEST(StatusJson, RequestCapAndTheQuotaInForceAreShownAndReadBack) {
  shm::Snapshot snap = two_process_snapshot(0, 0, 0);
  snap.devices[0].requested.quota = 6;
  snap.devices[0].cap.quota = 3;
  snap.devices[0].quota = 3;
  nlohmann::json doc = status::to_json(status::from_snapshot(snap));
  EXPECT_EQ(doc["devices"][0]["quota_bytes"], 3);
  EXPECT_EQ(doc["devices"][0]["requested_quota_bytes"], 6);
  EXPECT_EQ(doc["devices"][0]["quota_cap_bytes"], 3);
  auto back = status::container_from_json(doc);
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back->devices[0].requested_quota_bytes, 6u);
  EXPECT_EQ(back->devices[0].quota_cap_bytes, 3u);
  snap.devices[0].requested.quota = shm::kUnlimited;
  snap.devices[0].cap.quota = shm::kUnlimited;
  doc = status::to_json(status::from_snapshot(snap));
  EXPECT_TRUE(doc["devices"][0]["requested_quota_bytes"].is_null());
  EXPECT_TRUE(doc["devices"][0]["quota_cap_bytes"].is_null());
}

TEST(StatusJson, RatesComeFromTheDeltasBetweenLooks) {
  status::RateTracker rates;
  status::ContainerStatus first = status::from_snapshot(two_process_snapshot(0, 0, 1));
  rates.update(first, 1'000'000'000);
  EXPECT_FALSE(first.devices[0].compute_utilization_ratio);
  status::ContainerStatus second = status::from_snapshot(two_process_snapshot(200'000'000, 100'000'000, 4));
  rates.update(second, 2'000'000'000);
  ASSERT_TRUE(second.devices[0].compute_utilization_ratio);
  EXPECT_DOUBLE_EQ(*second.devices[0].compute_utilization_ratio, 0.3);
  EXPECT_EQ(second.devices[0].refused_in_interval, 3u);
  EXPECT_DOUBLE_EQ(*second.processes[0].devices[0].compute_utilization_ratio, 0.2);
  EXPECT_DOUBLE_EQ(*second.processes[1].devices[0].compute_utilization_ratio, 0.1);
  // A process left with its busy time: that interval has no trustworthy container rate.
  shm::Snapshot left = two_process_snapshot(250'000'000, 0, 4);
  left.processes.pop_back();
  status::ContainerStatus third = status::from_snapshot(left);
  rates.update(third, 3'000'000'000);
  EXPECT_FALSE(third.devices[0].compute_utilization_ratio);
  EXPECT_DOUBLE_EQ(*third.processes[0].devices[0].compute_utilization_ratio, 0.05);
}

TEST(StatusJson, TheShapeReadsBackUnchanged) {
  status::ContainerStatus original = status::from_snapshot(two_process_snapshot(300, 100, 2));
  original.id = "ctr";
  original.pod_namespace = "ml";
  original.pod_name = "trainer-0";
  original.memory_limit = "8Gi";
  nlohmann::json doc = status::to_json(original);
  auto back = status::container_from_json(doc);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(status::to_json(*back), doc);
}

TEST(StatusJson, AMemberOfTheWrongTypeIsNamed) {
  nlohmann::json doc = status::to_json(status::from_snapshot(two_process_snapshot(1, 1, 0)));
  doc["devices"][0]["used_bytes"] = "lots";
  auto back = status::container_from_json(doc);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().find("used_bytes"), std::string::npos) << back.error();
}

TEST(StatusJson, InvalidUtf8InACommandDoesNotStopTheDump) {
  shm::Snapshot snap = two_process_snapshot(1, 1, 0);
  snap.processes[0].command = "caf\xe9";  // Latin-1
  std::string text = status::dump(status::to_json(status::from_snapshot(snap)));
  EXPECT_NE(text.find("caf\xef\xbf\xbd"), std::string::npos) << text;
}

}  // namespace
