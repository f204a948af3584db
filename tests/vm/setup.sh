#!/bin/bash
# Prepares the cgroup v2 VM test (tests/vm/README.md, tests/vm_cgroup2.rs): qemu-system-x86_64
# and busybox (static) from apt when missing, and Debian's current kernel (the package
# linux-image-amd64 depends on), downloaded with `apt-get download` and unpacked with
# `dpkg-deb -x` into $FERROLET_VM_DIR (default /var/tmp/ferrolet-vm); nothing is installed
# into /boot. Writes $DIR/vmlinuz, the modules the VM loads (zram for swap, overlay) under
# $DIR/modules/, and the marker $DIR/.ferrolet-ready (its content: the kernel package), then
# prints one line `vm: ...`. Idempotent: a ready directory with the current package is left
# as it is. When it cannot (FERROLET_SKIP_VM=1, not root, apt fails) it prints why the VM
# test will skip and exits 0 without the marker.
# Then the systemd VM test's image (tests/vm_systemd.rs): tests/vm/systemd/mkimage.sh, which
# installs mmdebstrap when missing and keeps an image already there; if it fails, that test
# skips (said here, log in /tmp/ferrolet-vm-systemd.log) and this still exits 0.
set -euo pipefail
DIR=${FERROLET_VM_DIR:-/var/tmp/ferrolet-vm}
READY="$DIR/.ferrolet-ready"
LOG=/tmp/ferrolet-vm-setup.log
HERE=$(cd "$(dirname "$0")" && pwd)
skip() { rm -f "$READY"; echo "vm: the cgroup v2 VM test will be skipped: $*"; exit 0; }
# ready MESSAGE: the kernel is there; the systemd image next (its own skip), then exit 0.
ready() {
  echo "vm: ready at $DIR ($*)"
  local log=/tmp/ferrolet-vm-systemd.log start=$SECONDS
  if FERROLET_VM_DIR="$DIR" "$HERE/systemd/mkimage.sh" >"$log" 2>&1; then
    echo "vm: systemd image ready at $DIR/systemd ($((SECONDS - start)) s)"
  else
    echo "vm: the systemd VM test will be skipped: tests/vm/systemd/mkimage.sh failed (see $log)"
  fi
  exit 0
}

[ "${FERROLET_SKIP_VM:-0}" = 1 ] && skip "FERROLET_SKIP_VM=1"
: >"$LOG"
apt_install() {
  [ "$(id -u)" = 0 ] || skip "installing $* needs root"
  echo "vm: installing $*"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } >>"$LOG" 2>&1 \
    || skip "apt-get could not install $* (see $LOG)"
}
missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
# The VM's busybox is copied as it is, so it must be the static one.
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || missing+=(busybox-static)
command -v cpio >/dev/null || missing+=(cpio)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

# The kernel package linux-image-amd64 points to today (e.g. linux-image-6.1.0-56-amd64).
pkg=$(apt-cache depends linux-image-amd64 2>>"$LOG" | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -n1)
if [ -z "$pkg" ]; then
  { apt-get update -qq >>"$LOG" 2>&1 && pkg=$(apt-cache depends linux-image-amd64 2>>"$LOG" | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -n1); } || true
fi
if [ -z "$pkg" ] && [ -f "$READY" ] && [ -s "$DIR/vmlinuz" ]; then
  # Offline (no package lists): the kernel already here is kept.
  ready "$(cat "$READY"); apt could not say whether a newer kernel exists"
fi
[ -n "$pkg" ] || skip "apt knows no linux-image-amd64 (see $LOG)"
ver=$(apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p')
if [ -f "$READY" ] && [ "$(cat "$READY")" = "$pkg $ver" ] && [ -s "$DIR/vmlinuz" ]; then
  ready "$pkg $ver"
fi
rm -f "$READY"
mkdir -p "$DIR"
work=$(mktemp -d "$DIR/.setup.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "vm: downloading $pkg $ver"
(cd "$work" && apt-get download "$pkg" >>"$LOG" 2>&1) || {
  apt-get update -qq >>"$LOG" 2>&1 || true
  (cd "$work" && apt-get download "$pkg" >>"$LOG" 2>&1) || skip "apt-get download $pkg failed (see $LOG)"
}
dpkg-deb -x "$work"/*.deb "$work/root" >>"$LOG" 2>&1 || skip "dpkg-deb -x failed (see $LOG)"
kver=${pkg#linux-image-}
[ -f "$work/root/boot/vmlinuz-$kver" ] || skip "$pkg has no /boot/vmlinuz-$kver"
rm -rf "$DIR/modules" "$DIR/vmlinuz"
mkdir -p "$DIR/modules"
cp "$work/root/boot/vmlinuz-$kver" "$DIR/vmlinuz"
# The modules the VM loads, with what they depend on (the `depends=` of their .modinfo: the
# package has no modules.dep, depmod makes it at install), dependencies first, uncompressed
# into modules/ and listed in load order in modules/order: zram and lz4 (swap, as a
# Raspberry Pi has) and overlay (the process runtime's container roots; without it the
# runtime falls back to a read-only bind of /).
mods="$work/root/lib/modules/$kver"
: >"$DIR/modules/order"
. "$HERE/modules.sh"
for m in zram lz4_compress lz4 overlay; do add_module "$mods" "$DIR/modules" "$m"; done
echo "$pkg $ver" >"$READY"
rm -rf "$work"
trap - EXIT
ready "$pkg $ver"
