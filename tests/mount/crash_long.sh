#!/usr/bin/env bash
# The long crash run of the mount (issue 28): ROUNDS rounds (default 40) of a workload
# that creates, rewrites and fsyncs files on a read-write mount, killed with SIGKILL at a
# seeded random moment (0.3 to 1.5 s in); after each, the recovery the protocol defines
# (`tet-host replay --force` on even rounds, the node's next mount on odd ones), verify
# clean with every journal CLEAN and row LEFT, and every file whose fsync returned read
# back exactly. The test command runs 3 rounds of the same test. SIZE is the image's
# (default 256M, mkfs's 16-slot journals; 1G or more gives its 256-slot ones).
# Usage: tests/mount/crash_long.sh [ROUNDS] [SIZE]
set -euo pipefail
cd "$(dirname "$0")/../.."
MOUNT_CRASH_ROUNDS="${1:-40}" MOUNT_CRASH_SIZE="${2:-256M}" cargo test -p tet-host --test mount_cli -- --nocapture \
  kill9_during_a_workload_then_recover
