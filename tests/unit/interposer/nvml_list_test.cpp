// The NVML hooks' list handling: whole lists through NVML's size protocol, however long, and the
// caller's size protocol applied to the container's entries only.
#include <gtest/gtest.h>

#include <vector>

#include "interposer/nvml_slice.h"

namespace gpuslice::interposer {
namespace {

// A driver list of `pids`, answered as NVML does.
struct FakeDriver {
  std::vector<unsigned> pids;
  int calls = 0;
  nvmlReturn_t operator()(nvmlProcessInfo_v2_t* buffer, unsigned* count) {
    ++calls;
    if (*count < pids.size()) {
      *count = static_cast<unsigned>(pids.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (std::size_t i = 0; i < pids.size(); ++i) buffer[i] = nvmlProcessInfo_v2_t{pids[i], 1000 + i, 0, 0};
    *count = static_cast<unsigned>(pids.size());
    return NVML_SUCCESS;
  }
};

struct Own {
  std::vector<unsigned> pids;
  bool contains(unsigned pid) const {
    for (unsigned p : pids)
      if (p == pid) return true;
    return false;
  }
};

nvmlProcessInfo_v2_t same(const nvmlProcessInfo_v2_t& e) { return e; }

TEST(NvmlList, ReadsAListLongerThanItsStackBuffer) {
  FakeDriver driver;
  for (unsigned pid = 1; pid <= 5000; ++pid) driver.pids.push_back(pid);
  NvmlList<nvmlProcessInfo_v2_t, 8> list;
  ASSERT_EQ(list.fill(driver), NVML_SUCCESS);
  ASSERT_EQ(list.size(), 5000u);
  EXPECT_EQ(list[4999].pid, 5000u);
  EXPECT_EQ(driver.calls, 2) << "one refusal, then a buffer of the size asked for";
}

TEST(NvmlList, GivesUpOnAListThatNeverStopsGrowing) {
  unsigned asked = 0;
  NvmlList<nvmlProcessInfo_v2_t, 8> list;
  nvmlReturn_t r = list.fill([&](nvmlProcessInfo_v2_t*, unsigned* count) {
    *count = *count * 2 + 1;  // always more than was offered
    ++asked;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  });
  EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
  EXPECT_LE(asked, 4u);
}

TEST(NvmlList, PassesOnTheDriversOtherErrors) {
  NvmlList<nvmlProcessInfo_v2_t, 8> list;
  EXPECT_EQ(list.fill([](nvmlProcessInfo_v2_t*, unsigned*) { return NVML_ERROR_NOT_SUPPORTED; }),
            NVML_ERROR_NOT_SUPPORTED);
}

TEST(HandOutOwn, CountsAndCopiesOnlyTheContainersEntries) {
  FakeDriver driver{{10, 11, 12, 13, 14}};
  NvmlList<nvmlProcessInfo_v2_t, 8> list;
  ASSERT_EQ(list.fill(driver), NVML_SUCCESS);
  Own own{{11, 14, 99}};
  unsigned count = 0;
  EXPECT_EQ(hand_out_own(list, own, &count, static_cast<nvmlProcessInfo_v2_t*>(nullptr), same),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u) << "the container's two entries, not the card's five";
  count = 1;
  nvmlProcessInfo_v2_t out[4] = {};
  EXPECT_EQ(hand_out_own(list, own, &count, out, same), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  count = 4;
  ASSERT_EQ(hand_out_own(list, own, &count, out, same), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(out[0].pid, 11u);
  EXPECT_EQ(out[0].usedGpuMemory, 1001u);
  EXPECT_EQ(out[1].pid, 14u);
  EXPECT_EQ(out[2].pid, 0u) << "nothing written past the container's entries";
}

TEST(HandOutOwn, AnEmptyViewNeedsNoBuffer) {
  FakeDriver driver{{10, 11}};
  NvmlList<nvmlProcessInfo_v2_t, 8> list;
  ASSERT_EQ(list.fill(driver), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(hand_out_own(list, Own{{42}}, &count, static_cast<nvmlProcessInfo_v2_t*>(nullptr), same),
            NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
}

TEST(HandOutOwn, RefusesANullBufferThatClaimsRoom) {
  FakeDriver driver{{10}};
  NvmlList<nvmlProcessInfo_v2_t, 8> list;
  ASSERT_EQ(list.fill(driver), NVML_SUCCESS);
  unsigned count = 4;
  EXPECT_EQ(hand_out_own(list, Own{{10}}, &count, static_cast<nvmlProcessInfo_v2_t*>(nullptr), same),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(count, 4u);
}

}  // namespace
}  // namespace gpuslice::interposer
