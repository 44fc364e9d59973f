#!/usr/bin/env python3
"""Writes the Zarr v3 fixture store of host/tests/zarr_cli.rs with zarr-python, and
expected.json beside it: per array its path, NumPy descr, shape, the little-endian bytes
of its values (hex), dimension names, attributes and fill value.

    python3 tests/interop/make_zarr_fixtures.py host/tests/fixtures/zarr

Needs zarr (3.x) and numpy. The store covers every dtype .tet can hold (bool and int8
included), chunked with partial edge chunks and contiguous (one chunk), missing chunks,
every default codec of zarrs (bytes little and big endian, transpose, zstd, gzip, blosc,
crc32c, sharding), nested groups, dimension names and attributes (a CF _FillValue on one).
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

out = Path(sys.argv[1])
store_dir = out / "fixture.zarr"
if store_dir.exists():
    shutil.rmtree(store_dir)
root = zarr.open_group(str(store_dir), mode="w", zarr_format=3)
expected = {}


def add(path, data, chunks, dims=None, attrs=None, fill=0, **kw):
    group, _, name = path.rpartition("/")
    g = root.require_group(group) if group else root
    a = g.create_array(
        name,
        shape=data.shape,
        chunks=chunks,
        dtype=data.dtype,
        fill_value=fill,
        dimension_names=dims,
        attributes=attrs or {},
        **kw,
    )
    a[...] = data
    values = np.asarray(a[...])
    le = values.astype(values.dtype.newbyteorder("<"))
    expected[path] = {
        "descr": le.dtype.str,
        "shape": list(values.shape),
        "hex": le.tobytes().hex(),
        "dims": dims,
        "attrs": attrs or {},
        "fill_value": a.metadata.to_dict()["fill_value"],
    }


rng = np.random.default_rng(26)
# float32, zstd, partial edge chunks, names and attributes.
add(
    "temperature",
    rng.standard_normal((5, 7)).astype("<f4"),
    (2, 3),
    dims=["lat", "lon"],
    attrs={"units": "K", "long_name": "air temperature", "scale": 2.5, "flags": [1, 2]},
    fill=float("nan"),
    compressors=[ZstdCodec(level=3)],
)
# int8 with negatives (stays int8 through export), gzip.
add("small/int8", np.arange(-64, 64, 3, dtype="i1").reshape(43), (10,), compressors=[GzipCodec()])
# bool, no compressor, one chunk (contiguous).
add("small/flags", (np.arange(12) % 3 == 0).reshape(3, 4), (3, 4), compressors=None, fill=False)
# Big-endian uint16.
add(
    "big_endian",
    np.arange(30, dtype=">u2").reshape(5, 6) * 1000,
    (2, 4),
    serializer=BytesCodec(endian="big"),
    compressors=None,
)
# int32 with missing chunks (only the first row block written; the rest is fill 7).
data = np.full((6, 6), 7, dtype="<i4")
data[:2, :] = np.arange(12).reshape(2, 6) - 5
add("missing", data, (2, 3), fill=7, attrs={"_FillValue": 7}, dims=["y", "x"])
# float64, blosc.
add("blosc_f64", rng.standard_normal((4, 9)), (3, 4), compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")])
# int64 through transpose and crc32c.
add(
    "nested/deeper/transposed",
    np.arange(24, dtype="<i8").reshape(2, 3, 4) * -3,
    (2, 2, 3),
    filters=[TransposeCodec(order=(2, 0, 1))],
    compressors=[Crc32cCodec()],
)
# uint32, sharded (2x2 inner chunks of shards 4x4), one inner chunk left empty.
sh = np.arange(36, dtype="<u4").reshape(6, 6) + 100
sh[0:2, 0:2] = 0
add("sharded", sh, (2, 2), shards=(4, 4), compressors=[ZstdCodec(level=1)])
# float16, uint8, uint64, int16, uint16 and float32 one-chunk.
add("types/f16", (np.arange(10, dtype="<f2") / 4), (4,))
add("types/u8", np.arange(256, dtype="u1"), (100,))
add("types/u64", np.array([0, 1, 2**63, 2**64 - 1], dtype="<u8"), (3,))
add("types/i16", np.array([-32768, -1, 0, 32767], dtype="<i2"), (4,))
add("types/u32", np.array([4294967295, 0, 5], dtype="<u4"), (2,))

(out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
print(f"wrote {store_dir} and {out / 'expected.json'}")
