#!/usr/bin/env bash
# Host tests of the RM allocation probe, no GPU (a few seconds):
#  1. rm_alloc_decode_test: the decoder against synthetic requests (ASan + UBSan).
#  2. the probe preloaded into rm_alloc_probe_e2e, whose ioctl() lands in a fake RM (libfake_rm.so): the log's
#     lines, the books' sums and peaks, a forked child's own books, an fd number reused by a plain file.
#   bench/gpu/rm_alloc_selftest.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")"
b=${1:-$(mktemp -d)}
mkdir -p "$b"
cflags=(-std=gnu11 -Wall -Wextra -Werror)
gcc "${cflags[@]}" -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -o "$b/rm_alloc_decode_test" \
  rm_alloc_decode_test.c rm_alloc_decode.c
"$b/rm_alloc_decode_test"
gcc "${cflags[@]}" -O2 -shared -fPIC -fvisibility=hidden -o "$b/rm_alloc_probe.so" rm_alloc_probe.c rm_alloc_decode.c \
  -ldl -pthread
gcc "${cflags[@]}" -O2 -shared -fPIC -DFAKE_RM_LIB -o "$b/libfake_rm.so" rm_alloc_probe_e2e.c -ldl
gcc "${cflags[@]}" -O2 -o "$b/rm_alloc_probe_e2e" rm_alloc_probe_e2e.c -L"$b" -lfake_rm -Wl,-rpath,"$b"
exports=$(nm -D --defined-only "$b/rm_alloc_probe.so" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exports" = "close close_range dup2 dup3 ioctl rm_probe_count " ] || { echo "FAIL: exports: $exports"; exit 1; }
dev=$(mktemp -d)
log=$dev/log
RM_PROBE_LOG=$log RM_PROBE_DEV_PREFIX=$dev/ LD_PRELOAD=$b/rm_alloc_probe.so "$b/rm_alloc_probe_e2e" "$dev" > "$dev/out"
fail=0
expect() {  # file description pattern
  grep -Eq "$3" "$1" || { echo "FAIL: $2 (no /$3/ in $(basename "$1"))"; fail=1; }
}
parent=$(grep -l 'op=A.*bytes=1073741824' "$log".* || true)
child=
for f in "$log".*; do [ "$f" != "$parent" ] && child=$f; done
if [ -z "$parent" ] || [ -z "$child" ]; then echo "FAIL: expected a log per process:" "$log".*; exit 1; fi
expect "$parent" "header" '^H pid=[0-9]+ t=[0-9]+ clock=CLOCK_MONOTONIC'
expect "$parent" "samples while it ran" '^S t=[0-9]+ local=115343360 local_peak=1189085184'
expect "$parent" "the 100 MiB + 1 allocation as the RM rounded it" '^E op=A .*cls=0x40 .*bytes=106954752 where=local'
expect "$parent" "the explicit free" '^E op=F .*bytes=1073741824 where=local local=115343360'
expect "$parent" "the device's free takes its memory" '^E op=I .*bytes=8388608'
expect "$parent" "totals at exit" '^X version=580.95.05 abi_major=580 .* stale_fds=1 .* local=0 local_peak=1189085184 '
expect "$parent" "six RM_ALLOCs on nvidiactl (one on a number fclose freed), not the plain file's" \
  '^T esc=0x2b name=RM_ALLOC count=6 .*size=48 other_size=-1 '
expect "$parent" "class counts" '^C cls=0x40 count=4 bytes=1193279488'
expect "$child" "the child's own books, the parent's driver version" '^X version=580.95.05 abi_major=580 .* local=67108864 local_peak=67108864 '
grep -q 'reused_fd=1' "$dev/out" || { echo "FAIL: the plain file did not reuse nvidiactl's number"; fail=1; }
grep -q 'stdio_fd_reused=1' "$dev/out" || { echo "FAIL: nvidiactl did not reuse the stdio file's number"; fail=1; }
n_e=$(grep -c '^E ' "$parent")
[ "$n_e" = 8 ] || { echo "FAIL: expected 8 E lines (4 allocs, 1 free, 3 implicit), got $n_e"; fail=1; }
# The opt-in refusal over the same program: its 1 GiB allocation gets NV_ERR_NO_MEMORY (it exits 3).
rm -f "$log".*
rc=0
RM_PROBE_LOG=$log RM_PROBE_DEV_PREFIX=$dev/ RM_PROBE_DENY_LOCAL_ABOVE=$((512 << 20)) LD_PRELOAD=$b/rm_alloc_probe.so \
  "$b/rm_alloc_probe_e2e" "$dev" > "$dev/out" 2>&1 || rc=$?
[ "$rc" = 3 ] || { echo "FAIL: refused allocation: exit $rc, expected 3"; fail=1; }
expect "$(ls "$log".*)" "the refusal in the log" '^E op=R .*bytes=1073741824 where=local local=0'
expect "$(ls "$log".*)" "counted" '^X .*denied=1 denied_bytes=1073741824 '
rm -rf "$dev"
[ "$fail" = 0 ] && echo "rm_alloc_selftest: all passed"
exit "$fail"
