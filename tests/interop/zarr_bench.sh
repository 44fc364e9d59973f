#!/bin/sh
# The Zarr convert benchmark of docs/benchmarks.md, in one session:
#
#     tests/interop/zarr_bench.sh PYTHON TET_HOST WORKDIR [PEER_TET]
#
# PYTHON has zarr-python and NumPy; TET_HOST is a release build; PEER_TET, when given,
# is the other implementation's `tet` (a release build), whose `tet convert` of both
# stores runs beside ours (each output it writes then checked by our `verify`).
# WORKDIR gets the two
# 1.3 GB stores (made once: zstd frames with and without a content checksum) and one
# output at a time (each removed after its run, so at most 2 GiB of output exists).
# Each run prints the load average before it and /usr/bin/time's wall, CPU and peak RSS.
set -e
PY=$1
TET=$2
W=$3
PEER=${4:-}
B=$(cd "$(dirname "$0")" && pwd)/zarr_bench.py
mkdir -p "$W"
[ -f "$W/sum.zarr/zarr.json" ] || "$PY" "$B" make "$W/sum.zarr" --checksum
[ -f "$W/nosum.zarr/zarr.json" ] || "$PY" "$B" make "$W/nosum.zarr"
find "$W/sum.zarr" "$W/nosum.zarr" -type f -exec cat {} + > /dev/null
run() {
  label=$1; shift
  echo "== $label  ($(uptime | sed 's/.*load/load/'))"
  /usr/bin/time -f "   wall %e s  user %U s  sys %S s  peak RSS %M KiB" "$@"
  rm -f "$W/out.tet"
}
run "zarr-python read sum.zarr" "$PY" "$B" read "$W/sum.zarr"
run "convert sum.zarr --codec raw" "$TET" convert "$W/sum.zarr" "$W/out.tet" --codec raw
run "convert sum.zarr (zstd, frames copied)" "$TET" convert "$W/sum.zarr" "$W/out.tet"
run "convert nosum.zarr (zstd, re-encoded)" "$TET" convert "$W/nosum.zarr" "$W/out.tet"
run "zarr-python read nosum.zarr" "$PY" "$B" read "$W/nosum.zarr"
if [ -n "$PEER" ]; then
  for s in sum nosum; do
    echo "== peer tet convert $s.zarr  ($(uptime | sed 's/.*load/load/'))"
    if /usr/bin/time -f "   wall %e s  user %U s  sys %S s  peak RSS %M KiB" \
      "$PEER" convert "$W/$s.zarr" "$W/out.tet"; then
      "$TET" verify "$W/out.tet" || true
    fi
    rm -f "$W/out.tet"
  done
fi
echo "== after ($(uptime | sed 's/.*load/load/'))"
