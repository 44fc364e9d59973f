"""tetrs: .tet chunked N-d arrays from Python.

``tetrs.open(path)`` maps a file; ``f["name"]`` is a dataset that indexes like NumPy
(a selection inside one raw chunk is a read-only view of the mapping, anything else is
decoded into a new array), folds with the engine of ``tet-host query`` with the GIL
released, and ``tetrs.Writer`` writes files atomically. See docs/python.md.
"""

import json as _json
import os as _os
import warnings as _warnings

import numpy as _np

from . import _tetrs
from ._errors import MemoryBudgetError, TetError

__all__ = [
    "open",
    "verify",
    "File",
    "Dataset",
    "Writer",
    "create",
    "append",
    "to_tet",
    "TetError",
    "MemoryBudgetError",
    "DTYPES",
]

__version__ = _tetrs.__version__

#: .tet element types and the NumPy dtypes they read as (little-endian).
DTYPES = {
    "u8": _np.dtype("u1"),
    "u16": _np.dtype("<u2"),
    "u32": _np.dtype("<u4"),
    "u64": _np.dtype("<u8"),
    "i16": _np.dtype("<i2"),
    "i32": _np.dtype("<i4"),
    "i64": _np.dtype("<i8"),
    "f16": _np.dtype("<f2"),
    "f32": _np.dtype("<f4"),
    "f64": _np.dtype("<f8"),
}
_TET_OF = {(d.kind, d.itemsize): name for name, d in DTYPES.items()}


def _budget(memory_budget):
    if memory_budget is None:
        return None
    if isinstance(memory_budget, str):
        return _tetrs.parse_budget(memory_budget)
    b = int(memory_budget)
    if b <= 0:
        raise TetError(f"memory_budget={memory_budget!r}: a budget is a positive number of bytes",
                       16, "usage")
    return b


def open(path, mmap=True):
    """Opens the .tet file at ``path``: mapped (``mmap=True``), or read into memory
    (``mmap=False``: safe against another process truncating the file)."""
    return File(path, mmap=mmap)


def verify(path, deep=False, memory_budget=None, mmap=True):
    """Runs ``tet-host verify --json`` on the .tet file at ``path`` (the quick scan, or
    every chunk with ``deep``) and returns the whole report: ``status``, ``exit`` (the
    status ``tet-host verify`` ends with), counts and ``findings``. Unlike
    ``open(path).verify_report()`` it needs no file that opens: a damaged superblock or
    index is reported, not raised."""
    return _json.loads(_tetrs.verify_path(_os.fspath(path), deep, _budget(memory_budget), mmap))


def _reopen(path, mmap, size, crc):
    f = File(path, mmap=mmap)
    if f._h.identity() != (size, crc):
        raise TetError(
            f"{path}: not the file that was pickled (its size or header checksum changed: "
            f"now {f._h.identity()}, pickled {(size, crc)})", 8, "io")
    return f


class File:
    """An open .tet file. ``f.datasets`` lists the names, ``f[name]`` is a
    :class:`Dataset`. Pickles by path: the receiver reopens the file and checks it is the
    same (size and a checksum of its first and last 64 KiB)."""

    def __init__(self, path, mmap=True):
        self._path = _os.fspath(path)
        self._mmap = bool(mmap)
        self._h = _tetrs.Handle(self._path, self._mmap)
        for w in self._h.warnings:
            _warnings.warn(f"{self._path}: {w}", RuntimeWarning, stacklevel=3)
        self._meta = {d["name"]: d for d in _json.loads(self._h.datasets_json())}

    def __reduce__(self):
        size, crc = self._h.identity()
        return (_reopen, (self._path, self._mmap, size, crc))

    def __repr__(self):
        return f"<tetrs.File {self._path!r} datasets={self.datasets}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Drops this object's hold on the bytes; views keep their own."""

    @property
    def path(self):
        return self._path

    @property
    def mapped(self):
        """Whether the bytes are a memory mapping (else read into memory)."""
        return self._h.mapped

    @property
    def datasets(self):
        """Dataset names in directory order."""
        return list(self._meta)

    def __contains__(self, name):
        return name in self._meta

    def __iter__(self):
        return iter(self._meta)

    def __len__(self):
        return len(self._meta)

    def __getitem__(self, name):
        if name not in self._meta:
            listed = ", ".join(repr(n) for n in self._meta) or "it has none"
            raise KeyError(f"{self._path}: no dataset {name!r} (datasets: {listed})")
        return Dataset(self, name)

    def info(self):
        """What ``tet-host info --metadata --history --json`` reports, as a dict."""
        return _json.loads(self._h.info_json())

    def verify(self, deep=False, memory_budget=None):
        """Runs ``tet-host verify`` (the quick scan, or every chunk with ``deep``) and
        returns its findings: dicts with ``code``, ``severity``, ``field``, ``offset``,
        ``message`` and ``context``. ``f.verify_report()`` gives the whole report."""
        return self.verify_report(deep, memory_budget)["findings"]

    def verify_report(self, deep=False, memory_budget=None):
        """The whole ``verify --json`` report: ``status``, ``exit``, counts, findings."""
        return _json.loads(self._h.verify_json(deep, _budget(memory_budget)))

    def query(self, doc, memory_budget=None, threads=None):
        """Runs a query document (a dict, or JSON/TOML text, as ``tet-host query``
        takes) and returns the CLI's answer as a dict: ``dataset``, ``op``, ``dtype``,
        ``result_dtype`` and ``result`` (a NumPy array or scalar, a dict for a
        histogram)."""
        text = doc if isinstance(doc, str) else _json.dumps(doc)
        head, values = self._h.query(text, _budget(memory_budget), threads)
        head = _json.loads(head)
        return {
            "dataset": head["dataset"],
            "op": head["op"],
            "dtype": head["dtype"],
            "result_dtype": head["result_dtype"],
            "result": _result(head, values),
        }


def _result(head, values):
    shape = tuple(head["shape"])
    rd = head["result_dtype"]
    if head.get("warning"):
        _warnings.warn(head["warning"], RuntimeWarning, stacklevel=4)
    if head["op"] is None:
        return values.view(DTYPES[head["dtype"]]).reshape(shape)
    if rd == "i128":
        arr = _np.empty(len(values), dtype=object)
        arr[:] = values
        return arr[0] if shape == () else arr.reshape(shape)
    if head.get("edges") is not None:
        bins = head["bins"]
        counts = values.reshape(shape)
        return {
            "edges": _np.array(head["edges"], dtype=_np.float64),
            "counts": counts[..., :bins],
            "under": counts[..., bins][()],
            "over": counts[..., bins + 1][()],
            "nan": counts[..., bins + 2][()],
        }
    if rd == "coords":
        arr = values.reshape(shape)
        return tuple(int(x) for x in arr) if arr.ndim == 1 else arr
    arr = values.reshape(shape)
    return arr[()] if shape == () else arr


def _axis_spec(axis):
    if axis is None:
        return []
    if isinstance(axis, (list, tuple)):
        return [a if isinstance(a, str) else int(a) for a in axis]
    return [axis if isinstance(axis, str) else int(axis)]


class Dataset:
    """One dataset of a :class:`File`: ``dtype``, ``shape``, ``chunks``, ``dims``,
    ``coords``, ``attrs``; NumPy indexing; reductions."""

    def __init__(self, file, name):
        self.file = file
        self.name = name
        m = file._meta[name]
        self._m = m
        self.tet_dtype = m["dtype"]
        self.dtype = DTYPES[m["dtype"]]
        self.shape = tuple(m["shape"])
        self.chunks = tuple(m["chunks"])
        self.attrs = dict(m["attrs"])

    def __reduce__(self):
        return (_dataset, (self.file, self.name))

    def __repr__(self):
        return (f"<tetrs.Dataset {self.name!r} {self.tet_dtype} shape={self.shape} "
                f"chunks={self.chunks} dims={self.dims}>")

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(_np.prod(self.shape, dtype=_np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __len__(self):
        return self.shape[0]

    @property
    def has_dims(self):
        return self._m["dims"] is not None

    @property
    def dims(self):
        """Dimension names: the file's ``dim_names``, else ``dim_0``, ``dim_1``, ..."""
        d = self._m["dims"]
        return tuple(d) if d is not None else tuple(f"dim_{i}" for i in range(self.ndim))

    @property
    def coords(self):
        """Coordinates by dimension name: a list of labels, or the coordinate dataset's
        values (read on access)."""
        out = {}
        dims = self.dims
        for key, c in self._m["coords"].items():
            dim = dims[int(key)] if key.isdigit() and int(key) < self.ndim else key
            if "labels" in c:
                out[dim] = list(c["labels"])
            else:
                out[dim] = self.file[c["dataset"]][...]
        return out

    @property
    def coord_datasets(self):
        """Dimension name to coordinate dataset name, for coordinates stored as datasets."""
        dims = self.dims
        out = {}
        for key, c in self._m["coords"].items():
            dim = dims[int(key)] if key.isdigit() and int(key) < self.ndim else key
            if "dataset" in c:
                out[dim] = c["dataset"]
        return out

    # -- indexing ---------------------------------------------------------------------

    def _normalize(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is None for k in key):
            raise TypeError("tetrs: np.newaxis is not supported in a dataset index; "
                            "index the returned array")
        n_ell = sum(1 for k in key if k is Ellipsis)
        if n_ell > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if n_ell:
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1:]
        if len(key) > self.ndim:
            raise IndexError(f"too many indices for dataset {self.name!r}: it is "
                             f"{self.ndim}-dimensional, but {len(key)} were indexed")
        key = key + (slice(None),) * (self.ndim - len(key))
        axes = []  # (start, count, step>0, flip, squeeze)
        for d, (k, n) in enumerate(zip(key, self.shape)):
            if isinstance(k, slice):
                r = range(*k.indices(n))
                if len(r) == 0:
                    axes.append((0, 0, 1, False, False))
                elif r.step > 0:
                    axes.append((r.start, len(r), r.step, False, False))
                else:
                    axes.append((r[-1], len(r), -r.step, True, False))
            elif isinstance(k, (int, _np.integer)) and not isinstance(k, bool):
                i = int(k)
                if i < -n or i >= n:
                    raise IndexError(f"index {i} is out of bounds for axis {d} with size {n}")
                axes.append((i % n, 1, 1, False, True))
            else:
                raise TypeError(f"tetrs: a dataset index is integers, slices and '...' "
                                f"(got {type(k).__name__}); read a slice and index the "
                                f"NumPy array for fancy indexing")
        return axes

    def __getitem__(self, key):
        axes = self._normalize(key)
        counts = tuple(c for _, c, _, _, _ in axes)
        if any(c == 0 for c in counts):
            out = _np.empty(counts, dtype=self.dtype)
        else:
            out = self._view(axes)
            if out is None:
                sel = [(s, s + (c - 1) * st + 1, st) for s, c, st, _, _ in axes]
                out = self._read(sel, counts, None)
        flips = tuple(slice(None, None, -1) if f else slice(None) for _, _, _, f, _ in axes)
        if any(f for _, _, _, f, _ in axes):
            out = out[flips]
        squeeze = tuple(0 if sq else slice(None) for _, _, _, _, sq in axes)
        if any(sq for *_, sq in axes):
            out = out[squeeze]
        return out

    def _read(self, sel, counts, memory_budget):
        # NumPy allocates (huge pages for large arrays); Rust fills it, GIL released.
        buf = _np.empty(int(_np.prod(counts, dtype=_np.int64)) * self.dtype.itemsize, _np.uint8)
        self.file._h.read_into(self.name, sel, buf, memory_budget)
        return buf.view(self.dtype).reshape(counts)

    def _view(self, axes):
        coords = []
        for (s, c, st, _, _), k in zip(axes, self.chunks):
            first, last = s // k, (s + (c - 1) * st) // k
            if first != last:
                return None
            coords.append(first)
        got = self.file._h.chunk_view(self.name, coords)
        if got is None:
            return None
        buf, tile = got
        arr = _np.frombuffer(buf, dtype=self.dtype).reshape(tile)
        local = tuple(
            slice(s - ck * k, s - ck * k + (c - 1) * st + 1, st)
            for (s, c, st, _, _), ck, k in zip(axes, coords, self.chunks))
        return arr[local]

    def chunk_view(self, coords):
        """The raw chunk at grid ``coords`` as a read-only view of the file (None for a
        zstd chunk)."""
        got = self.file._h.chunk_view(self.name, [int(c) for c in coords])
        if got is None:
            return None
        buf, tile = got
        return _np.frombuffer(buf, dtype=self.dtype).reshape(tile)

    def read(self, memory_budget=None):
        """The whole dataset in a new array."""
        return self._read([], self.shape, _budget(memory_budget))

    def __array__(self, dtype=None, copy=None):
        a = self[...]
        return a if dtype is None else a.astype(dtype)

    # -- folds ------------------------------------------------------------------------

    def query(self, doc=None, memory_budget=None, threads=None, **ops):
        """A query on this dataset: ``doc`` as :meth:`File.query` takes it (its
        ``dataset`` filled in), or the operation as keywords (``ds.query(sum=[0])``)."""
        d = dict(doc or {})
        d.update(ops)
        d["dataset"] = self.name
        return self.file.query(d, memory_budget=memory_budget, threads=threads)["result"]

    def _fold(self, op, axis=None, skipna=False, selection=None, memory_budget=None,
              threads=None, **params):
        if skipna:
            op = "nan_" + op
        spec = {"axes": _axis_spec(axis), **params} if params else _axis_spec(axis)
        doc = {op: spec}
        if selection is not None:
            doc["selection"] = selection
        return self.query(doc, memory_budget=memory_budget, threads=threads)

    def sum(self, axis=None, skipna=False, **kw):
        return self._fold("sum", axis, skipna, **kw)

    def prod(self, axis=None, **kw):
        return self._fold("prod", axis, **kw)

    def mean(self, axis=None, skipna=False, **kw):
        return self._fold("mean", axis, skipna, **kw)

    def min(self, axis=None, skipna=False, **kw):
        return self._fold("min", axis, skipna, **kw)

    def max(self, axis=None, skipna=False, **kw):
        return self._fold("max", axis, skipna, **kw)

    def var(self, axis=None, skipna=False, ddof=0, **kw):
        return self._fold("var", axis, skipna, ddof=ddof, **kw) if ddof else \
            self._fold("var", axis, skipna, **kw)

    def std(self, axis=None, skipna=False, ddof=0, **kw):
        return self._fold("std", axis, skipna, ddof=ddof, **kw) if ddof else \
            self._fold("std", axis, skipna, **kw)

    def count(self, axis=None, **kw):
        return self._fold("count", axis, **kw)

    def argmin(self, axis=None, **kw):
        return self._fold("argmin", axis, **kw)

    def argmax(self, axis=None, **kw):
        return self._fold("argmax", axis, **kw)

    def nan_count(self, axis=None, **kw):
        return self._fold("nan_count", axis, **kw)

    def all_finite(self, axis=None, **kw):
        return self._fold("all_finite", axis, **kw)

    def norm(self, ord=2, axis=None, **kw):
        return self._fold("norm_l1" if ord == 1 else "norm_l2", axis, **kw)

    def median(self, axis=None, **kw):
        return self._fold("median", axis, **kw)

    def quantile(self, q, axis=None, **kw):
        q = [float(x) for x in q] if _np.ndim(q) else float(q)
        return self._fold("quantile", axis, q=q, **kw)

    def histogram(self, bins=10, range=None, axis=None, **kw):
        params = {"bins": int(bins)}
        if range is not None:
            params["range"] = [float(range[0]), float(range[1])]
        return self._fold("histogram", axis, **params, **kw)


def _dataset(file, name):
    return file[name]


# -- writing ------------------------------------------------------------------------------


def default_chunks(shape, itemsize):
    """``tet-host convert``'s default chunk shape: whole trailing axes while they fit in
    about 1 MiB, the rest of that on the next axis, 1 on the others."""
    left = max((1 << 20) // max(itemsize, 1), 1)
    out = [1] * len(shape)
    for i in reversed(range(len(shape))):
        d = max(int(shape[i]), 1)
        if d <= left:
            out[i] = d
            left = max(left // d, 1)
        else:
            out[i] = left
            left = 1
    return tuple(out)


def tet_dtype(dtype):
    """The .tet type name of a NumPy dtype, or TetError (usage) naming what .tet holds."""
    d = _np.dtype(dtype)
    name = _TET_OF.get((d.kind, d.itemsize))
    if name is None:
        raise TetError(f"dtype {d} is not one .tet holds ({', '.join(DTYPES)}); "
                       f"convert it first (bool to uint8, int8 to int16)", 16, "usage")
    return name


def _now():
    import datetime
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writer:
    """Writes a .tet file, or with ``append=True`` adds datasets to an existing one.

    Declare every dataset first (``add`` for a whole NumPy array, ``create_dataset`` for
    one written chunk by chunk with ``write_chunk``), then write chunks; ``close``
    finishes the file and renames it over ``path`` (atomic: until then the old file, if
    any, is untouched; an exception inside ``with`` leaves it untouched too).

    A C-contiguous little-endian array is written from its own memory, not copied: do
    not change it until ``close`` returns.
    """

    def __init__(self, path, append=False, codec="raw", level=3, tool="tetrs"):
        self.path = _os.fspath(path)
        self._raw = _tetrs.RawWriter(self.path, bool(append), int(level))
        self._append = bool(append)
        self._codec = codec
        self._names = {}      # name -> (index, dtype, shape, chunks, codec)
        self._arrays = []     # (index, array, codec)
        self._meta = {}       # name -> metadata entry
        self._history = []
        self._started = False
        self._closed = False
        self._tool = tool

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _declare(self, name, dtype, shape, chunks, codec, dims, coords, attrs):
        if self._started:
            raise TetError(f"{self.path}: dataset {name!r} declared after data was written: "
                           f"declare every dataset first", 16, "usage")
        shape = tuple(int(s) for s in shape)
        dtype = _np.dtype(dtype)
        if chunks is None:
            chunks = default_chunks(shape, dtype.itemsize)
        chunks = tuple(int(c) for c in chunks)
        codec = codec or self._codec
        i = self._raw.declare(name, tet_dtype(dtype), list(shape), list(chunks))
        self._names[name] = (i, DTYPES[tet_dtype(dtype)], shape, chunks, codec)
        entry = {}
        if dims is not None:
            entry["dim_names"] = list(dims)
        if attrs:
            entry["attrs"] = {str(k): v if isinstance(v, str) else str(v)
                              for k, v in attrs.items()}
        if coords:
            for dim, c in coords.items():
                if isinstance(c, str):
                    entry.setdefault("tet_coords", {})[dim] = {"dataset": c}
                else:
                    entry.setdefault("coords", {})[dim] = {"labels": [str(x) for x in c]}
        if entry:
            self._meta[name] = entry
        return i

    def add(self, name, data, chunks=None, codec=None, dims=None, coords=None, attrs=None):
        """Declares dataset ``name`` holding the whole array ``data`` (written when the
        first chunk is written or at ``close``). ``coords`` maps a dimension name to
        inline labels (a list of strings) or to the name of a 1-D dataset of the file."""
        a = _np.asarray(data)
        if a.ndim == 0:
            raise TetError(f"{self.path}: dataset {name!r}: a .tet dataset has 1 to 8 axes; "
                           f"this is a scalar", 16, "usage")
        target = DTYPES[tet_dtype(a.dtype)]
        if a.dtype != target or not a.flags.c_contiguous:
            a = _np.ascontiguousarray(a, dtype=target)
        i = self._declare(name, a.dtype, a.shape, chunks, codec, dims, coords, attrs)
        self._arrays.append((i, a, self._names[name][4]))

    def create_dataset(self, name, shape, dtype, chunks=None, codec=None, dims=None,
                       coords=None, attrs=None):
        """Declares dataset ``name`` to be written chunk by chunk with ``write_chunk``."""
        self._declare(name, dtype, shape, chunks, codec, dims, coords, attrs)

    def _start(self):
        if self._started:
            return
        self._started = True
        for i, a, codec in self._arrays:
            self._raw.write_array(i, a.reshape(-1).view(_np.uint8), codec)
        self._arrays = []

    def write_chunk(self, name, coords, tile, codec=None):
        """Writes the chunk of ``name`` at grid ``coords``: ``tile`` has the chunk's
        shape (clipped at the array's edge)."""
        i, dt, shape, chunks, dcodec = self._names[name]
        self._start()
        t = _np.ascontiguousarray(tile, dtype=dt)
        self._raw.write_chunk(i, [int(c) for c in coords], t.reshape(-1).view(_np.uint8),
                              codec or dcodec)

    def history(self, op, source="", params=None, at=None):
        """Adds a history row (an append records the last row given, or one of its own)."""
        self._history.append((str(op), str(source), at or _now(),
                              [(str(k), str(v)) for k, v in (params or {}).items()]))

    def close(self):
        """Writes the remaining arrays and the footer, then renames the file over
        ``path``."""
        if self._closed:
            return
        self._start()
        meta = {}
        if not self._append:
            meta["file"] = {"tool": self._tool, "library_version": __version__,
                            "created_at": _now()}
        if self._meta:
            meta["datasets"] = self._meta
        rows = list(self._history)
        if not rows:
            rows.append(("append" if self._append else "create", self._tool, _now(),
                         [("datasets", ",".join(self._names))]))
        self._closed = True
        self._raw.finish(_json.dumps(meta) if meta else None, rows)

    def abort(self):
        """Drops what was written; ``path`` is untouched."""
        self._closed = True
        self._raw.abort()


def create(path, codec="raw", level=3):
    """A :class:`Writer` of a new file at ``path``."""
    return Writer(path, append=False, codec=codec, level=level)


def append(path, codec="raw", level=3):
    """A :class:`Writer` adding datasets to the file at ``path``."""
    return Writer(path, append=True, codec=codec, level=level)


def to_tet(dataset, path, codec="raw", level=3, chunks=None):
    """Writes an xarray Dataset to ``path`` (see :mod:`tetrs.xarray_backend`)."""
    from .xarray_backend import to_tet as _to_tet
    return _to_tet(dataset, path, codec=codec, level=level, chunks=chunks)
