"""The xarray backend and to_tet: entry point, lazy arrays, metadata, CF times, round
trips, NetCDF-4 and Zarr v3 conversions."""

import numpy as np
import pandas as pd
import pytest

import tetrs

xr = pytest.importorskip("xarray")


def make_ds():
    time = pd.date_range("2024-01-01", periods=6, freq="6h")
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {
            "temp": (("time", "lat", "lon"), rng.normal(280, 5, (6, 4, 5)).astype("f4"),
                     {"units": "K", "scale": 1.5, "count": 3}),
            "mask": (("lat", "lon"), rng.integers(0, 2, (4, 5)).astype(bool)),
            "level": (("time",), np.arange(6, dtype="i8")),
            "small": (("lon",), np.arange(5, dtype="i1")),
            "obs": (("site",), np.array([1.0, 2.0, 3.0])),
            "lag": (("time",), np.arange(6).astype("timedelta64[h]").astype("m8[ns]")),
        },
        coords={
            "time": time,
            "lat": np.linspace(-30, 30, 4),
            "lon": np.arange(5, dtype="f8") * 10,
            "site": ["a", "bb", "c"],
        },
        attrs={"title": "test", "version": 2},
    )


def test_entry_point_picks_the_backend(tmp_path):
    path = tmp_path / "d.tet"
    tetrs.to_tet(make_ds(), path)
    ds = xr.open_dataset(path)
    assert ds["temp"].encoding["preferred_chunks"] == {"time": 6, "lat": 4, "lon": 5}
    engines = xr.backends.list_engines()
    assert "tetrs" in engines


def test_round_trip_identical(tmp_path):
    src = make_ds()
    path = tetrs.to_tet(src, tmp_path / "r.tet")
    back = xr.open_dataset(path)
    xr.testing.assert_identical(back.load(), src)
    assert back["time"].dtype == np.dtype("datetime64[ns]")
    raw = tetrs.open(path)
    assert raw["time"].tet_dtype == "i64"
    assert "since" in raw["time"].attrs["units"]
    assert raw["mask"].tet_dtype == "u8" and raw["small"].tet_dtype == "i16"


def test_unsupported_dtypes_are_refused(tmp_path):
    ds = xr.Dataset({"v": (("x",), [1, 2])}, coords={"name": ("x", ["a", "b"])})
    with pytest.raises(tetrs.TetError, match="strings") as e:
        tetrs.to_tet(ds, tmp_path / "s.tet")
    assert e.value.exit == 16
    assert not (tmp_path / "s.tet").exists()


def test_lazy_and_dask_chunks_follow_the_file(tmp_path):
    a = np.arange(20 * 30, dtype="f8").reshape(20, 30)
    path = tmp_path / "c.tet"
    with tetrs.create(path) as w:
        w.add("x", a, chunks=(7, 10), dims=["y", "x_"])
    ds = xr.open_dataset(path)
    var = ds["x"].variable
    assert not isinstance(var._data, np.ndarray)  # lazily indexed, nothing read yet
    np.testing.assert_array_equal(ds["x"][3:9, ::4].values, a[3:9, ::4])
    dk = xr.open_dataset(path, chunks={})
    assert dk["x"].chunks == ((7, 7, 6), (10, 10, 10))
    np.testing.assert_allclose(float(dk["x"].mean().compute()), a.mean())


def test_default_dim_names(tmp_path):
    with tetrs.create(tmp_path / "n.tet") as w:
        w.add("x", np.ones((2, 3), "u2"))
    ds = xr.open_dataset(tmp_path / "n.tet")
    assert ds["x"].dims == ("dim_0", "dim_1")


def test_netcdf4_with_time_axis(tmp_path):
    netCDF4 = pytest.importorskip("netCDF4")
    nc = tmp_path / "in.nc"
    with netCDF4.Dataset(nc, "w", format="NETCDF4") as d:
        d.createDimension("time", 8)
        d.createDimension("x", 3)
        t = d.createVariable("time", "i4", ("time",))
        t.units = "hours since 2000-01-01 00:00:00"
        t.calendar = "standard"
        t[:] = np.arange(8) * 3
        v = d.createVariable("v", "f8", ("time", "x"), zlib=True)
        v.long_name = "values"
        v[:] = np.arange(24).reshape(8, 3) / 4
        d.title = "from netCDF4"
    src = xr.open_dataset(nc)
    out = tetrs.to_tet(src, tmp_path / "nc.tet")
    back = xr.open_dataset(out)
    np.testing.assert_array_equal(back["time"].values, src["time"].values)
    assert back["time"].values[1] == np.datetime64("2000-01-01T03:00")
    np.testing.assert_array_equal(back["v"].values, src["v"].values)
    assert back["v"].attrs["long_name"] == "values"
    assert back.attrs["title"] == "from netCDF4"
    assert tetrs.open(out)["v"].mean() == src["v"].values.mean()


def test_zarr_v3_store(tmp_path):
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "in.zarr"
    src = xr.Dataset(
        {"p": (("t", "k"), np.arange(40, dtype="i4").reshape(10, 4), {"units": "Pa"})},
        coords={"t": np.arange(10, dtype="i8"), "k": np.arange(4) * 0.5},
    )
    src.to_zarr(store, zarr_format=3, consolidated=False)
    assert zarr.open_group(store, mode="r").metadata.zarr_format == 3
    z = xr.open_zarr(store, consolidated=False)
    out = tetrs.to_tet(z, tmp_path / "z.tet")
    back = xr.open_dataset(out)
    xr.testing.assert_equal(back.load(), src)
    assert back["p"].attrs["units"] == "Pa"
    # zarr-python's chunks become the file's.
    assert tetrs.open(out)["p"].chunks == tuple(c[0] for c in z["p"].chunks)
