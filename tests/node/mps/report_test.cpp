// The MPS report's names and JSON shape, and the state file.
#include <gtest/gtest.h>
#include <unistd.h>

#include "node/mps/mps_report_json.h"
#include "test_util.h"

namespace gpuslice::node::mps {
namespace {

TEST(MpsState, NamesEveryStateBothWays) {
  for (MpsState s :
       {MpsState::Off, MpsState::Starting, MpsState::Running, MpsState::Restarting, MpsState::Refused})
    EXPECT_EQ(parse_mps_state(mps_state_name(s)), s);
  EXPECT_FALSE(parse_mps_state("paused"));
  EXPECT_EQ(parse_mps_state("RUNNING"), MpsState::Running);
}

TEST(MpsReportJson, RoundTripsAndCarriesTheFaultCaveat) {
  MpsReport r;
  r.state = MpsState::Restarting;
  r.reason = "control daemon pid 12 ended";
  r.restarts = 3;
  r.server_pids = {40, 41};
  r.pipe_dir = "/run/gpuslice/mps/pipe";
  r.log_dir = "/run/gpuslice/mps/log";
  r.since_ns = 77;
  r.manager_pid = 9;
  nlohmann::json doc = report_json(r);
  EXPECT_EQ(doc["state"], "restarting");
  EXPECT_EQ(doc["fault_containment"], kMpsFaultCaveat);
  EXPECT_TRUE(doc["control_pid"].is_null());
  auto back = report_from_json(doc);
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back->state, r.state);
  EXPECT_EQ(back->reason, r.reason);
  EXPECT_EQ(back->restarts, 3u);
  EXPECT_EQ(back->server_pids, r.server_pids);
  EXPECT_EQ(back->pipe_dir, r.pipe_dir);
  EXPECT_EQ(back->manager_pid, 9);
}

TEST(MpsReportJson, RefusesMembersOfTheWrongShape) {
  using nlohmann::json;
  EXPECT_FALSE(report_from_json(json::array()));
  EXPECT_FALSE(report_from_json({{"state", "dancing"}}));
  EXPECT_FALSE(report_from_json({{"state", "running"}, {"restarts", -1}}));
  EXPECT_FALSE(report_from_json({{"state", "running"}, {"server_pids", {1, "x"}}}));
  EXPECT_FALSE(report_from_json({{"state", "running"}, {"control_pid", 1e12}}));
  auto minimal = report_from_json({{"state", "off"}});
  ASSERT_TRUE(minimal);
  EXPECT_EQ(minimal->state, MpsState::Off);
}

TEST(MpsStateFile, IsWrittenWholeAndReadBack) {
  test::TempDir dir;
  MpsReport r;
  r.state = MpsState::Refused;
  r.reason = "GPU 0 has MIG mode on";
  ASSERT_TRUE(write_state_file(dir / "state.json", r));
  auto back = read_state_file(dir / "state.json");
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back->reason, r.reason);
}

TEST(MpsStateFile, IsNotReadThroughASymlink) {
  test::TempDir dir;
  MpsReport r;
  ASSERT_TRUE(write_state_file(dir / "real.json", r));
  ASSERT_EQ(::symlink((dir / "real.json").c_str(), (dir / "state.json").c_str()), 0);
  EXPECT_FALSE(read_state_file(dir / "state.json"));
}

}  // namespace
}  // namespace gpuslice::node::mps
