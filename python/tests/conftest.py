import os
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tet_host():
    """The tet-host binary the Rust tests built (TET_HOST, else target/debug or release)."""
    env = os.environ.get("TET_HOST")
    if env:
        return env
    for p in (ROOT / "target" / "debug" / "tet-host", ROOT / "target" / "release" / "tet-host"):
        if p.exists():
            return str(p)
    return shutil.which("tet-host")


@pytest.fixture
def host():
    exe = tet_host()
    if exe is None:
        pytest.skip("no tet-host binary (build it with cargo build -p tet-host)")
    return exe
