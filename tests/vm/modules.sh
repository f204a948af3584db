# Sourced by tests/vm/setup.sh and tests/vm/systemd/mkimage.sh: add_module MODS OUT NAME
# copies kernel module NAME from the unpacked package's MODS (lib/modules/<version>)
# into OUT, uncompressed, after what it depends on (the `depends=` of its .modinfo: the
# package has no modules.dep, depmod makes it at install), and lists it in OUT/order, so
# the initramfs loads them in that order. A module built into the kernel is skipped.
add_module() {
  local mods=$1 out=$2 name=$3 f dep
  grep -qx "$name.ko" "$out/order" && return 0
  f=$(find "$mods" -name "$name.ko*" | head -n1)
  [ -n "$f" ] || f=$(find "$mods" -name "${name//_/-}.ko*" | head -n1)
  [ -n "$f" ] || return 0
  case "$f" in
    *.xz) xz -dc "$f" >"$out/$name.ko" ;;
    *.zst) zstd -qdc "$f" >"$out/$name.ko" ;;
    *) cp "$f" "$out/$name.ko" ;;
  esac
  for dep in $(tr '\0' '\n' <"$out/$name.ko" | sed -n 's/^depends=//p' | tr ',' ' '); do
    add_module "$mods" "$out" "$dep"
  done
  echo "$name.ko" >>"$out/order"
}
