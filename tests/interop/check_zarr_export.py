#!/usr/bin/env python3
"""Converts a Zarr v3 store with tet-host, exports the .tet back to Zarr, and checks with
zarr-python that every array of the exported store has the source's values (NaN equal to
NaN), dtype, shape, fill value, dimension names and attributes.

    python3 tests/interop/check_zarr_export.py TET_HOST STORE.zarr WORKDIR
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import zarr

tet_host, store, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
work.mkdir(parents=True, exist_ok=True)
tet = work / "check.tet"
out = work / "check.zarr"
subprocess.run([tet_host, "convert", str(store), str(tet), "--force"], check=True)
subprocess.run([tet_host, "export", str(tet), str(out), "--force"], check=True)
src = zarr.open_group(str(store), mode="r")
got = zarr.open_group(str(out), mode="r")
bad = 0
count = 0
for path, a in src.members(max_depth=None):
    if not isinstance(a, zarr.Array):
        continue
    count += 1
    b = got[path]
    problems = []
    if a.dtype != b.dtype or a.shape != b.shape:
        problems.append(f"dtype/shape {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
    elif not np.array_equal(np.asarray(a[...]), np.asarray(b[...]), equal_nan=a.dtype.kind == "f"):
        problems.append("values differ")
    if dict(a.attrs) != dict(b.attrs):
        problems.append(f"attributes {dict(a.attrs)} vs {dict(b.attrs)}")
    if a.metadata.dimension_names != b.metadata.dimension_names:
        problems.append(f"dimension_names {a.metadata.dimension_names} vs {b.metadata.dimension_names}")
    fa, fb = a.metadata.fill_value, b.metadata.fill_value
    if not (fa == fb or (fa != fa and fb != fb)):
        problems.append(f"fill_value {fa} vs {fb}")
    for p in problems:
        print(f"{path}: {p}")
    bad += bool(problems)
print(f"zarr-python read {count} exported arrays: {count - bad} equal to the source")
sys.exit(1 if bad else 0)
