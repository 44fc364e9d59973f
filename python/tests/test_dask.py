"""Dask on a LocalCluster of two worker processes: reductions through xarray with
``chunks={}`` equal our fold (integers exactly; floats within 1e-12 relative, since Dask
adds its chunk sums in another order), on data larger than a worker's memory limit."""

import numpy as np
import pytest

import tetrs

xr = pytest.importorskip("xarray")
distributed = pytest.importorskip("dask.distributed")

WORKER_LIMIT = 320 * 2**20  # bytes per worker (an idle worker takes about 150 MiB); x is 384 MiB
FLOAT_RTOL = 1e-12


@pytest.fixture(scope="module")
def client():
    # A worker's RSS counts the pages of the file mapping it has touched: file-backed
    # and reclaimable, not memory the worker holds. Dask's pause and terminate act on
    # RSS, so they are off; the test checks the anonymous memory instead.
    import dask
    dask.config.set({"distributed.worker.memory.pause": False,
                     "distributed.worker.memory.terminate": False,
                     "distributed.worker.memory.spill": False,
                     "distributed.worker.memory.target": False})
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       memory_limit=WORKER_LIMIT)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    path = tmp_path_factory.mktemp("dask") / "big.tet"
    rng = np.random.default_rng(7)
    w = tetrs.create(path)
    n_t, ny, nx = 192, 512, 512  # f64: 384 MiB
    w.create_dataset("x", (n_t, ny, nx), "<f8", chunks=(4, 512, 512), dims=["t", "y", "x"])
    w.create_dataset("k", (n_t, 256), "<i8", chunks=(8, 256), codec="zstd", dims=["t", "j"])
    k = rng.integers(-2**40, 2**40, size=(n_t, 256))
    for i in range(n_t // 4):
        w.write_chunk("x", (i, 0, 0), rng.normal(3.0, 2.0, (4, ny, nx)))
    for i in range(n_t // 8):
        w.write_chunk("k", (i, 0), k[8 * i:8 * i + 8])
    w.close()
    return path, k


def test_cluster_reductions_equal_our_fold(client, big):
    path, k = big
    f = tetrs.open(path)
    assert f["x"].nbytes > WORKER_LIMIT
    ds = xr.open_dataset(path, chunks={})
    assert ds["x"].chunks == ((4,) * 48, (512,), (512,))
    ours_mean = f["x"].mean()
    theirs = ds["x"].mean().compute()
    assert abs(float(theirs) - ours_mean) <= FLOAT_RTOL * abs(ours_mean)
    np.testing.assert_allclose(ds["x"].std(dim="t").compute().values, f["x"].std(axis="t"),
                               rtol=1e-10)
    assert float(ds["x"].max().compute()) == f["x"].max()
    assert float(ds["x"].min().compute()) == f["x"].min()
    # Integers: exactly.
    assert int(ds["k"].sum().compute()) == int(f["k"].sum()) == int(k.sum())
    np.testing.assert_array_equal(ds["k"].sum(dim="t").compute().values, f["k"].sum(axis=0))
    # What each worker holds: its anonymous memory stays under the limit.
    anon = client.run(_rss_anon)
    assert all(v < WORKER_LIMIT for v in anon.values()), anon
    # The work ran on the workers: each reopened the file by path.
    seen = client.run(lambda: __import__("sys").modules.get("tetrs") is not None)
    assert len(seen) == 2 and all(seen.values())


def _rss_anon():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0
