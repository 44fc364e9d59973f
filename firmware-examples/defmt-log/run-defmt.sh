#!/usr/bin/env bash
# Runner for the defmt example: boots the firmware under QEMU, whose semihosting
# output is a stream of defmt frames, and decodes it with defmt-print against the same
# ELF. Exits with the firmware's status.
set -uo pipefail
elf=$1
frames=$(mktemp)
trap 'rm -f "$frames"' EXIT
qemu-system-arm -cpu cortex-m3 -machine lm3s6965evb -nographic \
  -semihosting-config enable=on,target=native -kernel "$elf" > "$frames"
status=$?
defmt-print -e "$elf" --log-format "{L} {s}" < "$frames" || exit 1
exit $status
