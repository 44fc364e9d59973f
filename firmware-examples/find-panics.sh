#!/usr/bin/env bash
# Lists the panic paths left in the panic-freedom proof: links it with the missing
# symbol defined (so the link succeeds), then prints, for every call into the
# standard library's panic functions, the source lines (inlined frames included) that
# lead there. Empty output: the proof links as it is.
set -euo pipefail
cd "$(dirname "$0")"
cargo rustc -q --release -p tet-fw-mps2 --example panic_free -- \
  -C link-arg=--defsym=a_panic_path_survived_in_the_program=0
elf=target/thumbv7m-none-eabi/release/examples/panic_free
llvm-objdump -d --no-show-raw-insn -C "$elf" |
  grep -E '\s(bl|b\.w)\s+0x[0-9a-f]+ <(core::panicking|core::slice::.*fail|core::option::.*failed|core::result::unwrap_failed|core::str::slice_error_fail|core::cell::panic)' |
  awk '{print $1}' | tr -d ':' |
  while read -r addr; do
    echo "== 0x$addr"
    llvm-addr2line -e "$elf" -f -i -C "0x$addr" | paste - - | grep -v '/library/core/' | head -4
  done
