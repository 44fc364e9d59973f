"""The binding and the CLI give the same answers, because they run the same library
code (tet-std): every file of the corruption suite (tests/tests/corruption.rs) verified
by ``tetrs.verify`` and by ``tet-host verify --json``, and every query document the CLI's
query tests run (host/tests/query_cli.rs, dims_cli.rs, cli.rs, hostile.rs, no_harm.rs)
answered by ``File.query`` and by ``tet-host query``.

The files are kept under data/: regenerate them with
``TET_SAVE_CASES=$PWD/python/tests/data/corruption cargo test -p tet-tests --test corruption``
and ``TET_SAVE_QUERIES=$PWD/python/tests/data/queries cargo test -p tet-host --test query_cli
--test dims_cli --test cli --test hostile --test no_harm`` (from the repository root).
"""

import json
import math
import pathlib
import subprocess
import warnings

import numpy as np
import pytest

import tetrs

DATA = pathlib.Path(__file__).resolve().parent / "data"
CORRUPTION = sorted((DATA / "corruption").glob("*.tet"))
QUERIES = sorted((DATA / "queries").glob("*.json"))


def cli(host, *args):
    p = subprocess.run([host, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def said(stderr):
    """The error the CLI said last (it may go on over several lines), without its
    ``tet-host: `` prefix."""
    lines = stderr.rstrip("\n").split("\n")
    starts = [i for i, l in enumerate(lines) if l.startswith("tet-host: ")]
    if not starts:
        return stderr.strip()
    return "\n".join(lines[starts[-1]:]).removeprefix("tet-host: ")


def test_the_corpora_are_there():
    # Both lists come from the Rust tests; an empty glob would make the tests below
    # pass vacuously.
    assert len(CORRUPTION) >= 60, len(CORRUPTION)
    assert len(QUERIES) >= 200, len(QUERIES)


# -- verify -----------------------------------------------------------------------------


def verify_both(host, path, deep):
    """(the CLI's exit status and JSON document, the binding's report or error)."""
    args = ["verify", "--json", str(path)] + (["--deep"] if deep else [])
    code, out, _ = cli(host, *args)
    doc = json.loads(out)
    try:
        return code, doc, tetrs.verify(str(path), deep=deep)
    except tetrs.TetError as e:
        return code, doc, e


def assert_same_verify(code, doc, ours):
    if isinstance(ours, tetrs.TetError):
        # The file could not be checked at all: the CLI's error object says the same.
        assert "error" in doc, (doc, ours)
        assert (ours.exit, ours.message) == (code, doc["error"]["message"])
        assert doc["error"]["exit"] == code
        return
    assert "error" not in doc, doc
    ours = dict(ours)
    assert ours.pop("exit") == code, (ours, code)
    operational = ours.pop("operational")
    assert (operational is None) == (doc["status"] != "incomplete")
    assert ours == doc


@pytest.mark.parametrize("deep", [False, True], ids=["quick", "deep"])
@pytest.mark.parametrize("path", CORRUPTION, ids=lambda p: p.stem)
def test_verify_the_corruption_suite_as_the_cli(host, path, deep):
    code, doc, ours = verify_both(host, path, deep)
    assert_same_verify(code, doc, ours)
    if path.stem.startswith("base_is_clean"):
        assert code == 0 and ours["status"] == "clean"


def test_verify_every_truncation_as_the_cli(host, tmp_path):
    # The suite's truncation sweep keeps only its first files: every other length of
    # the same base file here.
    base = (DATA / "corruption" / "base_is_clean_and_canonical-0.tet").read_bytes()
    statuses = set()
    for n in range(len(base)):
        p = tmp_path / f"cut{n}.tet"
        p.write_bytes(base[:n])
        code, doc, ours = verify_both(host, p, False)
        assert_same_verify(code, doc, ours)
        assert code in (4, 8), (n, code)
        statuses.add(code)
    assert 4 in statuses


def test_the_suite_reaches_every_outcome(host):
    # The comparison means something only if the files give clean, damaged and refused
    # outcomes, and findings of many codes.
    codes, exits = set(), set()
    for path in CORRUPTION:
        code, doc, _ = verify_both(host, path, True)
        exits.add(code)
        codes.update(f["code"] for f in doc.get("findings", []))
    assert {0, 4} <= exits, exits
    assert len(codes) >= 25, sorted(codes)


# -- query ------------------------------------------------------------------------------


def plain(v):
    """A value as the CLI's JSON gives it: NaN and infinities as strings."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v[()]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(v, (tuple, list)):
        return [plain(x) for x in v]
    raise TypeError(type(v))


def array(a, coords=False):
    a = np.asarray(a)
    if coords:
        rows = a.reshape(-1, a.shape[-1])
        return {"shape": list(a.shape[:-1]), "data": [plain(list(r)) for r in rows]}
    return {"shape": list(a.shape), "data": [plain(x) for x in a.reshape(-1)]}


def as_cli(answer):
    """The binding's answer in the CLI's JSON shape."""
    r = answer["result"]
    if isinstance(r, dict):  # a histogram
        counts = np.asarray(r["counts"])
        edges = [plain(e) for e in r["edges"]]
        if counts.ndim == 1:
            return {"edges": edges, "counts": [plain(c) for c in counts],
                    **{k: plain(r[k]) for k in ("under", "over", "nan")}}
        return {"edges": edges, "counts": array(counts),
                **{k: array(r[k]) for k in ("under", "over", "nan")}}
    coords = answer["result_dtype"] == "coords"
    if isinstance(r, np.ndarray) and (r.ndim > 1 or (r.ndim == 1 and not coords)):
        return array(r, coords)
    if isinstance(r, np.ndarray) and r.ndim == 1 and answer["op"] is None:
        return array(r)
    return plain(r)


def run_query(host, rec):
    path = DATA / "queries" / "files" / rec["file"]
    args = ["query", rec["doc"], "-t", str(path)]
    budget = rec["memory_budget"]
    jobs = rec["jobs"]
    if budget is not None:
        args += ["--memory-budget", budget]
    if jobs is not None:
        args += ["-j", jobs]
    code, out, err = cli(host, *args)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            f = tetrs.open(path)
            ours = f.query(rec["doc"], memory_budget=budget,
                           threads=None if jobs is None else int(jobs))
        except tetrs.TetError as e:
            ours = e
    return code, out, err, ours, [str(w.message) for w in seen]


@pytest.mark.parametrize("rec_path", QUERIES, ids=lambda p: p.stem)
def test_query_documents_answer_as_the_cli(host, rec_path):
    rec = json.loads(rec_path.read_text())
    code, out, err, ours, warned = run_query(host, rec)
    if isinstance(ours, tetrs.TetError):
        assert code != 0, (rec, out, ours)
        assert ours.exit == code, (rec, err, ours)
        if code != 16 or "--memory-budget" not in (rec["memory_budget"] and err or ""):
            # The same sentence (the binding adds how to raise a budget in Python).
            message = said(err)
            assert ours.message == message or ours.message.startswith(
                message + " (from Python: memory_budget="), (ours.message, message)
        return
    assert code == 0, (rec, err)
    doc = json.loads(out)
    for k in ("dataset", "op", "dtype", "result_dtype"):
        assert ours[k] == doc[k], (k, ours[k], doc[k])
    want = doc["result"]
    if isinstance(want, dict):
        # The binding gives dimension names through xarray, not in the answer.
        want.pop("dims", None)
    assert as_cli(ours) == want
    # The same warnings: the reader's and an all-NaN cell's, in the CLI's words.
    cli_warned = [l.split(": ", 2)[-1] for l in err.splitlines()
                  if l.startswith("tet-host: ") and "warning" in l]
    for w in cli_warned:
        assert any(w.removeprefix("warning: ") in x for x in warned), (w, warned)


def test_the_query_corpus_reaches_answers_and_refusals(host):
    exits = set()
    for rec_path in QUERIES:
        code, *_ = run_query(host, json.loads(rec_path.read_text()))
        exits.add(code)
    assert {0, 4, 8, 16} <= exits, exits
