"""tetrs: opening, NumPy indexing and views, folds, errors, pickling, writing."""

import gc
import json
import os
import pickle
import subprocess
import threading
import time

import numpy as np
import pytest

import tetrs

DTYPES = ["u1", "<u2", "<u4", "<u8", "<i2", "<i4", "<i8", "<f2", "<f4", "<f8"]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    if d.kind == "f":
        return rng.normal(10, 5, size=shape).astype(d)
    info = np.iinfo(d)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return rng.integers(lo, hi, size=shape).astype(d)


@pytest.fixture
def cube(tmp_path):
    """A file with one raw and one zstd f64 array of shape (10, 7, 9), chunks (4, 3, 5),
    dims named, and the arrays themselves."""
    a = sample("<f8", (10, 7, 9), 1)
    b = sample("<i4", (10, 7, 9), 2)
    path = tmp_path / "cube.tet"
    with tetrs.create(path) as w:
        w.add("raw", a, chunks=(4, 3, 5), dims=["time", "lat", "lon"],
              attrs={"units": "K", "long_name": "air"})
        w.add("packed", b, chunks=(4, 3, 5), codec="zstd", dims=["time", "lat", "lon"])
    return path, a, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_every_dtype_round_trips(tmp_path, dtype, codec):
    a = sample(dtype, (13, 6), 3)
    path = tmp_path / "t.tet"
    with tetrs.create(path, codec=codec) as w:
        w.add("x", a, chunks=(5, 4))
    ds = tetrs.open(path)["x"]
    assert ds.dtype == np.dtype(dtype)
    assert ds.shape == (13, 6) and ds.chunks == (5, 4)
    out = ds[...]
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(ds.read(), a)


KEYS = [
    (), (Ellipsis,), 3, -1, (slice(None), 2), (slice(1, 9, 3), slice(None, None, -2)),
    (slice(None, None, -1),), (Ellipsis, -3), (2, Ellipsis, slice(4, 0, -1)),
    (slice(2, 3), slice(0, 3), slice(0, 5)), (slice(5, 5),), (slice(-4, None, 2), 1, 1),
    (0, 0, 0), (slice(None), slice(None), slice(None, None, 4)), (slice(100, -100, -7),),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
@pytest.mark.parametrize("name", ["raw", "packed"])
def test_indexing_matches_numpy(cube, key, name):
    path, a, b = cube
    ds = tetrs.open(path)[name]
    ref = (a if name == "raw" else b)[key]
    got = ds[key]
    assert got.shape == ref.shape
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)


def test_index_errors(cube):
    ds = tetrs.open(cube[0])["raw"]
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 10"):
        ds[10]
    with pytest.raises(IndexError, match="too many indices"):
        ds[0, 0, 0, 0]
    with pytest.raises(TypeError, match="integers, slices"):
        ds[[1, 2]]


def owner(arr):
    while isinstance(arr, np.ndarray) and arr.base is not None:
        arr = arr.base
    return arr.obj if isinstance(arr, memoryview) else arr


def test_view_inside_one_raw_chunk_is_zero_copy_and_read_only(cube):
    path, a, _ = cube
    f = tetrs.open(path)
    ds = f["raw"]
    v = ds[4:8, 3:6, 0:5]  # exactly chunk (1, 1, 0)
    assert isinstance(owner(v), tetrs._tetrs.ChunkBuffer)
    assert not v.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        v[0, 0, 0] = 1.0
    with pytest.raises(ValueError):
        v.flags.writeable = True
    # A strided, reversed, squeezed selection in one chunk is still a view.
    w = ds[7:3:-2, 4, 4::-1]
    assert isinstance(owner(w), tetrs._tetrs.ChunkBuffer)
    np.testing.assert_array_equal(w, a[7:3:-2, 4, 4::-1])
    # Two views of one chunk share the mapping's bytes.
    assert np.shares_memory(ds[4:8, 3:6, 0:5], ds[4, 3, 0:5])
    # The view keeps the mapping alive after the file object is gone.
    expected = a[4:8, 3:6, 0:5].copy()
    del f, ds
    gc.collect()
    np.testing.assert_array_equal(v, expected)


def test_selections_across_chunks_or_compressed_are_new_writable_arrays(cube):
    path, a, b = cube
    f = tetrs.open(path)
    across = f["raw"][3:5]
    assert across.flags.writeable
    assert not isinstance(owner(across), tetrs._tetrs.ChunkBuffer)
    across[0, 0, 0] = -1  # a copy: the file is untouched
    assert f["raw"][3, 0, 0] == a[3, 0, 0]
    packed = f["packed"][0:4, 0:3, 0:5]
    assert not isinstance(owner(packed), tetrs._tetrs.ChunkBuffer)
    assert packed.flags.writeable
    np.testing.assert_array_equal(packed, b[0:4, 0:3, 0:5])
    assert f["packed"].chunk_view((0, 0, 0)) is None
    np.testing.assert_array_equal(f["raw"].chunk_view((2, 2, 1)), a[8:10, 6:7, 5:9])


def test_read_into_memory_mode(cube):
    path, a, _ = cube
    f = tetrs.open(path, mmap=False)
    assert not f.mapped and tetrs.open(path).mapped
    np.testing.assert_array_equal(f["raw"][1:9, ::2], a[1:9, ::2])


def test_metadata_dims_coords_attrs(tmp_path):
    path = tmp_path / "m.tet"
    t = np.arange(5, dtype="<i8") * 3600
    with tetrs.create(path) as w:
        w.add("time", t, dims=["time"], attrs={"units": "seconds since 2024-01-01"})
        w.add("temp", np.ones((5, 2), "<f4"), dims=["time", "side"],
              coords={"time": "time", "side": ["west", "east"]}, attrs={"units": "K"})
        w.history("create", "test", {"why": "metadata"})
    f = tetrs.open(path)
    ds = f["temp"]
    assert ds.dims == ("time", "side")
    assert ds.attrs == {"units": "K"}
    c = ds.coords
    assert c["side"] == ["west", "east"]
    np.testing.assert_array_equal(c["time"], t)
    assert ds.coord_datasets == {"time": "time"}
    info = f.info()
    assert [d["name"] for d in info["datasets"]] == ["time", "temp"]
    assert info["history"][-1]["op"] == "create"
    assert info["history"][-1]["params"] == {"why": "metadata"}
    assert info["metadata"]["file"]["tool"] == "tetrs"
    # A dataset without dim_names gets default names.
    with tetrs.create(tmp_path / "n.tet") as w:
        w.add("x", np.zeros((2, 3), "u1"))
    assert tetrs.open(tmp_path / "n.tet")["x"].dims == ("dim_0", "dim_1")


# -- folds ----------------------------------------------------------------------------


def test_reductions_match_numpy(cube):
    path, a, b = cube
    f = tetrs.open(path)
    r, p = f["raw"], f["packed"]
    assert p.sum() == b.astype(np.int64).sum() and isinstance(p.sum(), np.integer)
    np.testing.assert_array_equal(p.sum(axis=0), b.astype(np.int64).sum(axis=0))
    np.testing.assert_array_equal(p.min(axis=(0, 2)), b.min(axis=(0, 2)))
    assert p.max() == b.max()
    assert r.min() == a.min() and r.max() == a.max()
    np.testing.assert_allclose(r.mean(), a.mean(), rtol=1e-14)
    np.testing.assert_allclose(r.mean(axis="time"), a.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(r.mean(axis=["lat", -1]), a.mean(axis=(1, 2)), rtol=1e-13)
    np.testing.assert_allclose(r.std(axis=1), a.std(axis=1), rtol=1e-12)
    np.testing.assert_allclose(r.var(ddof=1), a.var(ddof=1), rtol=1e-12)
    assert r.median() == np.median(a)
    np.testing.assert_array_equal(r.quantile([0.1, 0.5, 0.9]), np.quantile(a, [0.1, 0.5, 0.9]))
    np.testing.assert_array_equal(r.quantile(0.25, axis=0), np.quantile(a, 0.25, axis=0))
    assert r.argmax() == np.unravel_index(np.argmax(a), a.shape)
    assert r.count() == a.size
    h = p.histogram(bins=7)
    counts, edges = np.histogram(b.astype(np.float64), bins=7)
    np.testing.assert_array_equal(h["counts"], counts)
    np.testing.assert_array_equal(h["edges"], edges)
    sel = r.mean(selection=[{"start": 2, "stop": 9, "step": 3}])
    np.testing.assert_allclose(sel, a[2:9:3].mean(), rtol=1e-14)


def test_skipna(tmp_path):
    a = sample("<f4", (6, 8), 5)
    a[1, 2] = np.nan
    a[4, :] = np.nan
    with tetrs.create(tmp_path / "n.tet") as w:
        w.add("x", a, chunks=(4, 4))
    ds = tetrs.open(tmp_path / "n.tet")["x"]
    assert np.isnan(ds.mean())
    np.testing.assert_allclose(ds.mean(skipna=True), np.nanmean(a.astype(np.float64)),
                               rtol=1e-12)
    np.testing.assert_allclose(ds.sum(axis=1, skipna=True),
                               np.nansum(a.astype(np.float64), axis=1), rtol=1e-12)
    with pytest.warns(RuntimeWarning, match="only NaN elements in 1 output cell"):
        m = ds.max(axis=1, skipna=True)
    assert np.isnan(m[4]) and m[0] == np.nanmax(a[0])
    assert ds.nan_count() == 9


def cli_query(host, path, doc):
    out = subprocess.run([host, "query", json.dumps(doc), "-t", str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("doc", [
    {"mean": []}, {"sum": [0]}, {"std": {"axes": [1, 2], "ddof": 1}}, {"nan_mean": "lat"},
    {"var": [0, 2]}, {"median": [1]}, {"quantile": {"q": [0.3, 0.7], "axes": [0]}},
    {"norm_l2": []}, {"min": -1}, {"argmin": [0]},
])
@pytest.mark.parametrize("name", ["raw", "packed"])
def test_query_bit_identical_to_cli(host, cube, doc, name):
    path = cube[0]
    d = {"dataset": name, **doc}
    cli = cli_query(host, path, d)
    ours = tetrs.open(path).query(d)
    assert ours["op"] == cli["op"] and ours["result_dtype"] == cli["result_dtype"]
    r = cli["result"]
    if isinstance(r, dict):
        got = np.asarray(ours["result"])
        assert list(got.shape[: len(r["shape"])]) == r["shape"]
        flat = got.reshape(-1).tolist() if ours["result_dtype"] != "coords" else \
            [list(map(int, x)) for x in got.reshape(-1, got.shape[-1])]
        assert flat == r["data"]  # floats parsed from the CLI's shortest repr: bit equal
    else:
        assert ours["result"] == r


def test_query_document_text_and_toml(cube):
    path = cube[0]
    f = tetrs.open(path)
    a = f.query('{"dataset": "raw", "mean": 0}')["result"]
    b = f.query('dataset = "raw"\nmean = 0\n')["result"]
    np.testing.assert_array_equal(a, b)
    with pytest.raises(tetrs.TetError) as e:
        f.query({"dataset": "raw", "mean": [7]})
    assert e.value.exit == 16 and e.value.category == "usage"
    with pytest.raises(tetrs.TetError, match="no dataset \"nope\""):
        f.query({"dataset": "nope", "mean": []})


def test_memory_budget_too_small_says_how_to_raise_it(cube):
    ds = tetrs.open(cube[0])["packed"]
    with pytest.raises(tetrs.MemoryBudgetError) as e:
        ds.mean(axis=0, memory_budget=64)
    assert e.value.exit == 8 and e.value.category == "resource"
    assert "memory_budget=" in str(e.value) and "--memory-budget" in str(e.value)
    assert ds.mean(axis=0, memory_budget="64M").shape == (7, 9)
    with pytest.raises(tetrs.TetError) as e2:
        ds.mean(memory_budget="lots")
    assert e2.value.exit == 16


def test_folds_release_the_gil(tmp_path):
    a = np.random.default_rng(0).normal(size=(64, 512, 512)).astype("<f8")  # 128 MiB
    path = tmp_path / "big.tet"
    with tetrs.create(path, codec="zstd") as w:
        w.add("x", a, chunks=(1, 512, 512))
    ds = tetrs.open(path)["x"]
    span = {}

    def fold():
        t0 = time.perf_counter()
        ds.std(axis=0)
        span["t"] = (t0, time.perf_counter())

    stamps = []
    t = threading.Thread(target=fold)
    t.start()
    while t.is_alive():
        stamps.append(time.perf_counter())
    t.join()
    t0, t1 = span["t"]
    inside = [s for s in stamps if t0 + 0.01 < s < t1 - 0.01]
    assert t1 - t0 > 0.05
    # With the GIL held for the call, this thread could not run at all inside it.
    assert len(inside) > 1000, (len(inside), t1 - t0)


# -- errors ---------------------------------------------------------------------------


def test_not_a_tet_file(tmp_path):
    p = tmp_path / "junk.tet"
    p.write_bytes(b"PK\x03\x04" + b"\x00" * 200)
    with pytest.raises(tetrs.TetError) as e:
        tetrs.open(p)
    assert e.value.exit == 8 and "not a .tet file or a cetrafs image" in str(e.value)
    with pytest.raises(tetrs.TetError, match="cannot read") as e:
        tetrs.open(tmp_path / "missing.tet")
    assert e.value.exit == 8


def test_truncated_and_corrupt_files_raise_never_crash(cube, tmp_path):
    path, a, b = cube
    data = path.read_bytes()
    outcomes = []
    for n in (10, 100, len(data) // 2, len(data) - 1):
        p = tmp_path / f"cut{n}.tet"
        p.write_bytes(data[:n])
        try:
            with pytest.warns(RuntimeWarning) if n == len(data) - 1 else _nothing():
                f = tetrs.open(p)
            got = [f[name][...] for name in f.datasets]
            outcomes.append("read")
        except tetrs.TetError as e:
            assert e.exit in (4, 8), e
            outcomes.append(e.exit)
            continue
        # Only the footer is cut: the reader says so, and the chunks read as written.
        assert n == len(data) - 1
        assert any("footer" in w for w in f._h.warnings)
        np.testing.assert_array_equal(got[0], a)
    assert outcomes[:3] == [4, 4, 4] and outcomes[3] == "read", outcomes
    # Flip a byte inside the raw dataset's first chunk: the checksum names it.
    f = tetrs.open(path)
    got = f._h.chunk_view("raw", [0, 0, 0])
    buf, _ = got
    off = data.find(bytes(memoryview(buf))[:64])
    bad = bytearray(data)
    bad[off + 3] ^= 0xFF
    p = tmp_path / "bad.tet"
    p.write_bytes(bytes(bad))
    g = tetrs.open(p)
    with pytest.raises(tetrs.TetError) as e:
        g["raw"].mean()
    assert e.value.exit == 4 and e.value.code == "chunk-checksum"
    assert "dataset 0 'raw'" in str(e.value)
    codes = [x["code"] for x in g.verify(deep=True)]
    assert e.value.code in codes
    rep = g.verify_report(deep=True)
    assert rep["status"] == "errors" and rep["exit"] == 4
    assert tetrs.open(path).verify_report()["status"] == "clean"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_pickle_reopens_by_path_and_checks_identity(cube):
    path, a, _ = cube
    f = tetrs.open(path)
    blob = pickle.dumps(f["raw"])
    ds = pickle.loads(blob)
    np.testing.assert_array_equal(ds[...], a)
    with tetrs.append(path) as w:
        w.add("more", np.zeros(3, "u1"))
    with pytest.raises(tetrs.TetError, match="not the file that was pickled"):
        pickle.loads(blob)


# -- writing --------------------------------------------------------------------------


def test_chunk_by_chunk_and_missing_chunk(tmp_path):
    a = sample("<u2", (5, 7), 8)
    path = tmp_path / "c.tet"
    w = tetrs.create(path)
    w.create_dataset("x", a.shape, a.dtype, chunks=(2, 4), codec="zstd")
    for i in range(3):
        for j in range(2):
            w.write_chunk("x", (i, j), a[2 * i:2 * i + 2, 4 * j:4 * j + 4])
    w.close()
    np.testing.assert_array_equal(tetrs.open(path)["x"][...], a)
    # A missing chunk fails the close, and the target is untouched.
    before = path.read_bytes()
    w = tetrs.create(path)
    w.create_dataset("x", a.shape, a.dtype, chunks=(2, 4))
    w.write_chunk("x", (0, 0), a[0:2, 0:4])
    with pytest.raises(tetrs.TetError, match="chunk"):
        w.close()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.tet"]
    # An exception inside `with` leaves no file behind.
    with pytest.raises(RuntimeError):
        with tetrs.create(tmp_path / "never.tet") as w:
            w.add("x", a)
            raise RuntimeError("stop")
    assert not (tmp_path / "never.tet").exists()


def test_append_keeps_old_data_and_history(cube):
    path, a, b = cube
    extra = sample("<f2", (4, 4), 9)
    with tetrs.append(path) as w:
        w.add("extra", extra, dims=["y", "x"])
        w.history("append", "test", {"n": 1})
    f = tetrs.open(path)
    assert f.datasets == ["raw", "packed", "extra"]
    np.testing.assert_array_equal(f["raw"][...], a)
    np.testing.assert_array_equal(f["packed"][...], b)
    np.testing.assert_array_equal(f["extra"][...], extra)
    assert f["extra"].dims == ("y", "x") and f["raw"].dims == ("time", "lat", "lon")
    ops = [h["op"] for h in f.info()["history"]]
    assert ops == ["create", "append"]
    with pytest.raises(tetrs.TetError, match="already has a dataset 'raw'") as e:
        with tetrs.append(path) as w:
            w.add("raw", a)
    assert e.value.exit == 16


def test_writer_refuses_what_tet_lacks(tmp_path):
    w = tetrs.create(tmp_path / "x.tet")
    with pytest.raises(tetrs.TetError, match="not one .tet holds") as e:
        w.add("b", np.zeros(3, bool))
    assert e.value.exit == 16
    w.abort()


def test_non_contiguous_and_big_endian_input(tmp_path):
    a = sample(">i4", (6, 8), 4)[:, ::2]
    with tetrs.create(tmp_path / "x.tet") as w:
        w.add("x", a)
    np.testing.assert_array_equal(tetrs.open(tmp_path / "x.tet")["x"][...], a)
