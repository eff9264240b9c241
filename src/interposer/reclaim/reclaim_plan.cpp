#include "interposer/reclaim/reclaim_plan.h"

#include <algorithm>

namespace gpuslice::interposer::reclaim {

bool may_ask(const Asker& asker, const Holder& holder) {
  if (asker.wanted == 0 || asker.container_key == holder.container_key) return false;
  return asker.within_guarantee || priority_value(asker.priority) > priority_value(holder.priority);
}

namespace {

// Holder `a` gives before holder `b`.
bool gives_first(const Holder& a, const Holder& b) {
  if (a.priority != b.priority) return priority_value(a.priority) < priority_value(b.priority);
  if (a.above_guarantee != b.above_guarantee) return a.above_guarantee > b.above_guarantee;
  if (a.container_key != b.container_key) return a.container_key < b.container_key;
  if (a.movable != b.movable) return a.movable > b.movable;
  return a.pid < b.pid;
}

}  // namespace

std::uint64_t share_of(const Holder* holders, std::size_t holder_count, std::size_t self, const Asker* askers,
                       std::size_t asker_count, std::uint64_t device_free) {
  if (self >= holder_count) return 0;
  const Holder& me = holders[self];
  // What the askers entitled against this holder want, beyond the free memory.
  std::uint64_t wanted = 0;
  for (std::size_t a = 0; a < asker_count; ++a) {
    if (may_ask(askers[a], me)) wanted += askers[a].wanted;
  }
  if (wanted <= device_free) return 0;
  std::uint64_t need = wanted - device_free;
  // The holders those same askers may ask, in giving order; self is among them.
  constexpr std::size_t kMax = 256;
  const Holder* order[kMax] = {};
  std::size_t count = 0;
  order[count++] = &me;  // a reader of more than kMax holders plans with the first it read
  for (std::size_t h = 0; h < holder_count && count < kMax; ++h) {
    bool askable = false;
    for (std::size_t a = 0; a < asker_count && !askable; ++a) askable = may_ask(askers[a], holders[h]);
    if (askable && h != self) order[count++] = &holders[h];
  }
  std::sort(order, order + count, [](const Holder* a, const Holder* b) { return gives_first(*a, *b); });
  // Each container gives at most what it holds above its guarantee, shared by its processes in order.
  struct Given {
    std::uint64_t key;
    std::uint64_t bytes;
  };
  Given given[kMax] = {};
  std::size_t containers = 0;
  for (std::size_t i = 0; i < count && need > 0; ++i) {
    const Holder& h = *order[i];
    std::size_t c = 0;
    while (c < containers && given[c].key != h.container_key) ++c;
    if (c == containers) given[containers++] = {h.container_key, 0};
    const std::uint64_t room = h.above_guarantee > given[c].bytes ? h.above_guarantee - given[c].bytes : 0;
    const std::uint64_t gives = std::min({need, room, h.movable});
    given[c].bytes += gives;
    need -= gives;
    if (&h == &me) return gives;
  }
  return 0;
}

}  // namespace gpuslice::interposer::reclaim
