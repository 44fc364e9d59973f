"""Cross-checks `tet-host transform` against NumPy (run by hand with NumPy installed; the
test command does not need it: host/tests/transform_cli.rs computes the same
expectations in Rust):

    python3 tests/interop/numpy_transforms.py target/release/tet-host

For each dtype and transform: the output's dtype against NumPy's rule (docs/query.md,
"Transforms"); the output bit for bit against the documented expression
(`a.astype(float64)` mapped with the statistics the history row records, then cast);
those statistics against NumPy's `a.mean(dtype=float64)`, `a.std(dtype=float64)`,
`a.min()`, `a.max()`; and, for information, the largest difference in units in the last
place from NumPy's plain expression in the array's own type. Exits 1 on a mismatch.
"""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

warnings.simplefilter("ignore")
BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/tet-host")
rng = np.random.default_rng(24)
D = tempfile.mkdtemp(prefix="tet-np-transforms-")


def run(*args):
    r = subprocess.run([BIN, *args], cwd=D, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{args}: exit {r.returncode}: {r.stderr}")
    return r


base = rng.normal(3.0, 20.0, size=(37, 23))
arrays = {
    "f64": base.copy(),
    "f32": base.astype(np.float32),
    "f16": base.astype(np.float16),
    "nan": np.where(rng.random(base.shape) < 0.02, np.nan, base),
    "i16": (base * 50).astype(np.int16),
    "u8": np.abs(base * 3).astype(np.uint8),
    "i64": (base * 1e6).astype(np.int64) + (1 << 40),
}
ops = {
    "zscore": [],
    "minmax": [],
    "center": [],
    "scale": ["--factor", "-2.5"],
    "log1p": [],
    "sqrt": [],
    "clip": ["--min", "-3", "--max", "20"],
}
bad = 0
print(f"numpy {np.__version__}")
for tag, a in arrays.items():
    np.save(os.path.join(D, f"{tag}.npy"), a)
    run("convert", f"{tag}.npy", f"{tag}.tet", "--name", "a", "--chunk", "5,4")
    for op, args in ops.items():
        out = f"{tag}-{op}.tet"
        run("transform", f"{tag}.tet", out, "--dataset", "a", "--op", op, "--force", *args)
        run("export", out, "--dataset", "a", f"{tag}-{op}.npy", "--force")
        got = np.load(os.path.join(D, f"{tag}-{op}.npy"))
        info = json.loads(run("info", out, "--history", "--json").stdout)
        p = info["history"][-1]["params"]
        floaty = a.dtype.kind == "f"
        want_t = a.dtype if (floaty or op == "clip") else np.dtype(np.float64)
        x = a.astype(np.float64)
        if op == "zscore":
            m, s = float(p["mean"]), float(p["std"])
            ref = (x - m) / s
            stats = [(m, a.mean(dtype=np.float64)), (s, a.std(dtype=np.float64))]
            native = (a - a.mean()) / a.std()
        elif op == "minmax":
            lo, rg = float(p["min"]), float(p["range"])
            ref = (x - lo) / rg
            stats = [(lo, float(a.min())), (rg, float(a.max()) - float(a.min()))]
            native = (a - a.min()) / (a.max() - a.min())
        elif op == "center":
            m = float(p["mean"])
            ref = x - m
            stats = [(m, a.mean(dtype=np.float64))]
            native = a - a.mean()
        elif op == "scale":
            ref, stats, native = x * -2.5, [], a * -2.5
        elif op == "log1p":
            ref, stats, native = np.log1p(x), [], np.log1p(a)
        elif op == "sqrt":
            ref, stats, native = np.sqrt(x), [], np.sqrt(a)
        else:
            ref, stats, native = np.clip(a, -3, 20), [], np.clip(a, -3, 20)
        ref = ref.astype(want_t)
        same = got.dtype == want_t and got.shape == a.shape and np.array_equal(
            got.view(np.uint8), ref.view(np.uint8)
        )
        rel = max((abs(g - w) / max(abs(w), 1e-300) for g, w in stats if g == g), default=0.0)
        ulps = 0
        if got.dtype.kind == "f" and native.dtype == got.dtype:
            ok = np.isfinite(got) & np.isfinite(native)
            if ok.any():
                diff = np.abs(got[ok].astype(np.float64) - native[ok].astype(np.float64))
                ulps = int(np.max(diff / np.spacing(np.abs(native[ok])).astype(np.float64)))
        status = "ok" if same and rel < 1e-9 else "MISMATCH"
        bad += status != "ok"
        print(f"{tag:4} {op:7} {str(got.dtype):8} {status:8} stats rel diff {rel:.1e}  vs NumPy's own-type expression: {ulps} ulp")
sys.exit(1 if bad else 0)
