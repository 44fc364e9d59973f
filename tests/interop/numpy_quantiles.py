"""Writes tests/tests/data/numpy_quantiles.txt: numpy.quantile (default method) and
numpy.median over random small arrays drawn from values with +-inf, NaN and repeats,
one case a line: `values|q|expected`, q `median`, an integer (0 or 1) or a float.
Run by hand with NumPy installed (the test command only reads the file):

    python3 tests/interop/numpy_quantiles.py > tests/tests/data/numpy_quantiles.txt
"""
import random
import warnings

import numpy as np

warnings.simplefilter("ignore")
rng = random.Random(22)
pool = [float("-inf"), float("inf"), float("nan"), -2.0, 0.0, 1.0, 1.0, 3.5, 7.25, 1e308, -1e308]
qs = [0, 1, 0.0, 1.0, 0.1, 0.25, 1 / 3, 0.5, 0.6, 0.75, 0.9, 0.999]
print(f"# numpy {np.__version__}: values|q|expected")
for case in range(400):
    n = rng.choice([1, 1, 2, 2, 3, 4, 5, 7])
    # Fewer NaNs than the pool gives, so most cases interpolate.
    v = [rng.choice(pool) for _ in range(n)]
    if rng.random() < 0.7:
        v = [x for x in v if x == x] or [1.0]
    a = np.array(v, dtype=np.float64)
    q = rng.choice(qs + ["median"])
    r = np.median(a) if q == "median" else np.quantile(a, q)
    qt = q if q == "median" else repr(q)
    print(f"{','.join(repr(x) for x in v)}|{qt}|{float(r)!r}")
