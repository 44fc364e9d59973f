"""The other implementation's `tet convert` beside ours on the same sources (issue 26):
an h5py file, a netCDF4-python file and the Zarr fixture store. Each source is
converted by both; every dataset both files hold is read back through `tetrs` (our
reader opens the other implementation's files) and compared element for element. Prints
one line per dataset (same, differs, only ours, only theirs) and per refusal; the result
goes into docs/benchmarks.md. The test command does not run it: it needs the other
implementation's build (`cargo build --release --bin tet` of thicclatka/tetration).

Usage: python peer_convert.py TET_HOST PEER_TET WORKDIR
"""

import os
import subprocess
import sys

import h5py
import netCDF4
import numpy as np

import tetrs

OURS, PEER, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
ZARR = os.path.join(os.path.dirname(__file__), "..", "..", "host", "tests", "fixtures",
                    "zarr", "fixture.zarr")


def sources():
    h5 = os.path.join(WORK, "peer.h5")
    r = np.random.default_rng(5)
    with h5py.File(h5, "w") as f:
        for t in ["|u1", "|i1", "<i2", ">i4", "<u8", "<f4", ">f8", "|b1"]:
            d = np.dtype(t)
            if d.kind == "b":
                a = r.integers(0, 2, size=(17, 9)).astype(bool)
            elif d.kind == "f":
                a = r.normal(0, 50, size=(17, 9)).astype(d)
            else:
                lo = -100 if d.kind == "i" else 0
                a = r.integers(lo, 100, size=(17, 9)).astype(d)
            name = t.replace("<", "le_").replace(">", "be_").replace("|", "")
            f.create_dataset(name, data=a, chunks=(5, 4), compression="gzip")
        f.create_dataset("grp/inner", data=np.arange(30, dtype="<f8").reshape(5, 6))
    nc = os.path.join(WORK, "peer.nc")
    with netCDF4.Dataset(nc, "w", format="NETCDF4") as f:
        f.createDimension("time", 4)
        f.createDimension("x", 3)
        f.createVariable("time", "f8", ("time",))[:] = [0, 6, 12, 18]
        f.createVariable("x", "f4", ("x",))[:] = [1, 2, 3]
        v = f.createVariable("tas", "i2", ("time", "x"), zlib=True, fill_value=np.int16(-999))
        v.scale_factor = np.float32(0.5)
        v.set_auto_maskandscale(False)
        v[:] = np.array([[1, 2, 3], [4, -999, 6], [7, 8, 9], [10, 11, 12]], dtype="i2")
        g = f.createGroup("g")
        g.createVariable("n", "u4", ("x",))[:] = [5, 6, 7]
    # The same without packing (the other implementation decodes CF packing of floats
    # only).
    plain = os.path.join(WORK, "peer-plain.nc")
    with netCDF4.Dataset(plain, "w", format="NETCDF4") as f:
        f.createDimension("time", 4)
        f.createDimension("x", 3)
        f.createVariable("time", "f8", ("time",))[:] = [0, 6, 12, 18]
        f.createVariable("x", "f4", ("x",))[:] = [1, 2, 3]
        f.createVariable("tas", "f4", ("time", "x"), zlib=True)[:] = np.arange(12.0).reshape(4, 3)
        f.createVariable("flag", "i1", ("x",))[:] = [-3, 0, 3]
        g = f.createGroup("g")
        g.createVariable("n", "u4", ("x",))[:] = [5, 6, 7]
    return [("h5py file", h5), ("netCDF4 file, packed int16", nc),
            ("netCDF4 file, no packing", plain), ("Zarr fixture store", ZARR)]


def convert(tool, src, out, extra):
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([tool, "convert", src, out, *extra], capture_output=True, text=True)
    return r.returncode, (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]


same = differs = 0
for label, src in sources():
    ours, theirs = os.path.join(WORK, "ours.tet"), os.path.join(WORK, "theirs.tet")
    c1, e1 = convert(OURS, src, ours, ["--skip-unsupported"] if not src.endswith(".zarr") else [])
    c2, e2 = convert(PEER, src, theirs, [])
    print(f"== {label}: ours exit {c1}, theirs exit {c2}")
    if c2 != 0:
        print(f"   theirs refused: {e2[0]}")
    if c1 != 0:
        print(f"   ours refused: {e1[0]}")
    if c1 != 0 or c2 != 0:
        continue
    a, b = tetrs.open(ours), tetrs.open(theirs)
    names_a, names_b = set(a), set(b)
    for n in sorted(names_a | names_b):
        if n not in names_b:
            print(f"   {n}: only ours")
            continue
        if n not in names_a:
            print(f"   {n}: only theirs")
            continue
        x, y = a[n][...], b[n][...]
        if x.shape == y.shape and np.array_equal(x.astype("f8"), y.astype("f8"), equal_nan=True):
            same += 1
            note = "" if x.dtype == y.dtype else f" (ours {x.dtype}, theirs {y.dtype})"
            print(f"   {n}: same values{note}")
        else:
            differs += 1
            print(f"   {n}: DIFFERS: ours {x.dtype}{x.shape} {x.ravel()[:4]}, "
                  f"theirs {y.dtype}{y.shape} {y.ravel()[:4]}")
print(f"summary: {same} datasets the same, {differs} differ")
