#!/usr/bin/env bash
# Writes two fixtures with the other implementation of layout v1
# (github.com/thicclatka/tetration, CLI `tet`) and prints its own answers to queries on
# them, which tests/tests/dims.rs holds (where the data agree) as the expected values:
#
# * tests/tests/data/peer/zarr_fill.tet: a Zarr v3 store whose arrays carry CF attrs
#   (`units`, `long_name`, `_FillValue`, `missing_value`), converted by its `tet convert`
#   (which takes dimension names and labels only from NetCDF and HDF5, build features
#   its binary here lacks);
# * tests/tests/data/peer/session_dims.tet: `dim_names`, coordinate labels and attrs
#   written by its session writer (`TetWriterSession`, its public API), through a
#   ten-line program compiled with rustc against the library its release build left
#   (target/release/libtetration.rlib; no download).
#
# The other direction (its `tet` reading our dims, coords and attrs) is check_peer.sh.
# Run by hand.
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

release=$(dirname "$peer")
cat > fix.rs <<'RS'
use std::collections::BTreeMap;
use tetration::catalog::{CoordAxisV1, TetDatasetWrite, TetWriterSession};

fn main() {
    let out = std::env::args().nth(1).expect("output path");
    let mut s = TetWriterSession::create(&out);
    s.metadata.tool = Some("tetration session (fixture)".to_owned());
    s.push_history_event("write", "peer dims fixture");
    let mut v: Vec<f32> = (0..12).map(|i| i as f32 * 1.5).collect();
    v[4] = -9999.0;
    v[9] = -9999.0;
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut d = TetDatasetWrite::f32_row_major("temperature", &[4, 3], &[2, 3], bytes).unwrap();
    d.attrs.insert("units".to_owned(), "K".to_owned());
    d.attrs.insert("_FillValue".to_owned(), "-9999".to_owned());
    d.dim_names = Some(vec!["time".to_owned(), "station".to_owned()]);
    let labels = |l: &[&str]| CoordAxisV1 { labels: l.iter().map(|s| s.to_string()).collect() };
    let mut c = BTreeMap::new();
    c.insert("time".to_owned(), labels(&["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]));
    c.insert("station".to_owned(), labels(&["A", "B", "C"]));
    d.coords = Some(c);
    s.push_dataset(d).unwrap();
    s.commit().unwrap();
}
RS
rustc --edition 2024 -O -C panic=abort -L "$release/deps" \
    --extern tetration="$release/libtetration.rlib" fix.rs -o fix
./fix "$work/dims.tet"
"$peer" verify --deep -q dims.tet
"$peer" info dims.tet | sed -n '/datasets:/,$p'
for q in '{"dataset": "temperature", "mean": "time"}' '{"dataset": "temperature", "sum": {"axes": ["station"]}}' \
         '{"dataset": "temperature", "selection": [{"start_label": "2024-01-02", "stop_label": "2024-01-04"}, {"start_label": "B"}], "sum": []}' \
         '{"dataset": "temperature", "null_count": []}' '{"dataset": "temperature", "null_count": "station"}' \
         '{"dataset": "temperature", "max": "time"}'; do
    echo "$q => $("$peer" query "$q" -t "$work/dims.tet" -x -q 2>/dev/null | head -1)"
done
cp dims.tet "$here/tests/tests/data/peer/session_dims.tet"
