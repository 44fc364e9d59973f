#!/usr/bin/env bash
# Opens files of every kind we write with the other implementation of layout v1
# (github.com/thicclatka/tetration, CLI `tet`): `tet info`, `tet verify --deep` and a
# `sum` query per dataset, compared with ours; for a file with axis metadata (dims,
# coordinate datasets, labels, attrs), the peer's view of it and named, labelled and
# null_count queries on both sides. Run by hand; never by the test command.
#
#   PEER_TET=/path/to/tet bash tests/interop/check_peer.sh
#
# Build the peer beside the checkout (outside this repository), e.g.
#   git clone https://github.com/thicclatka/tetration /work/peer/tetration
#   (cd /work/peer/tetration && cargo build --release --no-default-features)
# Needs python3 (standard library only) to write the .npy/.npz inputs.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
peer=${PEER_TET:-/work/peer/tetration/target/release/tet}
[ -x "$peer" ] || { echo "no peer binary at $peer (set PEER_TET)"; exit 2; }
(cd "$here" && cargo build -q --release -p tet-host) || exit 2
ours="$here/target/release/tet-host"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

python3 - <<'PY'
import struct, zipfile
def npy(descr, shape, fmt, values):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    h += " " * ((64 - (len(h) + 11) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<%d%s" % (len(values), fmt), *values)
cube = [((i * 37) % 101) / 4.0 for i in range(6 * 40 * 50)]
open("cube.npy", "wb").write(npy("<f8", (6, 40, 50), "d", cube))
open("many.npy", "wb").write(npy("|u1", (1 << 21,), "B", [i % 251 for i in range(1 << 21)]))
img = [(i * 7) % 251 for i in range(10 * 64 * 64)]
open("stack.npy", "wb").write(npy("|u1", (10, 64, 64), "B", img))
# Axis metadata: a (time, lat, lon) cube with -9999 fills, hourly i64 times and
# descending latitudes as coordinate datasets, inline longitude labels.
wx = [float(i % 17) for i in range(24 * 5 * 4)]
wx[3] = wx[77] = -9999.0
open("wx.npy", "wb").write(npy("<f4", (24, 5, 4), "f", wx))
open("times.npy", "wb").write(npy("<i8", (24,), "q", [1704067200 + 3600 * h for h in range(24)]))
open("lat.npy", "wb").write(npy("<f8", (5,), "d", [40.0, 30.0, 20.0, 10.0, 0.0]))
with zipfile.ZipFile("pair.npz", "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("mask.npy", npy("|b1", (30, 30), "?", [i % 3 == 0 for i in range(900)]))
    z.writestr("temp.npy", npy("<f4", (30, 30), "f", [i * 0.5 for i in range(900)]))
    z.writestr("ids.npy", npy("<i4", (900,), "i", list(range(-450, 450))))
PY

cp "$here/docs/examples/temperature.tet" example.tet
"$ours" convert cube.npy cube-raw.tet --chunk 2,16,16 --codec raw
"$ours" convert cube.npy cube-zstd.tet --chunk 3,20,25 --codec zstd
"$ours" convert stack.npy stack.tet
# 2 097 152 one-byte chunks: the checksum table is 32 MiB, its descriptor 72 bytes.
"$ours" convert many.npy many.tet --chunk 1 --codec raw
"$ours" convert pair.npz pair.tet --codec zstd
"$ours" convert wx.npy wx.tet --chunk 6,5,4 --dims time,lat,lon --attr units=K \
    --attr _FillValue=-9999 --attr long_name="air temperature" --coord time=times.npy \
    --coord lat=lat.npy --labels lon=w2,w1,e1,e2 --attr "time:units=seconds since 1970-01-01"
# A repaired file: one zstd chunk broken, replaced by zeros, a repair row in the history.
cp cube-zstd.tet broken.tet
python3 - <<'PY'
import struct
b = bytearray(open("broken.tet", "rb").read())
idx = struct.unpack_from("<Q", b, 16)[0]
off, raw, stored = struct.unpack_from("<QQQ", b, idx + 32 + 72)
b[off + stored // 2] ^= 0xFF
open("broken.tet", "wb").write(b)
PY
"$ours" repair broken.tet -y --zero-bad-chunks -o repaired.tet >/dev/null

status=0
for f in example.tet cube-raw.tet cube-zstd.tet stack.tet pair.tet repaired.tet wx.tet many.tet; do
    info=$("$peer" info "$f" 2>&1); i=$?
    ver=$("$peer" verify --deep -q "$f" 2>&1); v=$?
    mine=$("$ours" verify --deep -q "$f" 2>&1)
    echo "== $f: peer info exit $i, peer verify --deep exit $v: $ver; ours: $mine"
    [ $i -eq 0 ] && [ $v -eq 0 ] || { status=1; echo "$info" | head -5; }
    # The peer's query takes over 15 CPU-minutes on 2 million chunks: info and verify only.
    [ "$f" = many.tet ] && continue
    for ds in $("$ours" info "$f" --json | python3 -c 'import json,sys; print(" ".join(d["name"] for d in json.load(sys.stdin)["datasets"]))'); do
        q="{\"dataset\": \"$ds\", \"sum\": []}"
        o=$("$ours" query "$q" -t "$f" -q 2>&1)
        p=$("$peer" query "$q" -t "$work/$f" -x -q 2>&1 | head -1)
        echo "   $ds: ours: $o | peer: $p"
    done
done
# The axis metadata as the peer reads it: dims, labels and attrs (it ignores our
# tet_coords), then the same named and labelled queries on both sides.
echo "== wx.tet metadata as the peer shows it:"
"$peer" info wx.tet 2>&1 | sed -n '/^datasets:/,$p' | sed 's/^/   /'
for q in '{"dataset": "wx", "mean": "time"}' \
         '{"dataset": "wx", "sum": {"axes": ["lat", "lon"]}}' \
         '{"dataset": "wx", "selection": [{}, {}, {"start_label": "w1", "stop_label": "e2"}], "sum": []}' \
         '{"dataset": "wx", "null_count": []}'; do
    o=$("$ours" query "$q" -t wx.tet -q 2>&1)
    p=$("$peer" query "$q" -t "$work/wx.tet" -x -q 2>&1 | grep -v '^warning' | head -1)
    echo "   $q"
    echo "      ours: $o"
    echo "      peer: $p"
    case "$p" in *status=ok*) ;; *) status=1 ;; esac
done
exit $status
