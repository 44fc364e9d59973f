#!/usr/bin/env bash
# Writes tests/tests/data/peer/zarr_fill.tet with the other implementation of layout v1
# (github.com/thicclatka/tetration, CLI `tet`): a Zarr v3 store whose arrays carry CF
# attributes (`units`, `long_name`, `_FillValue`, `missing_value`), converted by its
# `tet convert`, and prints its own answers to queries that use them (null_count,
# nan_mean), which tests/tests/dims.rs holds as the expected values. Run by hand.
#
# Its `convert` takes dimension names and coordinate labels only from NetCDF and HDF5
# inputs (build features this checkout's binary lacks), so this fixture has attrs only;
# the other direction (its `tet` reading our dim_names, coords and attrs) is in
# check_peer.sh.
#
#   PEER_TET=/path/to/tet bash tests/interop/make_peer_dims_fixture.sh
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
peer=${PEER_TET:-/work/peer/tetration/target/release/tet}
[ -x "$peer" ] || { echo "no peer binary at $peer (set PEER_TET)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 - <<'PY'
import json, os, struct
root = "store.zarr"
os.makedirs(root)
json.dump({"zarr_format": 3, "node_type": "group", "attributes": {}}, open(f"{root}/zarr.json", "w"))
def array(name, dtype, fmt, shape, values, attrs):
    d = f"{root}/{name}"
    os.makedirs(f"{d}/c")
    json.dump({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape}},
               "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
               "fill_value": 0,
               "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
               "attributes": attrs}, open(f"{d}/zarr.json", "w"))
    p = f"{d}/c/" + "/".join("0" for _ in shape)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "wb").write(
        struct.pack("<%d%s" % (len(values), fmt), *values))
t = [float(i) / 2 for i in range(12)]
t[1] = -9999.0
t[7] = -9999.0
array("sst", "float64", "d", [3, 4], t, {"units": "K", "long_name": "sea surface temperature", "_FillValue": "-9999"})
array("sst32", "float32", "f", [3, 4], t, {"units": "K", "_FillValue": "-9999"})
c = [i * 3 for i in range(8)]
c[2] = -1
array("obs", "int32", "i", [8], c, {"missing_value": "-1"})
PY
"$peer" convert store.zarr out.tet >/dev/null
"$peer" verify --deep -q out.tet
"$peer" info out.tet | sed -n '/datasets:/,$p'
for q in '{"dataset": "sst", "null_count": []}' '{"dataset": "sst", "null_count": {"axis": 0}}' \
         '{"dataset": "sst", "nan_mean": []}' '{"dataset": "sst", "sum": []}' \
         '{"dataset": "sst32", "null_count": []}' '{"dataset": "sst32", "null_count": {"axis": 0}}' \
         '{"dataset": "sst32", "nan_mean": []}' \
         '{"dataset": "obs", "null_count": []}' '{"dataset": "obs", "sum": []}'; do
    echo "$q => $("$peer" query "$q" -t "$work/out.tet" -x -q 2>/dev/null | head -1)"
done
cp out.tet "$here/tests/tests/data/peer/zarr_fill.tet"
