#!/usr/bin/env bash
# Mount benchmarks (docs/benchmarks.md, "Mounting"): the same work on `tet-host mount`
# (cetrafs), on `fuse2fs` mounting an ext4 image of the same size (the same FUSE path),
# and on this machine's own filesystem (the ceiling), side by side in one run. Each
# figure runs to the same durability point, unmount included: the FUSE ones end when
# the unmount has returned and the mount process has exited (cetrafs: journal clean and
# row LEFT; fuse2fs: its flush at unmount), the native one with `sync -f`.
#   cp -a of a tree of 10,000 small files (100 directories of 100 files, 1-4 KiB)
#   writing a 1 GiB file sequentially (1 MiB writes), then reading it back after a
#     fresh mount (page cache dropped where the kernel lets us)
#   ls -lR of the tree after a fresh mount
# Usage: tests/mount/bench.sh [WORKDIR]   (root, /dev/fuse, fuse2fs and e2fsprogs)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p tet-host
BIN=$PWD/target/release/tet-host
W=${1:-$PWD/target/mount-bench}
umount -l "$W/mnt" 2>/dev/null || true
rm -rf "$W"; mkdir -p "$W/mnt" "$W/native"
SIZE=3G

# The inputs, made once: the tree and 1 GiB of random bytes.
python3 - "$W" <<'PY'
import os, random, sys
w = sys.argv[1]; r = random.Random(1)
for d in range(100):
    p = os.path.join(w, "tree", "d%02d" % d); os.makedirs(p)
    for f in range(100):
        with open(os.path.join(p, "f%02d" % f), "wb") as h:
            h.write(r.randbytes(r.randint(1024, 4096)))
with open(os.path.join(w, "big.src"), "wb") as h:
    for _ in range(1024):
        h.write(r.randbytes(1 << 20))
PY
sync

now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

mount_fs() { # kind
  case $1 in
    cetrafs) "$BIN" mount "$W/img.cetrafs" "$W/mnt" ;;
    fuse2fs) fuse2fs "$W/img.ext4" "$W/mnt" -o rw ;;
  esac
  for _ in $(seq 200); do mountpoint -q "$W/mnt" && return; sleep 0.05; done
  echo "mount $1 did not come up" >&2; exit 1
}
pattern() { case $1 in cetrafs) echo "tet-host mount $W/img.cetrafs" ;; fuse2fs) echo "fuse2fs $W/img.ext4" ;; esac; }
unmount_fs() { # kind: returns after the mount process has exited
  umount "$W/mnt"
  while pgrep -f "$(pattern $1)" >/dev/null; do sleep 0.02; done
}

declare -A R
for kind in cetrafs fuse2fs native; do
  case $kind in
    cetrafs) "$BIN" mkfs "$W/img.cetrafs" --size $SIZE --inodes 16384 >/dev/null; dst=$W/mnt ;;
    fuse2fs) truncate -s $SIZE "$W/img.ext4"; mkfs.ext4 -q -F -N 16384 "$W/img.ext4"; dst=$W/mnt ;;
    native) dst=$W/native ;;
  esac
  # cp -a of the tree.
  drop; t0=$(now)
  [ $kind = native ] || mount_fs $kind
  cp -a "$W/tree" "$dst/tree"
  if [ $kind = native ]; then sync -f "$dst"; else unmount_fs $kind; fi
  R[$kind,cp]=$(secs "$t0" "$(now)")
  # 1 GiB written sequentially.
  drop; t0=$(now)
  [ $kind = native ] || mount_fs $kind
  dd if="$W/big.src" of="$dst/big" bs=1M status=none
  if [ $kind != native ]; then
    # Peak memory of the mount process so far (after the tree and the 1 GiB write).
    pid=$(pgrep -f "$(pattern $kind)" | head -1)
    R[$kind,hwm]=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
  fi
  if [ $kind = native ]; then sync -f "$dst"; else unmount_fs $kind; fi
  R[$kind,write]=$(secs "$t0" "$(now)")
  # Read back after a fresh mount.
  drop; t0=$(now)
  [ $kind = native ] || mount_fs $kind
  cmp "$W/big.src" "$dst/big"
  R[$kind,read]=$(secs "$t0" "$(now)")
  [ $kind = native ] || unmount_fs $kind
  # ls -lR after a fresh mount.
  drop; t0=$(now)
  [ $kind = native ] || mount_fs $kind
  ls -lR "$dst/tree" >/dev/null
  [ $kind = native ] || unmount_fs $kind
  R[$kind,ls]=$(secs "$t0" "$(now)")
done
[ "$(id -u)" = 0 ] && "$BIN" verify "$W/img.cetrafs" >/dev/null && echo "cetrafs image verifies clean"

printf '\n| work | tet-host mount (s) | fuse2fs (s) | native %s (s) |\n|---|---|---|---|\n' "$(df -T "$W" | awk 'NR==2{print $2}')"
printf '| cp -a, 10,000 files of 1-4 KiB | %s | %s | %s |\n' "${R[cetrafs,cp]}" "${R[fuse2fs,cp]}" "${R[native,cp]}"
printf '| 1 GiB sequential write | %s | %s | %s |\n' "${R[cetrafs,write]}" "${R[fuse2fs,write]}" "${R[native,write]}"
printf '| 1 GiB read back (cmp) | %s | %s | %s |\n' "${R[cetrafs,read]}" "${R[fuse2fs,read]}" "${R[native,read]}"
printf '| ls -lR of the tree | %s | %s | %s |\n' "${R[cetrafs,ls]}" "${R[fuse2fs,ls]}" "${R[native,ls]}"
printf '| peak RSS of the mount process (KiB) | %s | %s | - |\n' "${R[cetrafs,hwm]}" "${R[fuse2fs,hwm]}"
