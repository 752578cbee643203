#!/usr/bin/env bash
# setup.sh: installs what `--config=aarch64` builds and tests with; ./bazelw runs it when that config
# is on its command line. Idempotent: a second run with everything in place changes nothing.
#
# From Debian: the cross compiler (g++-aarch64-linux-gnu, whose C and C++ libraries live in
# /usr/aarch64-linux-gnu) and qemu-user. The arm64 builds of the libraries the runtime links are
# Debian's arm64 packages unpacked into a sysroot of their own (SYSROOT below), not installed with
# apt: libxnnpack, libpthreadpool and libsentencepiece are not multi-arch, so their arm64 -dev packages
# would replace the amd64 ones the x86 build links.
set -euo pipefail

SYSROOT=/opt/edgeshare/aarch64-sysroot

host_packages=(g++-aarch64-linux-gnu qemu-user)
# Runtime libraries, their -dev packages and the arch-independent header packages the tools use.
arm64_packages=(libxnnpack0 libxnnpack-dev libpthreadpool0 libpthreadpool-dev libcpuinfo0
  libssl3 libssl-dev libpcre2-8-0 libpcre2-dev libutf8proc2 libutf8proc-dev libsentencepiece0
  libsentencepiece-dev libgtest-dev nlohmann-json3-dev libcli11-dev)

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

missing=()
for p in "${host_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "aarch64 setup: installing ${missing[*]}" >&2
  if ! $sudo apt-get install -y -q "${missing[@]}" >&2; then
    $sudo apt-get update -q >&2
    $sudo apt-get install -y -q "${missing[@]}" >&2
  fi
fi

# The sysroot records the package list it was made from; the same list means nothing to do.
stamp="$SYSROOT/.packages"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${arm64_packages[*]}" ]; then
  exit 0
fi

# apt downloads arm64 packages only once dpkg knows the architecture; nothing arm64 is installed.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo dpkg --add-architecture arm64
  $sudo apt-get update -q >&2
fi

echo "aarch64 setup: unpacking arm64 ${arm64_packages[*]} into $SYSROOT" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
names=()
for p in "${arm64_packages[@]}"; do
  # Architecture-independent packages have no :arm64 name.
  if [ "$(apt-cache show --no-all-versions "$p" 2>/dev/null | sed -n 's/^Architecture: //p')" = all ]; then
    names+=("$p")
  else
    names+=("$p:arm64")
  fi
done
if ! (cd "$work" && apt-get download -q "${names[@]}" >&2); then
  $sudo apt-get update -q >&2
  (cd "$work" && apt-get download -q "${names[@]}" >&2)
fi
mkdir -p "$work/root"
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$work/root"
done
echo "${arm64_packages[*]}" >"$work/root/.packages"
$sudo mkdir -p "$(dirname "$SYSROOT")"
$sudo rm -rf "$SYSROOT.old"
if [ -e "$SYSROOT" ]; then $sudo mv "$SYSROOT" "$SYSROOT.old"; fi
$sudo mv "$work/root" "$SYSROOT"
$sudo rm -rf "$SYSROOT.old"
