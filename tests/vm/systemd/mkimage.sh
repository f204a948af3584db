#!/bin/bash
# Builds a Debian 12 root filesystem with systemd as PID 1 for a VM (tests/vm/systemd/README.md),
# offline from the host's apt mirror, cached under $FERROLET_VM_DIR/systemd
# (default /var/tmp/ferrolet-vm/systemd):
#   rootfs.ext4   mmdebstrap --variant=essential + $PACKAGES (sparse raw ext4): systemd and
#                 its bus, and containerd with runc and catatonit (the CRI case's pause)
#   modules/      virtio_pci, virtio_blk, ext4 and their dependencies, from the same kernel
#                 package as $FERROLET_VM_DIR/vmlinuz (tests/vm/setup.sh), in load order
# Nothing goes into /boot and no kernel is installed on the host. Idempotent: an existing
# image with the same package list (.packages) is kept (FORCE=1 rebuilds). Needs root (mmdebstrap's root mode, mkfs.ext4 -d).
set -euo pipefail
VMDIR=${FERROLET_VM_DIR:-/var/tmp/ferrolet-vm}
DIR=$VMDIR/systemd
PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,catatonit
SUITE=${SUITE:-bookworm}
HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "sysvm: $*" >&2; }

[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
missing=()
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v cpio >/dev/null || missing+=(cpio)
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -s "$VMDIR/vmlinuz" ] && [ -f "$VMDIR/.ferrolet-ready" ] || "$HERE/../setup.sh" >&2
[ -s "$VMDIR/vmlinuz" ] || { log "no kernel in $VMDIR (tests/vm/setup.sh failed)"; exit 1; }
mkdir -p "$DIR"

# 1. The root disk's modules, from the package whose vmlinuz setup.sh unpacked.
pkg=$(cut -d' ' -f1 "$VMDIR/.ferrolet-ready")
kver=${pkg#linux-image-}
if [ "$(cat "$DIR/modules/.kernel" 2>/dev/null)" != "$pkg" ]; then
  work=$(mktemp -d "$DIR/.k.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  log "downloading $pkg for its modules"
  (cd "$work" && apt-get download "$pkg" 2>/dev/null >/dev/null)
  dpkg-deb -x "$work"/*.deb "$work/root"
  rm -rf "$DIR/modules"; mkdir -p "$DIR/modules"; : >"$DIR/modules/order"
  mods="$work/root/lib/modules/$kver"
  . "$HERE/../modules.sh"
  # crc32c_generic: ext4 asks the crypto API for crc32c at mount (no modprobe in the initramfs;
  # TCG's CPU has no SSE4.2 for crc32c_intel).
  for m in virtio_pci virtio_blk crc32c_generic ext4; do add_module "$mods" "$DIR/modules" "$m"; done
  echo "$pkg" >"$DIR/modules/.kernel"
  rm -rf "$work"; trap - EXIT
fi

# 2. The root filesystem.
if [ -s "$DIR/rootfs.ext4" ] && [ "$(cat "$DIR/.packages" 2>/dev/null)" = "$PACKAGES" ] && [ "${FORCE:-0}" != 1 ]; then
  log "image ready: $DIR/rootfs.ext4"
  exit 0
fi
# The mirror apt uses here (the first deb URI of the host's sources), and apt's own options.
uris=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' 2>/dev/null | sort -u)
mirror=$(echo "$uris" | grep -v -- -security | head -n1)
mirror=${mirror:-http://deb.debian.org/debian/}
security=$(echo "$uris" | grep -- -security | head -n1)
security=${security:-${mirror%/debian/}/debian-security/}
sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main" "deb $security $SUITE-security main")
aptopts=()
proxy=$(apt-config shell P Acquire::http::Proxy | sed -n "s/^P='\(.*\)'$/\1/p")
[ -z "$proxy" ] || aptopts+=(--aptopt "Acquire::http::Proxy \"$proxy\"")
rm -rf "$DIR/.root"
start=$(date +%s)
log "mmdebstrap $SUITE from $mirror and $security"
mmdebstrap --variant=essential --mode=root \
  --include="$PACKAGES" \
  --aptopt='Acquire::Check-Valid-Until "false"' "${aptopts[@]}" \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='echo ferrolet-vm >"$1/etc/hostname"' \
  --customize-hook='chroot "$1" passwd -d root' \
  --customize-hook='rm -f "$1"/var/cache/apt/*.bin "$1"/var/lib/apt/lists/*_Packages' \
  "$SUITE" "$DIR/.root" "${sources[@]}" >"$DIR/mmdebstrap.log" 2>&1 || { log "mmdebstrap failed: $DIR/mmdebstrap.log"; tail -n 20 "$DIR/mmdebstrap.log" >&2; exit 1; }
used=$(du -sm "$DIR/.root" | cut -f1)
rm -f "$DIR/rootfs.ext4.new"
# Room for a test's files; the image is sparse and the VM boots it with -snapshot.
truncate -s "$((used + 256))M" "$DIR/rootfs.ext4.new"
mkfs.ext4 -q -L ferrolet-root -d "$DIR/.root" "$DIR/rootfs.ext4.new"
mv "$DIR/rootfs.ext4.new" "$DIR/rootfs.ext4"
echo "$PACKAGES" >"$DIR/.packages"
rm -rf "$DIR/.root"
log "image built in $(($(date +%s) - start)) s: tree ${used} MB, $(du -m "$DIR/rootfs.ext4" | cut -f1) MB on disk ($(du -m --apparent-size "$DIR/rootfs.ext4" | cut -f1) MB apparent)"
