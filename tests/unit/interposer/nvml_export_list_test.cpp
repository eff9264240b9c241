// The filter behind nvidia-smi's process table (nvml_export_list.h): entries of the observed
// layout compacted in place to the container's own, failing closed on anything unexpected.
#include "interposer/nvml_export_list.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace gpuslice::interposer {
namespace {

namespace ex = nvml_export;

// A caller's buffer of `capacity` entries, the first ones written as the library writes them.
struct Buffer {
  explicit Buffer(unsigned entries) : bytes(entries * ex::kEntryStride, 0xAB), capacity(entries) {}
  void put(unsigned index, unsigned pid, std::uint64_t used) {
    unsigned char* e = export_entry(bytes.data(), index);
    std::memset(e, 0, ex::kEntryStride);
    std::memcpy(e + ex::kPidOffset, &pid, sizeof pid);
    std::memcpy(e + ex::kUsedMemoryOffset, &used, sizeof used);
    std::snprintf(reinterpret_cast<char*>(e + ex::kNameOffset), ex::kNameBytes, "proc-%u", pid);
  }
  unsigned pid(unsigned index) { return export_entry_pid(export_entry(bytes.data(), index)); }
  std::uint64_t used(unsigned index) {
    std::uint64_t v = 0;
    std::memcpy(&v, export_entry(bytes.data(), index) + ex::kUsedMemoryOffset, sizeof v);
    return v;
  }
  std::string name(unsigned index) {
    return reinterpret_cast<const char*>(export_entry(bytes.data(), index) + ex::kNameOffset);
  }
  bool wiped(unsigned from, unsigned to) {
    for (std::size_t i = from * ex::kEntryStride; i < to * ex::kEntryStride; ++i)
      if (bytes[i] != 0) return false;
    return true;
  }
  std::vector<unsigned char> bytes;
  unsigned capacity;
};

auto only(std::vector<unsigned> own) {
  return [own](unsigned pid) {
    for (unsigned p : own)
      if (p == pid) return true;
    return false;
  };
}

TEST(NvmlExportList, KeepsTheContainersEntriesInOrderAtTheFront) {
  Buffer b(8);
  const unsigned pids[] = {100, 200, 300, 400, 500};
  for (unsigned i = 0; i < 5; ++i) b.put(i, pids[i], 1000 + i);
  unsigned count = 5;
  EXPECT_EQ(keep_own_export_entries(b.bytes.data(), b.capacity, &count, only({200, 500, 999})),
            ExportListResult::Filtered);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(b.pid(0), 200u);
  EXPECT_EQ(b.used(0), 1001u);
  EXPECT_EQ(b.name(0), "proc-200");
  EXPECT_EQ(b.pid(1), 500u);
  EXPECT_EQ(b.used(1), 1004u);
  EXPECT_EQ(b.name(1), "proc-500");
  EXPECT_TRUE(b.wiped(2, 5)) << "nothing of another tenant is left behind";
  EXPECT_EQ(b.bytes[5 * ex::kEntryStride], 0xAB) << "past what the library wrote is not touched";
}

TEST(NvmlExportList, NoneOfTheContainersLeavesAnEmptyList) {
  Buffer b(4);
  b.put(0, 1, 1);
  b.put(1, 2, 2);
  unsigned count = 2;
  EXPECT_EQ(keep_own_export_entries(b.bytes.data(), b.capacity, &count, only({})),
            ExportListResult::Filtered);
  EXPECT_EQ(count, 0u);
  EXPECT_TRUE(b.wiped(0, 2));
}

TEST(NvmlExportList, AllTheContainersAndAnEmptyListAreKeptAsTheyAre) {
  Buffer b(4);
  b.put(0, 7, 70);
  b.put(1, 8, 80);
  unsigned count = 2;
  EXPECT_EQ(keep_own_export_entries(b.bytes.data(), b.capacity, &count, only({7, 8})),
            ExportListResult::Filtered);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(b.pid(1), 8u);
  EXPECT_EQ(b.name(1), "proc-8");
  count = 0;
  EXPECT_EQ(keep_own_export_entries(b.bytes.data(), b.capacity, &count, only({7})),
            ExportListResult::Filtered);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(b.pid(0), 7u) << "an empty answer leaves the buffer alone";
}

TEST(NvmlExportList, MoreEntriesThanTheBufferHoldsHidesEverything) {
  Buffer b(2);
  b.put(0, 7, 70);
  b.put(1, 9, 90);
  unsigned count = 3;
  EXPECT_EQ(keep_own_export_entries(b.bytes.data(), b.capacity, &count, only({7})),
            ExportListResult::MoreThanCapacity);
  EXPECT_EQ(count, 0u);
  EXPECT_TRUE(b.wiped(0, 2));
}

TEST(NvmlExportList, ANameWithoutItsNulMeansAnotherLayoutAndHidesEverything) {
  Buffer b(4);
  b.put(0, 7, 70);
  b.put(1, 9, 90);
  std::memset(export_entry(b.bytes.data(), 1) + ex::kNameOffset, 'x', ex::kNameBytes);
  unsigned count = 2;
  EXPECT_EQ(keep_own_export_entries(b.bytes.data(), b.capacity, &count, only({7, 9})),
            ExportListResult::NameUnterminated);
  EXPECT_EQ(count, 0u);
  EXPECT_TRUE(b.wiped(0, 2));
}

TEST(NvmlExportList, ANameFillingItsWholeFieldIsStillTerminated) {
  Buffer b(1);
  b.put(0, 7, 70);
  unsigned char* name = export_entry(b.bytes.data(), 0) + ex::kNameOffset;
  std::memset(name, 'y', ex::kNameBytes - 1);
  name[ex::kNameBytes - 1] = '\0';
  unsigned count = 1;
  EXPECT_EQ(keep_own_export_entries(b.bytes.data(), b.capacity, &count, only({7})),
            ExportListResult::Filtered);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(b.name(0).size(), ex::kNameBytes - 1);
}

}  // namespace
}  // namespace gpuslice::interposer
