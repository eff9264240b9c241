// Busy-time history of one timeline (a device, or one process on a device), enough to answer
// "how busy was it during the last second" the way NVML utilization does.
//
// Work on a device is serialised, so everything queued after `now` forms one contiguous run. The
// latest run is kept exactly (it may reach far into the future); older runs are settled into
// coarse buckets once a gap ends them. Plain data: it lives in the shared state file and every
// access happens under that device's lock.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gpuslice::mock {

struct BusyRing {
  static constexpr unsigned kBuckets = 128;
  static constexpr std::uint64_t kBucketNs = 20'000'000;  // 20 ms: 2.56 s of history
  static constexpr std::uint64_t kSpanNs = kBuckets * kBucketNs;

  std::uint64_t run_start;
  std::uint64_t run_end;
  std::uint32_t tag[kBuckets];  // low 32 bits of (bucket number + 1); 0 = never written
  std::uint32_t busy_ns[kBuckets];

  void reset() { *this = BusyRing{}; }

  // Adds busy time [start, end). Callers add intervals in start order.
  void record(std::uint64_t start, std::uint64_t end) {
    if (end <= start) return;
    if (run_end > run_start && start <= run_end) {
      run_end = std::max(run_end, end);
      return;
    }
    settle(run_start, run_end);
    run_start = start;
    run_end = end;
  }

  // Busy nanoseconds inside [from, to).
  std::uint64_t busy_between(std::uint64_t from, std::uint64_t to) const {
    if (to <= from) return 0;
    if (to - from > kSpanNs - kBucketNs) from = to - (kSpanNs - kBucketNs);
    std::uint64_t busy = overlap(run_start, run_end, from, to);
    for (std::uint64_t bucket = from / kBucketNs; bucket <= (to - 1) / kBucketNs; ++bucket) {
      unsigned slot = static_cast<unsigned>(bucket % kBuckets);
      if (tag[slot] != tag_of(bucket)) continue;
      std::uint64_t bucket_start = bucket * kBucketNs;
      std::uint64_t covered = overlap(bucket_start, bucket_start + kBucketNs, from, to);
      // A bucket only knows its total, so a window cutting it takes a proportional share.
      busy += busy_ns[slot] * covered / kBucketNs;
    }
    return std::min(busy, to - from);
  }

 private:
  static std::uint32_t tag_of(std::uint64_t bucket) { return static_cast<std::uint32_t>(bucket + 1); }

  static std::uint64_t overlap(std::uint64_t a_start, std::uint64_t a_end, std::uint64_t b_start,
                               std::uint64_t b_end) {
    std::uint64_t start = std::max(a_start, b_start);
    std::uint64_t end = std::min(a_end, b_end);
    return end > start ? end - start : 0;
  }

  void settle(std::uint64_t start, std::uint64_t end) {
    if (end <= start) return;
    // Only the newest span can ever be read again.
    if (end - start > kSpanNs) start = end - kSpanNs;
    for (std::uint64_t bucket = start / kBucketNs; bucket <= (end - 1) / kBucketNs; ++bucket) {
      unsigned slot = static_cast<unsigned>(bucket % kBuckets);
      if (tag[slot] != tag_of(bucket)) {
        tag[slot] = tag_of(bucket);
        busy_ns[slot] = 0;
      }
      std::uint64_t bucket_start = bucket * kBucketNs;
      busy_ns[slot] +=
          static_cast<std::uint32_t>(overlap(bucket_start, bucket_start + kBucketNs, start, end));
    }
  }
};

}  // namespace gpuslice::mock
