"""HDF5 and NetCDF files written by the ecosystem's own writers (h5py, netCDF4-python),
converted by `tet-host convert` (built with the `netcdf` and `hdf5` features) and read
back through the `tetrs` binding: values against NumPy, names, dimensions, coordinates
and attributes against the source, and `--unpack` against netCDF4's own CF decoding.

Usage: python check_hdf5_netcdf.py TET_HOST WORKDIR   (the test command runs it)
"""

import json
import os
import shutil
import subprocess
import sys
import warnings

import h5py
import netCDF4
import numpy as np
import xarray as xr

import tetrs

TET, WORK = sys.argv[1], sys.argv[2]
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def convert(src, out, *extra, code=0):
    r = subprocess.run([TET, "convert", src, out, "--force", *extra],
                       capture_output=True, text=True)
    check(r.returncode == code, f"convert {src} {extra}: exit {r.returncode}, {r.stderr}")
    return r.stderr


def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    check(a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}")
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        check(np.array_equal(a.astype("f8"), b.astype("f8"), equal_nan=True), f"{what}: values")
    else:
        check(np.array_equal(a.astype("i8") if a.dtype != np.uint64 else a,
                             b.astype("i8") if b.dtype != np.uint64 else b), f"{what}: values")


def rng_data(dtype, shape, seed):
    r = np.random.default_rng(seed)
    d = np.dtype(dtype)
    if d.kind == "b":
        return r.integers(0, 2, size=shape).astype(bool)
    if d.kind == "f":
        return r.normal(0, 100, size=shape).astype(d)
    info = np.iinfo(d)
    return r.integers(max(info.min, -10**6), min(info.max, 10**6), size=shape,
                      endpoint=True).astype(d)


# --- h5py: every dtype, both byte orders, chunked and compressed or contiguous, groups,
# dimension scales, attributes of every kind, a string dataset and a scalar.
h5 = os.path.join(WORK, "h5py.h5")
types = ["|b1", "|u1", "|i1", "<u2", ">u2", "<i2", ">i2", "<u4", ">i4", "<u8", ">i8",
         "<f2", ">f2", "<f4", ">f4", "<f8", ">f8"]
written = {}
with h5py.File(h5, "w") as f:
    for k, t in enumerate(types):
        a = rng_data(t, (37, 11), k)
        name = "types/" + t.replace("<", "le_").replace(">", "be_").replace("|", "")
        if k % 2:
            f.create_dataset(name, data=a, chunks=(8, 5), compression="gzip", shuffle=True)
        else:
            f.create_dataset(name, data=a)
        written[name] = a
    time = f.create_dataset("time", data=np.arange(6, dtype="f8") * 3.0)
    time.make_scale("time")
    time.attrs["units"] = "hours since 2000-01-01"
    lat = f.create_dataset("lat", data=np.linspace(-60, 60, 5).astype("f4"))
    lat.make_scale("lat")
    temp = f.create_dataset("deep/er/temp", data=rng_data("<f4", (6, 5), 99), chunks=(2, 5))
    temp.dims[0].attach_scale(time)
    temp.dims[1].attach_scale(lat)
    temp.attrs["units"] = "K"
    temp.attrs["long_name"] = b"air temperature"
    temp.attrs["valid_range"] = np.array([150, 350], dtype="i4")
    temp.attrs["scale"] = np.float32(0.01)
    temp.attrs["flags"] = ["a", "b"]
    written["deep/er/temp"] = temp[...]
    written["time"], written["lat"] = time[...], lat[...]
    f.create_dataset("labels", data=np.array([b"x", b"y"]))
    sc = f.create_dataset("scalar", data=np.float64(1.5))
    sc.attrs["units"] = "m"
    # A soft link is a dataset of its own name; a dangling one is skipped; an empty
    # dataset converts with no chunks; a hard link back to the root is not followed.
    f["alias"] = h5py.SoftLink("/lat")
    written["alias"] = written["lat"]
    f["dangling"] = h5py.SoftLink("/nowhere")
    f.create_dataset("empty", shape=(0, 3), dtype="i4", chunks=(1, 3), maxshape=(None, 3))
    f["deep/back"] = f["/"]

out = os.path.join(WORK, "h5py.tet")
err = convert(h5, out, code=16)
check("dangling" in err and "neither a dataset nor a group" in err, f"the first unsupported entry is named: {err}")
err = convert(h5, out, "--skip-unsupported")
check("skipped" in err and "labels" in err and "dangling" in err and "scalar" not in err,
      f"the skips are listed (a scalar converts): {err}")
check("'deep/back' links back" in err, f"a cycle is named, not followed: {err}")
t = tetrs.open(out)
for name, a in written.items():
    same(t[name][...], a, name)
check(t["types/b1"].dtype == np.uint8, "bool is stored as u8")
check(t["types/i1"].dtype == np.int16, "int8 is widened to i16")
check(t["types/le_f2"].dtype == np.float16, "float16 stays float16")
ds = t["deep/er/temp"]
check(tuple(ds.dims) == ("time", "lat"), f"dimension scales name the axes: {ds.dims}")
check(set(ds.coords) == {"time", "lat"}, f"the scales are the coordinates: {ds.coords}")
check(ds.attrs["units"] == "K" and ds.attrs["long_name"] == "air temperature",
      f"text attrs: {ds.attrs}")
check(ds.attrs["valid_range"] == "[150, 350]" and ds.attrs["scale"] == "0.01",
      f"number attrs: {ds.attrs}")
check(json.loads(ds.attrs["flags"]) == ["a", "b"], f"a list of texts: {ds.attrs}")
check("DIMENSION_LIST" not in ds.attrs and "CLASS" not in t["time"].attrs,
      "the dimension-scale machinery is not copied")
check(tuple(t["time"].dims) == ("time",), "a scale names its own axis")
check(t["empty"].shape == (0, 3), f"an empty dataset: {t['empty'].shape}")
# A scalar is one element marked numpy_shape = [], which export gives back 0-d.
check(t["scalar"].shape == (1,) and t["scalar"].attrs["numpy_shape"] == "[]"
      and t["scalar"].attrs["units"] == "m", f"a scalar: {t['scalar'].shape} {t['scalar'].attrs}")
npy = os.path.join(WORK, "scalar.npy")
r = subprocess.run([TET, "export", out, "--dataset", "scalar", npy, "--force"],
                   capture_output=True, text=True)
check(r.returncode == 0, f"export of a scalar: {r.stderr}")
back = np.load(npy)
check(back.shape == () and back.dtype == np.float64 and back == 1.5, f"a scalar back 0-d: {back!r}")
check(not any(n.startswith("deep/back/") for n in t), "the cycle is not walked")
# The chunking is kept (8 x 5 for the chunked ones), the source's chunk clipped to the shape.
check(t["types/u1"].chunks == (8, 5), f"chunking kept: {t['types/u1'].chunks}")
check(t["deep/er/temp"].chunks == (2, 5), "chunking kept")
# A user block before the HDF5 signature (as MATLAB v7.3 files have).
ub = os.path.join(WORK, "userblock.h5")
with h5py.File(ub, "w", userblock_size=512) as f:
    f.create_dataset("v", data=np.arange(5, dtype="<f8"))
convert(ub, os.path.join(WORK, "userblock.tet"))
same(tetrs.open(os.path.join(WORK, "userblock.tet"))["v"][...], np.arange(5.0), "user block")
# A file named as HDF5 that is not one is damaged input, not "not a .npy file".
fake = os.path.join(WORK, "fake.h5")
with open(fake, "w") as f:
    f.write("not hdf5 at all")
err = convert(fake, os.path.join(WORK, "fake.tet"), code=4)
check("not a readable NetCDF or HDF5 file" in err, f"a fake .h5: {err}")
# A cut file is the file's damage (exit 4), and no output is left.
cut = os.path.join(WORK, "cut.h5")
with open(h5, "rb") as src, open(cut, "wb") as dst:
    dst.write(src.read()[: os.path.getsize(h5) // 2])
cut_out = os.path.join(WORK, "cut.tet")
convert(cut, cut_out, "--skip-unsupported", code=4)
check(not os.path.exists(cut_out), "no half-written output")

# --- netCDF4-python: NetCDF-4 with an unlimited axis, groups, CF packing and coordinate
# variables; and a classic file.
nc = os.path.join(WORK, "nc4.nc")
packed = np.array([[[-500, 20], [7, -32767]], [[1200, 3], [-32767, 0]], [[5, 6], [7, 8]]],
                  dtype="i2")
with netCDF4.Dataset(nc, "w", format="NETCDF4") as f:
    f.title = "nc4 fixture"
    f.Conventions = "CF-1.8"
    f.createDimension("time", None)
    f.createDimension("lat", 2)
    f.createDimension("lon", 2)
    f.createDimension("nv", 2)
    tv = f.createVariable("time", "f8", ("time",))
    tv.units = "days since 2001-01-01"
    tv[:] = [0, 1, 2]
    f.createVariable("lat", "f4", ("lat",))[:] = [10, 20]
    f.createVariable("lon", "f4", ("lon",))[:] = [100, 110]
    v = f.createVariable("tas", "i2", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 2, 2),
                         fill_value=np.int16(-32767))
    v.scale_factor = np.float32(0.1)
    v.add_offset = np.float32(273.15)
    v.units = "K"
    v.grid_mapping = "crs"
    v.set_auto_maskandscale(False)
    v[:] = packed
    # A CF grid-mapping variable: a scalar, converted as one element.
    crs = f.createVariable("crs", "i4")
    crs.grid_mapping_name = "latitude_longitude"
    crs.assignValue(3)
    # A dimension without a coordinate variable (libnetcdf stores it as a scale of
    # zeros, which is not a variable).
    f.createVariable("time_bnds", "f8", ("time", "nv"))[:] = [[0, 1], [1, 2], [2, 3]]
    g = f.createGroup("obs")
    g.comment = "the obs group"
    g.createVariable("count", "u8", ("time",))[:] = [1, 2, 3]
    b = g.createVariable("flag", "i1", ("lat",))
    b[:] = [-1, 1]
with netCDF4.Dataset(nc) as f:
    f.set_auto_maskandscale(True)
    decoded = f["tas"][:].astype("f4").filled(np.nan)

for path, lib in [(nc, "netcdf"), (shutil.copy(nc, os.path.join(WORK, "nc4-as.h5")), "hdf5")]:
    out = os.path.join(WORK, f"nc4-{lib}.tet")
    convert(path, out)
    t = tetrs.open(out)
    same(t["tas"][...], packed, f"{lib}: tas as stored")
    check(t["tas"].dtype == np.int16, f"{lib}: packed values kept as stored")
    check(tuple(t["tas"].dims) == ("time", "lat", "lon"), f"{lib}: dims {t['tas'].dims}")
    check(set(t["tas"].coords) == {"time", "lat", "lon"}, f"{lib}: coords {t['tas'].coords}")
    check(t["tas"].attrs["scale_factor"] == "0.1" and t["tas"].attrs["_FillValue"] == "-32767",
          f"{lib}: packing attributes kept: {t['tas'].attrs}")
    same(t["obs/count"][...], [1, 2, 3], f"{lib}: group variable")
    check(t["tas"].attrs["grid_mapping"] == "crs" and t["crs"].shape == (1,)
          and t["crs"][...][0] == 3 and t["crs"].attrs["numpy_shape"] == "[]"
          and t["crs"].attrs["grid_mapping_name"] == "latitude_longitude",
          f"{lib}: the scalar crs: {t['crs'].shape} {t['crs'].attrs}")
    check("nv" not in list(t), f"{lib}: a dimension is not a dataset: {list(t)}")
    check(tuple(t["time_bnds"].dims) == ("time", "nv") and set(t["time_bnds"].coords) == {"time"},
          f"{lib}: bounds {t['time_bnds'].dims} {t['time_bnds'].coords}")
    same(t["obs/flag"][...], [-1, 1], f"{lib}: int8 widened")
    check(tuple(t["obs/count"].dims) == ("time",), f"{lib}: group dims")
    history = json.loads(subprocess.run([TET, "info", "--json", "--history", out],
                                        capture_output=True, text=True).stdout)
    check(lib in json.dumps(history), f"{lib}: the history row names the reader")
    meta = json.loads(subprocess.run([TET, "info", "--json", "--metadata", out],
                                     capture_output=True, text=True).stdout)["metadata"]
    check(meta["groups"] == [{"group": "/", "attrs": {"title": "nc4 fixture", "Conventions": "CF-1.8"}},
                             {"group": "obs", "attrs": {"comment": "the obs group"}}],
          f"{lib}: global and group attributes: {meta['groups']}")
    # --unpack: the values netCDF4 itself decodes, as float32 (scale_factor's type).
    out = os.path.join(WORK, f"nc4-{lib}-unpacked.tet")
    convert(path, out, "--unpack")
    t = tetrs.open(out)
    check(t["tas"].dtype == np.float32, f"{lib}: unpacked to scale_factor's type")
    got = t["tas"][...]
    check(np.allclose(got, decoded, equal_nan=True, rtol=0, atol=1e-4)
          and np.array_equal(np.isnan(got), np.isnan(decoded)), f"{lib}: --unpack values")
    check("scale_factor" not in t["tas"].attrs and "cf_decoded" in t["tas"].attrs,
          f"{lib}: decoded attributes set aside: {t['tas'].attrs}")

# A missing_value list (CF allows one): every value marks, as xarray masks them, kept
# as stored (null_count counts them) and decoded by --unpack as xarray decodes the file.
mvl = os.path.join(WORK, "mvlist.nc")
stored = np.array([5, -1, -2, -3, -4, 7, -32767, 2], dtype="i2")
with netCDF4.Dataset(mvl, "w", format="NETCDF4") as f:
    f.createDimension("n", stored.size)
    v = f.createVariable("q", "i2", ("n",), fill_value=np.int16(-32767))
    v.missing_value = np.array([-1, -2, -3], dtype="i2")
    v.scale_factor = np.float32(0.5)
    v.set_auto_maskandscale(False)
    v[:] = stored
with xr.open_dataset(mvl, engine="netcdf4") as xd:
    xq = xd["q"].values
check(np.array_equal(np.isnan(xq), np.isin(stored, [-1, -2, -3, -32767])),
      f"xarray masks every listed value: {xq}")
out = os.path.join(WORK, "mvlist.tet")
err = convert(mvl, out)
check("missing_value holds [-1, -2, -3]" in err, f"the list is said: {err}")
t = tetrs.open(out)
same(t["q"][...], stored, "missing_value list: values as stored")
check(t["q"].attrs["missing_value_list"] == "[-1, -2, -3]" and t["q"].attrs["missing_value"] == "-1",
      f"missing_value list kept: {t['q'].attrs}")
for q, want in [("null_count", "4"), ("nan_sum", repr(float(np.nansum(xq.astype("f8")))))]:
    r = subprocess.run([TET, "query", "-t", out, json.dumps({"dataset": "q", q: []}), "-q"],
                       capture_output=True, text=True)
    check(r.stdout == f"q {q} = {want}\n", f"missing_value list {q}: {r.stdout!r} {r.stderr}")
out = os.path.join(WORK, "mvlist-unpacked.tet")
convert(mvl, out, "--unpack")
got = tetrs.open(out)["q"][...]
check(got.dtype == xq.dtype and np.array_equal(got, xq, equal_nan=True),
      f"missing_value list --unpack: {got} against xarray's {xq}")
# Exported to Zarr, the packed variable opens in xarray with the file's decoded values:
# the fill, scale and marker list written back as the numbers xarray reads.
zq = os.path.join(WORK, "mvlist.zarr")
shutil.rmtree(zq, ignore_errors=True)
r = subprocess.run([TET, "export", os.path.join(WORK, "mvlist.tet"), zq],
                   capture_output=True, text=True)
check(r.returncode == 0, f"export mvlist.tet to Zarr: {r.stderr}")
with xr.open_zarr(zq, consolidated=False) as xz:
    zv = xz["q"].values
check(np.array_equal(zv, xq, equal_nan=True),
      f"xarray reads the exported Zarr as the NetCDF file: {zv} against {xq}")

# A scalar exported to Zarr is 0-d again, as xarray reads the NetCDF file, with the
# global attributes on the root group.
zs = os.path.join(WORK, "nc4.zarr")
shutil.rmtree(zs, ignore_errors=True)
r = subprocess.run([TET, "export", os.path.join(WORK, "nc4-netcdf.tet"), zs],
                   capture_output=True, text=True)
check(r.returncode == 0, f"export nc4-netcdf.tet to Zarr: {r.stderr}")
with xr.open_zarr(zs, consolidated=False) as xz, xr.open_dataset(nc, engine="netcdf4") as xd:
    check(xz["crs"].shape == () == xd["crs"].shape and int(xz["crs"].values) == int(xd["crs"].values),
          f"the scalar crs through Zarr: {xz['crs'].shape} {xz['crs'].values}")
    check(xz.attrs.get("title") == xd.attrs["title"], f"global attributes through Zarr: {xz.attrs}")

# A missing_value no element can equal (1e20 on a short, as some CF files hold) is kept
# with a warning and marks nothing, as xarray decodes the file.
odd = os.path.join(WORK, "odd.nc")
with netCDF4.Dataset(odd, "w", format="NETCDF4") as f:
    f.createDimension("n", 4)
    v = f.createVariable("t", "i2", ("n",))
    with warnings.catch_warnings():
        # netCDF4-python warns that the value is no int16 (that is the point), and keeps it.
        warnings.simplefilter("ignore")
        v.missing_value = np.float64(1e20)
    v.set_auto_maskandscale(False)
    v[:] = [1, 2, 3, 4]
with xr.open_dataset(odd, engine="netcdf4") as xd:
    xo = xd["t"].values
out = os.path.join(WORK, "odd.tet")
err = convert(odd, out)
check("warning: 't': attr missing_value" in err and "it marks no element" in err,
      f"an unreachable marker is said: {err}")
r = subprocess.run([TET, "query", "-t", out, json.dumps({"dataset": "t", "nan_mean": []}), "-q"],
                   capture_output=True, text=True)
check(r.stdout == f"t nan_mean = {float(np.nanmean(xo.astype('f8')))!r}\n",
      f"an unreachable marker masks nothing: {r.stdout!r} {r.stderr} against xarray's {xo}")

# NetCDF-3's unsigned bytes and shorts (_Unsigned = "true" on a signed variable of a
# classic file): stored as their unsigned view, as netCDF4-python reads them (its auto
# scale on, its mask off), the markers reinterpreted; --unpack as netCDF4-python
# decodes the file, and as xarray for the byte (xarray reinterprets _FillValue but
# compares missing_value as the signed value, which an unsigned element never equals).
uns = os.path.join(WORK, "unsigned.nc")
ub = np.array([-1, 0, 1, 127, -128, -2], dtype="i1")
us = np.array([-1, 0, 1000, -32768, 32767, -2], dtype="i2")
with netCDF4.Dataset(uns, "w", format="NETCDF3_CLASSIC") as f:
    f.createDimension("n", ub.size)
    v = f.createVariable("b", "i1", ("n",), fill_value=np.int8(-1))
    v._Unsigned = "true"
    v.set_auto_maskandscale(False)
    v[:] = ub
    v = f.createVariable("s", "i2", ("n",))
    v._Unsigned = "true"
    v.missing_value = np.int16(-2)
    v.scale_factor = np.float32(0.25)
    v.add_offset = np.float32(1)
    v.set_auto_maskandscale(False)
    v[:] = us
with netCDF4.Dataset(uns) as f:
    decoded_s = f["s"][:].astype("f4").filled(np.nan)
    f.set_auto_mask(False)
    nb, ns = f["b"][:], f["s"][:]
with xr.open_dataset(uns, engine="netcdf4") as xd:
    xb, xs = xd["b"].values, xd["s"].values
check(nb.dtype == np.uint8 and np.array_equal(nb, ub.view("u1")), f"netCDF4 reads unsigned: {nb}")
out = os.path.join(WORK, "unsigned.tet")
convert(uns, out)
t = tetrs.open(out)
check(t["b"].dtype == np.uint8 and np.array_equal(t["b"][...], ub.view("u1")),
      f"_Unsigned byte: {t['b'][...]} against {ub.view('u1')}")
check(t["s"].dtype == np.uint16 and np.array_equal(t["s"][...], us.view("u2")),
      f"_Unsigned short: {t['s'][...]}")
check(np.array_equal(t["s"][...], np.asarray(ns * 4 - 4).round().astype("u2")),
      "_Unsigned short against netCDF4's scaled view")
check("_Unsigned" not in t["b"].attrs and t["b"].attrs["_FillValue"] == "255"
      and t["s"].attrs["missing_value"] == "65534", f"_Unsigned attrs: {t['b'].attrs} {t['s'].attrs}")
out = os.path.join(WORK, "unsigned-unpacked.tet")
convert(uns, out, "--unpack")
t = tetrs.open(out)
for name, want, whose in [("b", xb, "xarray"), ("s", decoded_s, "netCDF4")]:
    got = t[name][...]
    check(got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True),
          f"_Unsigned {name} --unpack: {got} against {whose}'s {want}")
check(np.isnan(got[5]) and not np.isnan(xs[5]), "xarray leaves a reinterpreted missing_value unmasked")

classic = os.path.join(WORK, "classic.nc")
with netCDF4.Dataset(classic, "w", format="NETCDF3_64BIT_OFFSET") as f:
    f.createDimension("x", 4)
    f.createVariable("x", "f8", ("x",))[:] = [0.5, 1.5, 2.5, 3.5]
    f.createVariable("v", "i4", ("x",))[:] = [4, -3, 2, -1]
out = os.path.join(WORK, "classic.tet")
convert(classic, out)
t = tetrs.open(out)
same(t["v"][...], [4, -3, 2, -1], "classic: values (big-endian on disk)")
check(set(t["v"].coords) == {"x"}, "classic: coordinate variable")

print(f"hdf5/netcdf fixtures: {checks} checks passed")
