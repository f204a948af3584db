#!/bin/bash
# Brings up a private containerd for the CRI integration tests, offline, and writes
# $BASE/env (FERROLET_CRI_ENDPOINT=unix://$BASE/containerd.sock, ...) once it answers.
# Idempotent: a second run finds the running containerd and only re-checks the images.
# When the tests cannot have it (FERROLET_SKIP_CRI=1, not root, apt fails) it prints one
# line saying why the CRI tests will skip, writes no env file, and exits 0.
# Any other failure (containerd does not come up, an import fails) exits 1.
#
# Nothing here touches a containerd the machine already runs: every path is under $BASE,
# and containerd runs in a private mount namespace with its own /run, because containerd
# 1.6 puts shim sockets in /run/containerd/s whatever its config says. That namespace is
# kept (bound to $BASE/ns/mnt) so a restarted containerd finds the shims of running pods.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
T0=$SECONDS
skip() { rm -f "$BASE/env"; echo "cri: CRI tests will be skipped: $*"; exit 0; }

[ "${FERROLET_SKIP_CRI:-0}" = 1 ] && skip "FERROLET_SKIP_CRI=1"
[ "$(id -u)" = 0 ] || skip "not root (containerd needs root; run make test as root)"

# 1. Debian packages.
PKGS="containerd runc containernetworking-plugins busybox-static catatonit"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "cri: installing$missing"
  apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -qq "$@"; }
  if ! { apt_get update && apt_get install -y --no-install-recommends $missing; } >"/tmp/ferrolet-cri-apt.log" 2>&1; then
    skip "apt-get could not install$missing (see /tmp/ferrolet-cri-apt.log)"
  fi
  # On a systemd machine Debian's package also starts the system containerd (/run/containerd):
  # it is not ours; it is left alone, and nothing below talks to it.
fi
# The registry tests' server (Debian's docker-registry, its system service not started) and
# htpasswd; without them only those tests skip (it says why).
"$HERE/../registry/install.sh"

mkdir -p "$BASE"/{root,state,opt,images,cni/net.d,cni/ipam,cni/cache,logs,certs.d} "$NSDIR"
rm -f "$BASE/env"

# 2. Snapshotter: overlayfs, unless $BASE is itself on overlayfs (CI in a container).
SNAPSHOTTER=${FERROLET_CRI_SNAPSHOTTER:-}
if [ -z "$SNAPSHOTTER" ]; then
  SNAPSHOTTER=overlayfs
  [ "$(findmnt -n -o FSTYPE --target "$BASE")" = overlay ] && SNAPSHOTTER=native
fi

# 3. Config. Each setting answers a pitfall of these machines (tests/cri/README.md explains them).
cat > "$CONFIG.new" <<TOML
version = 2
root = "$BASE/root"
state = "$BASE/state"
oom_score = 0
required_plugins = ["io.containerd.grpc.v1.cri"]
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$BASE/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:catatonit"
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true                     # the kernel has no AppArmor
  disable_hugetlb_controller = true           # hugetlb is not mounted
  tolerate_missing_hugetlb_controller = true
  restrict_oom_score_adj = true               # no CAP_SYS_RESOURCE: negative scores make runc fail
  stats_collect_period = 2                    # ImageFsInfo refreshes every 2 s, not 10

  # Per-registry settings (hosts.toml), read at each pull: the registry tests write the CA of
  # theirs here (tests/common/registry.rs). Empty, every registry is as without it.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$BASE/certs.d"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$BASE/cni/net.d"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$SNAPSHOTTER"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false                 # cgroupfs driver
        Root = "$BASE/state/runc"             # not /run/containerd/runc
TOML
mv "$CONFIG.new" "$CONFIG"

# The pod network: the shipped etc/cni/10-ferrolet-bridge.conflist (Debian's bridge and
# host-local plugins), on a bridge and subnet of our own, IP allocations under $BASE, and
# without what would add iptables rules to the host (ipMasq, portmap). The host reaches
# pods through the bridge (the gateway). The bridge plugin turns on net.ipv4.ip_forward for
# a gateway: its value before is kept, and down.sh puts it back.
python3 - "$HERE/../../etc/cni/10-ferrolet-bridge.conflist" "$BRIDGE" "$SUBNET" "$BASE/cni/ipam" \
  > "$BASE/cni/net.d/10-ferrolet-test.conflist" <<'PY'
import json, sys
shipped, bridge, subnet, data_dir = sys.argv[1:]
conf = json.load(open(shipped))
conf["name"] = "ferrolet-test"
conf["plugins"] = [p for p in conf["plugins"] if p["type"] != "portmap"]
b = conf["plugins"][0]
b.update(bridge=bridge, ipMasq=False)
b["ipam"].update(ranges=[[{"subnet": subnet}]], dataDir=data_dir)
json.dump(conf, sys.stdout, indent=2)
PY
[ -e "$BASE/ip_forward.before" ] || cat /proc/sys/net/ipv4/ip_forward > "$BASE/ip_forward.before"

# 4. The private mount namespace, made once and kept. A namespace can only be bound onto a
# mount that is not shared, so $NSDIR becomes a private bind mount of itself first.
# The tests' agents keep their state in $NODES, a shared mount that the namespace holds as a
# slave: what an agent mounts there (a memory-backed emptyDir's tmpfs) reaches containerd, as
# on a node where both share one mount namespace; nothing goes back.
# libcni caches results in /var/lib/cni whatever the config says: in the namespace that is a
# bind mount of $BASE/cni/cache, so the host's stays empty (made here if missing, removed by
# down.sh).
if [ "$(findmnt -n -o FSTYPE "$NSDIR/mnt" 2>/dev/null)" != nsfs ]; then
  mountpoint -q "$NSDIR" || mount --bind "$NSDIR" "$NSDIR"
  mount --make-private "$NSDIR"
  touch "$NSDIR/mnt"
  if [ ! -e /var/lib/cni ]; then mkdir /var/lib/cni && touch "$CNI_CACHE_MARKER"; fi
  mkdir -p "$NODES"
  mountpoint -q "$NODES" || mount --bind "$NODES" "$NODES"
  mount --make-shared "$NODES"
  unshare --mount="$NSDIR/mnt" --propagation slave /bin/sh -c \
    'mount -t tmpfs -o mode=0755,size=64m ferrolet-cri-run /run && mount --bind "$1" /var/lib/cni' sh "$BASE/cni/cache"
fi

# 5. containerd, unless ours already runs. The shell writes its own pid, then execs containerd.
if pid=$(our_containerd); then
  echo "cri: containerd already running (pid $pid)"
else
  rm -f "$PIDFILE" "$SOCK"
  alive() { local st; st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]; }
  setsid nsenter --mount="$NSDIR/mnt" -- /bin/sh -c 'echo $$ > "$1"; exec containerd --config "$2"' \
    sh "$PIDFILE" "$CONFIG" </dev/null >>"$BASE/logs/containerd.log" 2>&1 &
  started=$!   # setsid, nsenter and sh all exec: this pid becomes containerd's
  deadline=$((SECONDS + ${FERROLET_CRI_TIMEOUT:-30}))
  until [ -S "$SOCK" ] && ctr_ version >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ] || ! alive "$started"; then
      echo "cri: containerd did not come up on $SOCK; the end of $BASE/logs/containerd.log:" >&2
      tail -20 "$BASE/logs/containerd.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "cri: containerd $(ctr_ version | awk '/Version:/ {print $2; exit}') up (pid $(cat "$PIDFILE")) on $SOCK"
fi

# 6. Images, built offline from Debian's binaries, imported once into the CRI namespace.
declare -A IMAGES=(
  [localhost/pause:catatonit]="--format oci --file /usr/bin/catatonit:/usr/bin/catatonit --entrypoint /usr/bin/catatonit,-P"
  [localhost/busybox:latest]="--format docker --busybox /bin/busybox --cmd /bin/sh"
)
have=$(ctr_ -n k8s.io images ls -q)
for name in "${!IMAGES[@]}"; do
  grep -qxF "$name" <<<"$have" && continue
  tar=$BASE/images/$(tr -c 'a-z0-9\n' '_' <<<"${name#localhost/}").tar
  # shellcheck disable=SC2086 # the option string is split on purpose
  python3 "$HERE/mkimage.py" --name "$name" --arch "$(dpkg --print-architecture)" --out "$tar" ${IMAGES[$name]}
  ctr_ -n k8s.io images import --snapshotter "$SNAPSHOTTER" "$tar" >/dev/null
  echo "cri: imported $name"
done

cat > "$BASE/env.new" <<ENV
FERROLET_CRI_ENDPOINT=unix://$SOCK
FERROLET_CRI_PAUSE_IMAGE=localhost/pause:catatonit
FERROLET_CRI_BUSYBOX_IMAGE=localhost/busybox:latest
FERROLET_CRI_CGROUP=$CGROUP_PARENT
FERROLET_CRI_MOUNT_NS=$NSDIR/mnt
FERROLET_CRI_NODES=$NODES
FERROLET_CRI_SNAPSHOTTER=$SNAPSHOTTER
FERROLET_CRI_SUBNET=$SUBNET
FERROLET_CRI_CERTS_D=$BASE/certs.d
ENV
mv "$BASE/env.new" "$BASE/env"
echo "cri: ready in $((SECONDS - T0)) s: FERROLET_CRI_ENDPOINT=unix://$SOCK (tests/cri/down.sh stops it)"
