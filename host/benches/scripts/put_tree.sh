#!/bin/sh
# `tet-host put` against `mkfs --from` (a tree of 10,000 small files) and against
# `debugfs -w` (one 1 GiB file), in one run (docs/benchmarks.md, "cetrafs writing").
#   host/benches/scripts/put_tree.sh [TET_HOST] [DIR]
# TET_HOST defaults to target/release/tet-host, DIR to a fresh directory under /tmp.
# TREE_ONLY=1 only makes the tree (DIR/tree); PAIRS=N sets the number of back-to-back
# pairs (default 3); BIG=1 adds the 1 GiB file against debugfs (needs e2fsprogs), and
# TREE=0 leaves the tree's pairs out.
# The tree: 10,000 files of 1-8000 bytes (seeded) in 100 directories.
set -eu
BIN=${1:-target/release/tet-host}
DIR=${2:-$(mktemp -d /tmp/tet-put-bench.XXXXXX)}
PAIRS=${PAIRS:-3}
mkdir -p "$DIR"
if [ ! -d "$DIR/tree" ]; then
    python3 - "$DIR/tree" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(27)
for d in range(100):
    sub = os.path.join(root, "d%03d" % d)
    os.makedirs(sub)
    for f in range(100):
        n = rng.randint(1, 8000)
        with open(os.path.join(sub, "f%03d" % f), "wb") as out:
            out.write(rng.randbytes(n))
PY
fi
[ "${TREE_ONLY:-0}" = 1 ] && { echo "$DIR/tree"; exit 0; }
timed() { # label command... : prints "label wall_s peak_kib"
    label=$1; shift
    sync
    /usr/bin/time -f "%e %M" -o "$DIR/time" "$@" > /dev/null
    echo "$label $(cat "$DIR/time")"
}
i=1
[ "${TREE:-1}" = 0 ] && i=$((PAIRS + 1))
while [ "$i" -le "$PAIRS" ]; do
    rm -f "$DIR/mk.img" "$DIR/put.img"
    timed "mkfs--from" "$BIN" mkfs "$DIR/mk.img" --from "$DIR/tree"
    "$BIN" mkfs "$DIR/put.img" --size "$(stat -c %s "$DIR/mk.img")" --inodes 12600 > /dev/null
    timed "put-tree" "$BIN" put "$DIR/put.img" "$DIR/tree" /tree
    "$BIN" verify "$DIR/put.img" > /dev/null
    i=$((i + 1))
done
if [ "${BIG:-0}" = 1 ]; then
    [ -f "$DIR/src1g" ] || head -c 1G /dev/urandom > "$DIR/src1g"
    i=1
    while [ "$i" -le "$PAIRS" ]; do
        rm -f "$DIR/big.img" "$DIR/ext.img"
        "$BIN" mkfs "$DIR/big.img" --size 2G > /dev/null
        timed "put-1GiB" "$BIN" put "$DIR/big.img" "$DIR/src1g" /big
        "$BIN" verify "$DIR/big.img" > /dev/null
        mkfs.ext4 -q -F -b 4096 "$DIR/ext.img" 2G > /dev/null 2>&1
        timed "debugfs-1GiB" debugfs -w -R "write $DIR/src1g big" "$DIR/ext.img" 2> /dev/null
        i=$((i + 1))
    done
fi
