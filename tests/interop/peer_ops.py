"""Issue 24's comparison with the other implementation, run by hand (never by the test
command): the scalar sum, the axis-0 mean, a quantile and a 64-bin histogram of one
`.tet` file through our binding (`tetrs`, in this interpreter) and through the other
implementation's `tet-py` (in a second interpreter given as PEER_PYTHON, where
`pip install tet-py` put it), best of N in the same run, the two taking turns.

    python tests/interop/peer_ops.py FILE.tet DATASET PEER_PYTHON [N]

Prints a Markdown table: each operation's time for both, the ratio, and, where the
peer's answer is a number or a list of numbers, whether the two agree (to 1e-9
relative; "–" where its answer has another shape).
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import tetrs

path, name, peer_python = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
n = int(sys.argv[4]) if len(sys.argv) > 4 else 3

# name, our call, the peer's call (source for the peer's interpreter).
OPS = [
    ("sum", lambda d: d.sum(), "f.sum(NAME)"),
    ("mean along axis 0", lambda d: d.mean(axis=0), "f.mean(NAME, axis=0)"),
    ("quantile 0.9", lambda d: d.quantile(0.9), "f.quantile(NAME, 0.9)"),
    ("histogram, 64 bins", lambda d: d.histogram(64), "f.histogram(NAME, 64)"),
]

PEER = """
import json, sys, time, numpy as np, tet
f = tet.open(sys.argv[1]); NAME = sys.argv[2]; n = int(sys.argv[3])
calls = [lambda: %s]
out = []
for c in calls:
    best = 1e9
    for _ in range(n):
        t = time.perf_counter(); v = c(); best = min(best, time.perf_counter() - t)
    if hasattr(v, "to_dict"): v = v.to_dict()
    if isinstance(v, dict):
        v = {k: (np.asarray(x).tolist() if hasattr(x, "__len__") and not isinstance(x, str) else x) for k, x in v.items()}
    elif hasattr(v, "tolist"): v = v.tolist()
    out.append([best, v])
print(json.dumps(out, default=str))
"""


def peer(src):
    code = PEER % src
    r = subprocess.run([peer_python, "-c", code, path, name, str(n)], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1:]
    return json.loads(r.stdout)[0], None


d = tetrs.open(path)[name]
print(f"{path}: dataset {name}, shape {d.shape}, {d.dtype}; best of {n}")
print()
print("| operation | ours (`tetrs`) | the other implementation (`tet-py`) | ours vs theirs | same answer |")
print("| --- | --- | --- | --- | --- |")
for label, ours, theirs in OPS:
    best = 1e9
    for _ in range(n):
        t = time.perf_counter()
        v = ours(d)
        best = min(best, time.perf_counter() - t)
    p, err = peer(theirs)
    if p is None:
        print(f"| {label} | {best:.3f} s | failed: {err} | | |")
        continue
    same = "–"
    try:
        a, b = np.asarray(v, dtype="f8").ravel(), np.asarray(p[1], dtype="f8").ravel()
        if a.shape == b.shape:
            same = "yes" if np.allclose(a, b, rtol=1e-9, atol=0, equal_nan=True) else "no"
    except (TypeError, ValueError):
        pass
    r = p[0] / best
    ratio = f"{r:.2f}× faster" if r >= 1 else f"{1 / r:.2f}× slower"
    print(f"| {label} | {best:.3f} s | {p[0]:.3f} s | {ratio} | {same} |")
