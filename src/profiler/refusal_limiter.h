// Rate limiting of "allocation refused" reports: a program that retries a failing allocation in a
// loop must not flood stderr or events.log. Driven by the caller's clock so it is testable.
#pragma once

#include <cstdint>

namespace gpuslice::profiler {

class RefusalLimiter {
 public:
  static constexpr std::uint64_t kWindowNs = 1'000'000'000;
  static constexpr unsigned kMaxPerWindow = 10;
  static constexpr int kRememberedKeys = 16;

  struct Verdict {
    bool report = false;
    std::uint64_t suppressed_before = 0;  // refusals not reported since the previous report
  };

  // Not thread-safe; the caller serialises.
  Verdict admit(int device, std::uint64_t requested, std::uint64_t now_ns) {
    Key* key = find(device, requested);
    if (key != nullptr && now_ns - key->last_report_ns < kWindowNs) return suppress();
    if (!window_open_ || now_ns - window_start_ns_ >= kWindowNs) {
      window_open_ = true;
      window_start_ns_ = now_ns;
      reports_in_window_ = 0;
    }
    if (reports_in_window_ >= kMaxPerWindow) return suppress();
    ++reports_in_window_;
    if (key == nullptr) key = slot_for_new_key();
    *key = Key{true, device, requested, now_ns};
    Verdict verdict{true, suppressed_};
    suppressed_ = 0;
    return verdict;
  }

 private:
  struct Key {
    bool used = false;
    int device = 0;
    std::uint64_t requested = 0;
    std::uint64_t last_report_ns = 0;
  };

  Verdict suppress() {
    ++suppressed_;
    return Verdict{};
  }

  Key* find(int device, std::uint64_t requested) {
    for (Key& key : keys_) {
      if (key.used && key.device == device && key.requested == requested) return &key;
    }
    return nullptr;
  }

  // An unused slot, else the one reported longest ago.
  Key* slot_for_new_key() {
    Key* oldest = &keys_[0];
    for (Key& key : keys_) {
      if (!key.used) return &key;
      if (key.last_report_ns < oldest->last_report_ns) oldest = &key;
    }
    return oldest;
  }

  Key keys_[kRememberedKeys]{};
  bool window_open_ = false;
  std::uint64_t window_start_ns_ = 0;
  unsigned reports_in_window_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace gpuslice::profiler
