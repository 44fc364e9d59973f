#!/usr/bin/env python3
"""Regenerates the footprint table in docs/firmware.md: for every firmware example and
every CRC-32C table option (none, 1 KiB, 16 KiB), the flash and RAM sections of the
release build and the stack high-water mark the example measures by painting its stack
(it prints `stack: N bytes` on standard error), run under QEMU.

Usage: python3 firmware-examples/footprint.py [--check]
  --check  fail if docs/firmware.md's table differs from what this build measures.
"""

import pathlib
import re
import struct
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "firmware.md"
EXAMPLES = [  # (package directory, example, board, extra cargo features)
    (".", "tet_catalog", "LM3S6965", []),
    ("boot", "boot_cetrafs", "LM3S6965 (16 KiB / 8 KiB budget)", []),
    ("boot", "boot_cetrafs", "LM3S6965 (24 KiB / 8 KiB, `error-detail`)", ["error-detail"]),
    ("defmt-log", "defmt_log", "LM3S6965", []),
    ("mps2", "tet_zstd_fold", "MPS2-AN386", []),
    ("mps2", "panic_free", "MPS2-AN386", []),
]
OPTIONS = [("none", ["crc-no-table"]), ("1 KiB", []), ("16 KiB", ["crc-table-16k"])]
BEGIN = "<!-- footprint:begin -->"
END = "<!-- footprint:end -->"


def sections(elf: bytes) -> dict:
    """Sizes of the named sections of a 32-bit little-endian ELF file."""
    shoff, = struct.unpack_from("<I", elf, 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x2E)
    def header(i):
        return struct.unpack_from("<IIIIIIIIII", elf, shoff + i * shentsize)
    names_off = header(shstrndx)[4]
    out = {}
    for i in range(shnum):
        name_at, _type, _flags, _addr, _off, size = header(i)[:6]
        end = elf.index(b"\0", names_off + name_at)
        out[elf[names_off + name_at:end].decode()] = size
    return out


def measure(pkg: str, example: str, flags: list) -> tuple:
    cwd = HERE / pkg
    cmd = ["cargo", "run", "-q", "--release", "--locked", "--example", example] + flags
    run = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=600)
    if run.returncode != 0:
        sys.exit(f"{example} {flags}: exit {run.returncode}\n{run.stderr.decode(errors='replace')}")
    m = re.search(rb"stack: (\d+) bytes", run.stderr)
    stack = int(m.group(1)) if m else None
    elf = (HERE / "target" / "thumbv7m-none-eabi" / "release" / "examples" / example).read_bytes()
    s = sections(elf)
    return (s.get(".vector_table", 0) + s.get(".text", 0), s.get(".rodata", 0),
            s.get(".data", 0), s.get(".bss", 0) + s.get(".uninit", 0), stack)


def table() -> str:
    rows = ["| example | board | CRC table | .text (+ vectors) | .rodata | .data | .bss | "
            "stack high-water | flash total | RAM total |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for pkg, example, board, extra in EXAMPLES:
        for label, features in OPTIONS:
            features = extra + features
            flags = ["--features", ",".join(features)] if features else []
            text, rodata, data, bss, stack = measure(pkg, example, flags)
            flash = text + rodata + data
            ram = data + bss + (stack or 0)
            rows.append(f"| `{example}` | {board} | {label} | {text} | {rodata} | {data} | "
                        f"{bss} | {stack} | {flash} | {ram} |")
    return "\n".join(rows)


def main():
    rows = table()  # minutes of building: read the document after, not before
    doc = DOC.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    new = doc[:start] + "\n" + rows + "\n" + doc[end:]
    if "--check" in sys.argv:
        if new != doc:
            sys.exit("docs/firmware.md: the footprint table is out of date "
                     "(python3 firmware-examples/footprint.py)")
        return
    DOC.write_text(new)


if __name__ == "__main__":
    main()
