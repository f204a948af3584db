#!/bin/bash
# Boots the systemd VM (tests/vm/systemd/README.md): $FERROLET_VM_DIR/vmlinuz, an initramfs
# (static busybox, the root disk's modules, tests/vm/systemd/init and the check), the image
# from mkimage.sh as virtio-blk with -snapshot, serial console on stdout (also saved in
# $DIR/console.log). TCG unless KVM=1. Bounded by TIMEOUT (default 300 s; qemu is killed).
# Exits 0 when the check printed `SYSVM done` and the slice's memory.max is 104857600.
set -euo pipefail
VMDIR=${FERROLET_VM_DIR:-/var/tmp/ferrolet-vm}
DIR=$VMDIR/systemd
HERE=$(cd "$(dirname "$0")" && pwd)
TIMEOUT=${TIMEOUT:-300}
[ -s "$DIR/rootfs.ext4" ] || "$HERE/mkimage.sh"
ird=$(mktemp -d /tmp/sysvm-initrd.XXXXXX)
trap 'rm -rf "$ird"' EXIT
mkdir -p "$ird"/{bin,proc,sys,dev,modules,check}
cp /bin/busybox "$ird/bin/"
cp "$HERE/init" "$ird/init"
cp "$DIR"/modules/*.ko "$DIR/modules/order" "$ird/modules/"
cp "$HERE"/ferrolet-check.service "$HERE"/ferrolet-check.sh "$ird/check/"
(cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) >"$DIR/initrd.gz"
accel=(-accel tcg -cpu max)
[ "${KVM:-0}" = 1 ] && accel=(-accel kvm -cpu host)
start=$(date +%s.%N)
set +e
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${accel[@]}" -m "${MEM:-1G}" -smp "${SMP:-2}" \
  -nographic -no-reboot -serial mon:stdio -display none -monitor none \
  -kernel "$VMDIR/vmlinuz" -initrd "$DIR/initrd.gz" \
  -drive "file=$DIR/rootfs.ext4,format=raw,if=virtio,snapshot=on" \
  -nic none \
  -append "console=ttyS0 panic=-1 quiet systemd.getty_auto=0 ${APPEND:-}" \
  </dev/null | tee "$DIR/console.log"
rc=${PIPESTATUS[0]}
set -e
secs=$(echo "$(date +%s.%N) - $start" | bc)
echo "sysvm: qemu exited $rc after ${secs} s (wall clock, TCG unless KVM=1)"
grep -q '^SYSVM done' "$DIR/console.log" && grep -q '^SYSVM slice memory.max=104857600 ' "$DIR/console.log"
