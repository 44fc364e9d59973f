#!/usr/bin/env bash
# Every check CI runs, runnable on a fresh machine: installs what it needs, then runs
# fmt, clippy (warnings denied), all tests, the thumbv7m-none-eabi builds of tet-core and
# tet-alloc, the firmware examples under QEMU (installed with apt when missing) compared
# with their expected output, and a fuzz smoke run of every target. FUZZ_SECONDS sets the per-target fuzz time (>= 30).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target add thumbv7m-none-eabi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
# Decodes the defmt example's log on the host (a few minutes to build, once per machine).
command -v defmt-print >/dev/null 2>&1 || cargo install defmt-print --version 1.2.0 --locked

if [ ! -d ../shared/conformance/tet-upstream ]; then
  if [ -n "${CI:-}" ]; then
    echo "error: ../shared/conformance is missing; CI must run the conformance tests" >&2
    exit 1
  fi
  echo "WARNING: ../shared/conformance is missing: conformance tests will be SKIPPED" >&2
fi

step "FUSE mount tests: fusermount3 (Debian's fuse3) when missing"
# host/tests/mount_cli.rs mounts through /dev/fuse; as root it needs nothing more, as
# another user fusermount3. Without /dev/fuse the tests print SKIPPING (and fail under CI).
if [ -e /dev/fuse ] && ! command -v fusermount3 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends fuse3 >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq --no-install-recommends fuse3 >/dev/null
  fi
fi

step "fmt"
cargo fmt --all --check
(cd fuzz && cargo fmt --check)

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p tet-core --target thumbv7m-none-eabi --locked -- -D warnings
cargo clippy -p tet-alloc --target thumbv7m-none-eabi --locked -- -D warnings
cargo clippy -p tet-alloc --target thumbv7m-none-eabi --locked --features defmt -- -D warnings

step "tests"
log=$(mktemp)
cargo test --workspace --locked 2>&1 | tee "$log"

step "Python: one pinned venv (target/venv-py), the tetrs binding built, pytest; the Zarr check"
# One virtual environment per machine from python/requirements-test.txt (CPython 3.11),
# made again when that file changes (its hash is kept in the venv). The Zarr check and
# the binding's tests both use it; TET_ZARR_PYTHON still picks another interpreter for
# the Zarr check.
venv=target/venv-py
req=python/requirements-test.txt
req_hash=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements-sha256" 2>/dev/null)" != "$req_hash" ]; then
  rm -rf "$venv"
  py=$(command -v python3.11 || command -v python3)
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q -r "$req"
  echo "$req_hash" > "$venv/.requirements-sha256"
fi
cargo build -q -p tet-host --locked
zarr_py=${TET_ZARR_PYTHON:-$venv/bin/python}
if "$zarr_py" -c 'import zarr, numpy' >/dev/null 2>&1; then
  zarr_work=$(mktemp -d)
  "$zarr_py" tests/interop/check_zarr_export.py target/debug/tet-host \
    host/tests/fixtures/zarr/fixture.zarr "$zarr_work"
  rm -rf "$zarr_work"
else
  echo "zarr-python not importable by $zarr_py: skipped (cargo test covered the round trip)"
fi
# The extension, built incrementally in python/target (its own lock file), installed
# editable into the venv; then every pytest test. No test collected fails the run.
(cd python && cargo fmt --check && VIRTUAL_ENV="$PWD/../$venv" PATH="$PWD/../$venv/bin:$PATH" \
  maturin develop --release --locked -q)
(cd python && PYO3_PYTHON="$PWD/../$venv/bin/python" cargo clippy -q --release --locked --all-targets -- -D warnings)
pylog=$(mktemp)
pyrc=0
(cd python && TET_HOST="$PWD/../target/debug/tet-host" "../$venv/bin/python" -m pytest -q tests) 2>&1 \
  | tee "$pylog" || pyrc=$?
py_passed=$(tail -n 1 "$pylog" | { grep -Eo '[0-9]+ passed' || true; } | awk '{s+=$1} END {print s+0}')
py_failed=$(tail -n 1 "$pylog" | { grep -Eo '[0-9]+ (failed|errors?)' || true; } | awk '{s+=$1} END {print s+0}')
rm -f "$pylog"
if [ "$py_passed" -eq 0 ] && [ "$pyrc" -eq 0 ]; then pyrc=1; fi
if [ "$pyrc" -ne 0 ]; then echo "pytest failed (exit $pyrc, $py_passed passed)" >&2; fi

step "NetCDF and HDF5 input (tet-host features netcdf and hdf5: libnetcdf, libhdf5)"
# The features link the system's libraries; apt installs them once per machine.
if ! pkg-config --exists netcdf hdf5 2>/dev/null; then
  pkgs="libnetcdf-dev libhdf5-dev pkg-config"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  fi
fi
# Each feature alone routes HDF5-signature files differently: all three builds are linted.
cargo clippy -p tet-host --features netcdf,hdf5 --all-targets --locked -- -D warnings
cargo clippy -q -p tet-host --features netcdf --all-targets --locked -- -D warnings
cargo clippy -q -p tet-host --features hdf5 --all-targets --locked -- -D warnings
cargo test -p tet-host --features netcdf,hdf5 --locked --test netcdf_cli --test hdf5_cli 2>&1 | tee -a "$log"
# Files written by h5py and netCDF4-python (the venv above), converted by the tet-host
# the tests just built with both features, read back through tetrs.
cargo build -q -p tet-host --features netcdf,hdf5 --locked
foreign_work=$(mktemp -d)
"$venv/bin/python" tests/interop/check_hdf5_netcdf.py target/debug/tet-host "$foreign_work"
rm -rf "$foreign_work"

step "tet-core (every CRC table size) and tet-alloc for thumbv7m-none-eabi"
cargo build -p tet-core --target thumbv7m-none-eabi --release --locked
cargo build -p tet-core --target thumbv7m-none-eabi --release --locked --features crc-no-table
cargo build -p tet-core --target thumbv7m-none-eabi --release --locked --features crc-table-16k
cargo build -p tet-alloc --target thumbv7m-none-eabi --release --locked
cargo test -p tet-core --locked --features crc-no-table --lib checksum 2>&1 | tee -a "$log"
cargo test -p tet-core --locked --features crc-table-16k --lib checksum 2>&1 | tee -a "$log"

step "firmware examples under QEMU (thumbv7m-none-eabi, LM3S6965)"
if ! command -v qemu-system-arm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends qemu-system-arm >/dev/null
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq --no-install-recommends qemu-system-arm >/dev/null
  fi
fi
(cd firmware-examples && cargo fmt --check && rustfmt --check --edition 2021 images/src/lib.rs)
(cd firmware-examples && cargo clippy -q --release --locked --workspace --examples -- -D warnings)
# Each package keeps its examples' expected output in its own expected/ (each package
# has its own memory layout; boot_cetrafs's fails to link if it outgrows its budget).
for expected in firmware-examples/expected/*.out firmware-examples/*/expected/*.out; do
  name=$(basename "$expected" .out)
  dir=$(dirname "$(dirname "$expected")")
  got=$(mktemp)
  # Exit status 0 only when every check in the example passed; the output must match.
  (cd "$dir" && timeout 120 cargo run -q --release --locked --example "$name") > "$got"
  diff -u "$expected" "$got"
  echo "firmware example $name: ok"
  rm -f "$got"
done
# The bootloader with the core's full errors (its 24 KiB layout): the same output.
(cd firmware-examples/boot && cargo clippy -q --release --locked --examples --features error-detail -- -D warnings)
got=$(mktemp)
(cd firmware-examples/boot && timeout 120 cargo run -q --release --locked --example boot_cetrafs --features error-detail) > "$got"
diff -u firmware-examples/boot/expected/boot_cetrafs.out "$got"
echo "firmware example boot_cetrafs (error-detail): ok"
rm -f "$got"

step "fuzz smoke run"
fuzz_seconds=${FUZZ_SECONDS:-30}
for target in $(cd fuzz && cargo fuzz list); do
  corpus=$(mktemp -d)
  extra=()
  if [ "$target" = cetrafs_open_walk ]; then
    # A whole image as one more seed (first byte odd: the input is the image), made by
    # the project's own mkfs, so mutations reach past one block into every structure.
    img=$(mktemp)
    cargo run -q -p tet-host --locked -- mkfs "$img" --size 256K --zone-groups 1 \
        --nodes 1 --inodes 16 --from docs/examples >/dev/null
    { printf '\001'; cat "$img"; } > "$corpus/whole-image"
    rm -f "$img"
    extra=(-max_len=300000)
  fi
  (cd fuzz && cargo fuzz run -s none "$target" "$corpus" "seeds/$target" -- \
      -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" 2>&1 | tail -n 12)
  rm -rf "$corpus"
done

rm -rf fuzz/corpus
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s+=$1} END {print s+0}')
rm -f "$log"
echo
passed=$((passed + py_passed))
failed=$((failed + py_failed))
echo "summary: $passed passed, $failed failed"
if [ "$pyrc" -ne 0 ]; then exit 1; fi
