#!/usr/bin/env bash
# Writes tests/tests/data/peer/zarr_convert.tet with the other implementation of layout
# v1 (github.com/thicclatka/tetration, CLI `tet`): a two-array Zarr v3 store (standard
# library Python) converted by its `tet convert`, and prints its own answers, which
# tests/tests/interop.rs holds as the expected values. Run by hand, like check_peer.sh.
#
#   PEER_TET=/path/to/tet bash tests/interop/make_peer_fixture.sh
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
peer=${PEER_TET:-/work/peer/tetration/target/release/tet}
[ -x "$peer" ] || { echo "no peer binary at $peer (set PEER_TET)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 - <<'PY'
import itertools, json, os, struct
root = "store.zarr"
os.makedirs(root)
json.dump({"zarr_format": 3, "node_type": "group", "attributes": {"title": "peer fixture"}},
          open(f"{root}/zarr.json", "w"))
def array(name, dtype, fmt, shape, chunk, values, attrs, dims):
    d = f"{root}/{name}"
    os.makedirs(d)
    json.dump({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
               "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
               "fill_value": 0,
               "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
               "attributes": attrs, "dimension_names": dims}, open(f"{d}/zarr.json", "w"))
    grid = [(s + c - 1) // c for s, c in zip(shape, chunk)]
    for g in itertools.product(*[range(n) for n in grid]):
        out = []
        # Zarr chunks are padded to the full chunk shape (fill 0 past the edge).
        for l in itertools.product(*[range(c) for c in chunk]):
            idx = [gi * c + li for gi, c, li in zip(g, chunk, l)]
            flat = 0
            for i, s in zip(idx, shape):
                flat = flat * s + i
            out.append(values[flat] if all(i < s for i, s in zip(idx, shape)) else 0)
        p = f"{d}/c/" + "/".join(map(str, g))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, "wb").write(struct.pack("<%d%s" % (len(out), fmt), *out))
array("temperature", "float32", "f", [4, 6], [3, 4], [((i * 37) % 101) / 4.0 for i in range(24)],
      {"units": "K"}, ["y", "x"])
array("counts", "int32", "i", [10], [4], [i * i - 20 for i in range(10)],
      {"long_name": "counts"}, ["t"])
PY
"$peer" convert store.zarr out.tet >/dev/null
"$peer" verify --deep -q out.tet
for ds in temperature counts; do
    for op in sum mean min max; do
        "$peer" query "{\"dataset\": \"$ds\", \"$op\": []}" -t "$work/out.tet" -x -q | head -1
    done
done
cp out.tet "$here/tests/tests/data/peer/zarr_convert.tet"
