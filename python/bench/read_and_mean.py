"""Benchmarks of the tetrs binding, side by side in one run (docs/benchmarks.md).

    python python/bench/read_and_mean.py [--mib 2048] [--dir DIR]

1. A raw f32 dataset read whole and one chunk at a time, against numpy.load(mmap_mode="r")
   plus a copy of the same .npy (the baseline).
2. One raw chunk read as a view (latency; goal under 50 us).
3. ds.mean(): our fold, xarray+Dask on a LocalCluster of 2 processes, NumPy on the
   loaded array.
Each timing is the best of --repeat runs with the page cache warm (every file is read
once first).
"""

import argparse
import os
import pathlib
import tempfile
import time

import numpy as np

import tetrs


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=2048)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-dask", action="store_true")
    args = ap.parse_args()
    d = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="tetrs-bench-"))
    rows = args.mib * 2**20 // 4 // 1024
    shape, chunks = (rows, 1024), (1024, 1024)  # 4 MiB chunks
    d.mkdir(parents=True, exist_ok=True)
    tet, npy = d / "a.tet", d / "a.npy"
    if not tet.exists():
        arr = np.lib.format.open_memmap(npy, mode="w+", dtype="<f4", shape=shape)
        rng = np.random.default_rng(0)
        for i in range(0, rows, 8192):
            arr[i:i + 8192] = rng.random((min(8192, rows - i), 1024), dtype=np.float32)
        arr.flush()
        w = tetrs.create(tet)
        w.add("a", arr, chunks=chunks)
        w.close()
        del arr
    nbytes = rows * 1024 * 4
    f = tetrs.open(tet)
    ds = f["a"]
    # Warm the page cache.
    np.load(npy, mmap_mode="r").sum(dtype=np.float64)
    ds.max()
    gib = nbytes / 2**30
    out = []

    t_np = best(lambda: np.array(np.load(npy, mmap_mode="r")), args.repeat)
    t_ours = best(lambda: ds[...], args.repeat)
    out.append(("whole read: numpy.load(mmap_mode='r') + copy", t_np, gib / t_np))
    out.append(("whole read: tetrs ds[...]", t_ours, gib / t_ours))

    n_chunks = rows // 1024

    def np_chunks():
        m = np.load(npy, mmap_mode="r")
        for i in range(n_chunks):
            np.array(m[i * 1024:(i + 1) * 1024])

    def our_chunks_copy():
        for i in range(n_chunks):
            np.array(ds[i * 1024:(i + 1) * 1024])

    def our_chunks_view():
        for i in range(n_chunks):
            ds[i * 1024:(i + 1) * 1024]

    t = best(np_chunks, args.repeat)
    out.append(("per chunk: numpy memmap slice + copy", t, gib / t))
    t = best(our_chunks_copy, args.repeat)
    out.append(("per chunk: tetrs view + copy", t, gib / t))
    t = best(our_chunks_view, args.repeat)
    out.append(("per chunk: tetrs view (no copy)", t, None))
    k = 2000
    t = best(lambda: [ds[1024:2048] for _ in range(k)], args.repeat) / k
    out.append(("one raw chunk view, latency", t, None))
    t = best(lambda: [ds[5, 7] for _ in range(k)], args.repeat) / k
    out.append(("one element (a view), latency", t, None))

    t_mean = best(ds.mean, args.repeat)
    out.append(("mean: tetrs ds.mean()", t_mean, gib / t_mean))
    loaded = np.load(npy)
    t = best(lambda: loaded.mean(dtype=np.float64), args.repeat)
    out.append(("mean: NumPy on the loaded array (f64 accumulator)", t, gib / t))
    del loaded
    if not args.no_dask:
        import dask
        import xarray as xr
        from dask.distributed import Client, LocalCluster
        dask.config.set({"distributed.worker.memory.pause": False,
                         "distributed.worker.memory.terminate": False})
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          host="127.0.0.1", dashboard_address=None) as cluster, \
                Client(cluster):
            x = xr.open_dataset(tet, chunks={})["a"]
            x.mean().compute()
            t = best(lambda: x.mean().compute(), args.repeat)
            out.append(("mean: xarray+Dask LocalCluster (2 processes)", t, gib / t))
    print(f"dataset: {shape} f32, {gib:.2f} GiB, chunks {chunks} raw; {os.cpu_count()} cores")
    for name, secs, rate in out:
        shown = f"{secs * 1e6:9.1f} us" if secs < 1e-2 else f"{secs:9.3f} s "
        print(f"{name:52s} {shown}" + (f"  {rate:6.2f} GiB/s" if rate else ""))


if __name__ == "__main__":
    main()
