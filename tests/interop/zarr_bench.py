#!/usr/bin/env python3
"""The Zarr convert benchmark of docs/benchmarks.md.

    python3 tests/interop/zarr_bench.py make STORE.zarr             # 2 GiB f32, zstd, 1 MiB chunks
    python3 tests/interop/zarr_bench.py make STORE.zarr --checksum  # the same, frames checksummed
    python3 tests/interop/zarr_bench.py read STORE.zarr             # zarr-python reads it into NumPy

The store is (512, 1024, 1024) float32 in (1, 512, 512) chunks (1 MiB each) compressed
with zstd level 3 (without a content checksum, zarr-python's default, unless --checksum):
a smooth field plus noise rounded to 1/1024, so it compresses about as much as measured
data does. Written slab by slab; the same values either way (the generator is seeded).
"""
import sys
import time

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

mode, path = sys.argv[1], sys.argv[2]
shape, chunks = (512, 1024, 1024), (1, 512, 512)
if mode == "make":
    a = zarr.create_array(
        path, shape=shape, chunks=chunks, dtype="<f4", fill_value=0.0,
        compressors=[ZstdCodec(level=3, checksum="--checksum" in sys.argv[3:])], dimension_names=["time", "y", "x"],
        attributes={"units": "K"}, overwrite=True,
    )
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:1024, 0:1024].astype("f4") / 1024
    for t in range(0, shape[0], 16):
        slab = np.stack([np.sin(6 * x + t0 / 50) * np.cos(4 * y) * 20 + 280 for t0 in range(t, t + 16)])
        slab += rng.standard_normal(slab.shape, dtype="f4")
        a[t:t + 16] = np.round(slab * 1024) / 1024
elif mode == "read":
    t0 = time.perf_counter()
    v = zarr.open_array(path, mode="r")[...]
    print(f"zarr-python read {v.nbytes / 2**30:.2f} GiB in {time.perf_counter() - t0:.2f} s")
