"""The xarray backend (entry point ``tetrs`` under ``xarray.backends``) and ``to_tet``.

Reading: every dataset of the file that is not a coordinate dataset is a data variable,
lazily indexed (:class:`TetBackendArray`); dims come from ``dim_names`` (``dim_0``, ...
when absent), coordinates from inline labels or coordinate datasets, attrs from the
axis metadata. ``encoding["preferred_chunks"]`` is the chunk grid, so ``chunks={}``
gives Dask chunks equal to the file's. CF encodings (times as int64 with
``units``/``calendar``) are decoded by xarray's CF decoder.

Writing (:func:`to_tet`): every data variable and coordinate becomes a dataset;
``datetime64``/``timedelta64`` are CF-encoded as int64 with ``units``/``calendar`` as
xarray's NetCDF writers do; ``bool`` is stored as u8 and ``int8`` as i16 (as
``tet-host convert`` maps them) with a ``tetrs_dtype`` attr that restores them;
non-string attrs are kept as text with their type in ``tetrs_attr_types``.
"""

import json
import os

import numpy as np

import tetrs

try:
    import xarray as xr
    from xarray.backends import BackendArray, BackendEntrypoint
    from xarray.core import indexing
except ImportError:  # pragma: no cover - xarray is optional
    xr = None
    BackendArray = object
    BackendEntrypoint = object

_TYPES_ATTR = "tetrs_attr_types"
_DTYPE_ATTR = "tetrs_dtype"
_COORDS_ATTR = "tetrs_coordinates"


class TetBackendArray(BackendArray):
    """A lazily indexed dataset: basic indexing read through :class:`tetrs.Dataset`."""

    def __init__(self, ds):
        self.ds = ds
        self.shape = ds.shape
        self.dtype = ds.dtype

    def __getitem__(self, key):
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.BASIC, self._raw)

    def _raw(self, key):
        out = self.ds[key]
        return np.asarray(out)


def _decode_attrs(attrs):
    attrs = dict(attrs)
    types = attrs.pop(_TYPES_ATTR, None)
    if types:
        for k, t in json.loads(types).items():
            if k in attrs:
                attrs[k] = _from_text(attrs[k], t)
    return attrs


def _from_text(text, t):
    if t == "int":
        return int(text)
    if t == "float":
        return float(text)
    if t == "bool":
        return text == "true"
    if t == "np":
        v = json.loads(text)
        return np.array(v["v"], dtype=v["d"])
    return json.loads(text)


def _to_text(v):
    """An attr value as text and its type tag (None for a string)."""
    if isinstance(v, str):
        return v, None
    if isinstance(v, (bool, np.bool_)):
        return ("true" if v else "false"), "bool"
    if isinstance(v, (int, np.integer)):
        return str(int(v)), "int"
    if isinstance(v, (float, np.floating)):
        return repr(float(v)), "float"
    if isinstance(v, np.ndarray):
        return json.dumps({"d": v.dtype.str, "v": v.tolist()}), "np"
    return json.dumps(v), "json"


def open_tet_dataset(path, drop_variables=None, mmap=True, decode_cf=True, decode_times=True,
                     mask_and_scale=True):
    """The xarray Dataset of the .tet file at ``path`` (lazily indexed)."""
    f = tetrs.open(path, mmap=mmap)
    coord_names = set()
    for name in f.datasets:
        ds = f[name]
        coord_names.update(ds.coord_datasets.values())
        if ds.attrs.get("tetrs_aux_coord") == "true":
            coord_names.add(name)
    variables, coords, labels = {}, {}, {}
    file_attrs = {}
    for name in f.datasets:
        ds = f[name]
        if name == "__attrs__":
            file_attrs = _decode_attrs(ds.attrs)
            continue
        if drop_variables and name in drop_variables:
            continue
        attrs = dict(ds.attrs)
        attrs.pop("tetrs_aux_coord", None)
        attrs.pop(_COORDS_ATTR, None)
        if attrs.pop("tetrs_scalar", None) == "true":
            var = xr.Variable((), np.asarray(ds[...]).reshape(()), attrs)
        else:
            data = indexing.LazilyIndexedArray(TetBackendArray(ds))
            var = xr.Variable(ds.dims, data, attrs)
            var.encoding["preferred_chunks"] = dict(zip(ds.dims, ds.chunks))
            var.encoding["chunks"] = ds.chunks
        (coords if name in coord_names else variables)[name] = var
        for key, c in ds._m["coords"].items():
            if "labels" in c:
                dim = ds.dims[int(key)] if key.isdigit() else key
                labels.setdefault(dim, xr.Variable((dim,), np.array(c["labels"])))
    coords.update(labels)
    out = xr.Dataset(variables, coords=coords, attrs=file_attrs)
    for v in out.variables.values():
        a = _decode_attrs(v.attrs)
        v.attrs.clear()
        v.attrs.update(a)
    if decode_cf:
        out = xr.decode_cf(out, decode_times=decode_times, mask_and_scale=mask_and_scale)
    for name in list(out.variables):
        v = out.variables[name]
        t = v.attrs.get(_DTYPE_ATTR)
        if t is not None:
            attrs = {k: x for k, x in v.attrs.items() if k != _DTYPE_ATTR}
            nv = xr.Variable(v.dims, v.data.astype(t) if hasattr(v.data, "astype")
                             else np.asarray(v).astype(t), attrs)
            if name in out.coords:
                out = out.assign_coords({name: nv})
            else:
                out[name] = nv
    out.set_close(f.close)
    return out


class TetBackendEntrypoint(BackendEntrypoint):
    """``xr.open_dataset("f.tet")``: a .tet file by its extension or its magic."""

    description = "Open .tet files (tetrs: zero-copy, chunked, lazily indexed)"
    url = "https://example.invalid/tetration-rs/docs/python.md"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "mmap", "decode_times")

    def open_dataset(self, filename_or_obj, *, drop_variables=None, mmap=True,
                     decode_times=True, decode_cf=True, mask_and_scale=True, **kwargs):
        return open_tet_dataset(os.fspath(filename_or_obj), drop_variables=drop_variables,
                                mmap=mmap, decode_times=decode_times, decode_cf=decode_cf,
                                mask_and_scale=mask_and_scale)

    def guess_can_open(self, filename_or_obj):
        try:
            p = os.fspath(filename_or_obj)
        except TypeError:
            return False
        if p.endswith(".tet"):
            return True
        try:
            with open(p, "rb") as fh:
                return fh.read(4) == b"TETR"
        except OSError:
            return False


def _encode_variable(name, var):
    """A variable as (data, attrs) ready for the file: CF-encoded times, mapped dtypes,
    attrs as text."""
    from xarray.conventions import encode_cf_variable
    enc = encode_cf_variable(var.variable if hasattr(var, "variable") else var, name=name)
    data = np.asarray(enc.values)
    attrs = dict(enc.attrs)
    if "_FillValue" in attrs and attrs["_FillValue"] is None:
        del attrs["_FillValue"]
    if data.dtype == np.int8 and attrs.get("dtype") == "bool":
        # xarray's CF coder made the booleans int8 (decoded by its `dtype` attr).
        data = data.astype(np.uint8)
    elif data.dtype == np.bool_:
        data = data.astype(np.uint8)
        attrs[_DTYPE_ATTR] = "bool"
    elif data.dtype == np.int8:
        data = data.astype(np.int16)
        attrs[_DTYPE_ATTR] = "int8"
    elif data.dtype.kind in "US":
        raise tetrs.TetError(f"variable {name!r}: strings ({data.dtype}) are not a .tet dtype; "
                             f"a 1-D string coordinate becomes inline labels", 16, "usage")
    elif data.dtype.kind == "O":
        raise tetrs.TetError(f"variable {name!r}: object arrays are not a .tet dtype", 16,
                             "usage")
    return data, attrs


def _text_attrs(attrs):
    out, types = {}, {}
    for k, v in attrs.items():
        text, t = _to_text(v)
        out[str(k)] = text
        if t:
            types[str(k)] = t
    if types:
        out[_TYPES_ATTR] = json.dumps(types)
    return out


def to_tet(dataset, path, codec="raw", level=3, chunks=None):
    """Writes xarray Dataset ``dataset`` to ``path``: every data variable and coordinate a
    dataset, dims, coordinates and attrs kept. Returns ``path``."""
    if isinstance(dataset, xr.DataArray):
        dataset = dataset.to_dataset(name=dataset.name or "data")
    w = tetrs.Writer(path, codec=codec, level=level)
    try:
        index_coords = {}
        string_labels = {}
        for name, c in dataset.coords.items():
            if c.ndim == 1 and c.dims == (name,) and c.dtype.kind in "USO":
                string_labels[name] = [str(x) for x in c.values]
        for name, var in dataset.variables.items():
            if name in string_labels:
                continue
            data, attrs = _encode_variable(name, var)
            if data.ndim == 0:
                data = data.reshape(1)
                attrs["tetrs_scalar"] = "true"
            dims = list(var.dims) if var.ndim else ["__scalar__"]
            is_index = name in dataset.coords and var.dims == (name,)
            if name in dataset.coords and not is_index:
                attrs["tetrs_aux_coord"] = "true"
            ch = None
            if chunks is not None:
                ch = tuple(chunks.get(d, s) for d, s in zip(var.dims, data.shape))
            elif var.chunks:
                ch = tuple(c[0] for c in var.chunks)
            elif var.encoding.get("chunksizes"):
                ch = tuple(var.encoding["chunksizes"])
            coords = {}
            for d in var.dims:
                if d in string_labels:
                    coords[d] = string_labels[d]
                elif d in dataset.coords and d != name and dataset[d].dims == (d,):
                    coords[d] = d
            aux = [c for c in dataset.coords if c != name and c not in var.dims
                   and set(dataset[c].dims) <= set(var.dims) and c not in string_labels]
            if aux and name not in dataset.coords:
                attrs[_COORDS_ATTR] = " ".join(aux)
            w.add(name, data, chunks=ch, dims=dims, coords=coords or None,
                  attrs=_text_attrs(attrs))
        if dataset.attrs:
            w.add("__attrs__", np.zeros(1, np.uint8), dims=["__attrs__"],
                  attrs=_text_attrs(dataset.attrs))
        w.history("to_tet", "xarray", {"variables": ",".join(map(str, dataset.variables))})
        w.close()
    except BaseException:
        w.abort()
        raise
    return path
