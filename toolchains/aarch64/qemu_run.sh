#!/usr/bin/env bash
# qemu_run.sh BINARY [ARGS...]: runs an aarch64 Linux binary on this x86-64 machine under qemu-user,
# with the cross compiler's C and C++ libraries (/usr/aarch64-linux-gnu) and the arm64 libraries
# setup.sh unpacked. The CPU model is QEMU_CPU's (qemu-aarch64 reads it), `max` when unset: every
# extension qemu emulates (NEON, dot product, i8mm, SVE2).
set -euo pipefail
export QEMU_CPU="${QEMU_CPU:-max}"
exec qemu-aarch64 -L /usr/aarch64-linux-gnu \
  -E LD_LIBRARY_PATH=/opt/edgeshare/aarch64-sysroot/usr/lib/aarch64-linux-gnu "$@"
