#!/bin/sh
# Peak memory and wall time of `tet-host export` of a whole dataset (200 MB and 1 GB of
# f32) into a .npy, beside a plain `cp` of a .npy of the same size, in one run.
#   host/benches/scripts/export_stream.sh [TET_HOST] [DIR]
# TET_HOST defaults to target/release/tet-host, DIR to a fresh directory under /tmp.
# Arrays are made by tet-host's own example-free path: a .npy written with a header and
# a smooth f32 field (python3, standard library only), converted with `tet-host convert`.
set -eu
BIN=${1:-target/release/tet-host}
DIR=${2:-$(mktemp -d /tmp/tet-export-bench.XXXXXX)}
mkdir -p "$DIR"
make_npy() { # rows cols out
    python3 - "$1" "$2" "$3" <<'PY'
import struct, sys, math, array
rows, cols, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
h += " " * ((64 - (len(h) + 11) % 64) % 64) + "\n"
with open(out, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
    base = array.array("f", [math.sin(j * 0.001) for j in range(cols)])
    for i in range(rows):
        row = array.array("f", [v + i * 0.25 for v in base])
        f.write(row.tobytes())
PY
}
measure() { # label command...
    label=$1; shift
    sync
    best=""
    for _ in 1 2 3; do
        /usr/bin/time -f '%e %M' -o "$DIR/time.txt" "$@" >/dev/null 2>"$DIR/err.txt" || { cat "$DIR/err.txt"; exit 1; }
        read -r wall rss < "$DIR/time.txt"
        line="$wall s, max RSS $(awk -v k="$rss" 'BEGIN{printf "%.1f", k/1024}') MiB"
        if [ -z "$best" ] || awk -v a="$wall" -v b="$bw" 'BEGIN{exit !(a<b)}'; then best=$line; bw=$wall; fi
    done
    echo "| $label | $best |"
}
for spec in "12800 4096 200MB" "16384 16384 1GiB"; do
    set -- $spec
    rows=$1; cols=$2; tag=$3
    npy="$DIR/a$tag.npy"; tet="$DIR/a$tag.tet"
    [ -f "$npy" ] || make_npy "$rows" "$cols" "$npy"
    for codec in raw zstd; do
        t="$DIR/a$tag-$codec.tet"
        [ -f "$t" ] || "$BIN" convert "$npy" "$t" --name a --chunk 256,1024 --codec "$codec" --level 1 >/dev/null
        measure "export $tag f32 [$rows, $cols], 256×1024 chunks, $codec" "$BIN" export "$t" --dataset a "$DIR/out.npy" --force
        cmp -s "$DIR/out.npy" "$npy" || { echo "export of $t differs from $npy"; exit 1; }
        measure "gathered in memory, $codec (query --output: the path export took before)" "$BIN" query '{"dataset": "a"}' -t "$t" --output "$DIR/out.npy" --force
        measure "export $tag, $codec, selection [::3, 5:-5:2]" "$BIN" export "$t" --dataset a "$DIR/out.npy" --force --selection '[{"step": 3}, {"start": 5, "stop": -5, "step": 2}]'
    done
    measure "cp of the $tag .npy (baseline)" cp "$npy" "$DIR/copy.npy"
    measure "cp + fsync of the $tag .npy (baseline: export syncs its output)" sh -c 'cp "$1" "$2" && sync "$2"' sh "$npy" "$DIR/copy.npy"
    rm -f "$DIR/copy.npy" "$DIR/out.npy"
done
echo "files in $DIR"
