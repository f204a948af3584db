#!/bin/bash
# Tears down what up.sh brought up, and nothing else: every process is found through our pid
# file or our socket and checked before it is signalled; never by name alone.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ -d "$BASE" ] || exit 0

# 1. Containers first, while our containerd can still stop them (in every namespace).
if our_containerd >/dev/null && [ -S "$SOCK" ]; then
  for ns in $(ctr_ namespaces ls -q 2>/dev/null); do
    for t in $(ctr_ -n "$ns" tasks ls -q 2>/dev/null); do ctr_ -n "$ns" tasks kill -a -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    for t in $(ctr_ -n "$ns" tasks ls -q 2>/dev/null); do ctr_ -n "$ns" tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for c in $(ctr_ -n "$ns" containers ls -q 2>/dev/null); do ctr_ -n "$ns" containers delete "$c" >/dev/null 2>&1 || true; done
  done
fi

# 2. containerd: TERM, then KILL after 5 s.
if pid=$(our_containerd); then
  kill -TERM "$pid"
  for _ in $(seq 50); do our_containerd >/dev/null || break; sleep 0.1; done
  if our_containerd >/dev/null; then kill -KILL "$pid"; sleep 0.1; fi
  echo "cri: stopped containerd (pid $pid)"
fi

# 3. Containers left without a containerd (it crashed, or was killed): runc's state names them.
# CRI's runc root is $BASE/state/runc; `ctr run` uses runc's default /run/containerd/runc, which
# in our namespace is our private /run. runc checks each one's start time before it signals it.
if [ "$(findmnt -n -o FSTYPE "$NSDIR/mnt" 2>/dev/null)" = nsfs ]; then
  nsenter --mount="$NSDIR/mnt" /bin/sh -c '
    for root in "$1"/state/runc/*/ /run/containerd/runc/*/; do
      [ -d "$root" ] || continue
      for id in $(runc --root "$root" list -q 2>/dev/null); do
        runc --root "$root" kill -a "$id" KILL 2>/dev/null
        runc --root "$root" delete -f "$id" 2>/dev/null && echo "cri: removed leftover container $id"
      done
    done' sh "$BASE"
fi

# 4. Shims outlive containerd by design; kill those bound to our socket.
for pid in $(our_shims); do kill -KILL "$pid" 2>/dev/null && echo "cri: killed leftover shim $pid"; done

# 5. The mount namespace goes with its last process and its bind mount.
if [ "$(findmnt -n -o FSTYPE "$NSDIR/mnt" 2>/dev/null)" = nsfs ]; then umount "$NSDIR/mnt"; fi
if mountpoint -q "$NSDIR"; then umount "$NSDIR"; fi
# The agents' shared state mount, with whatever a killed agent left mounted in it.
if mountpoint -q "$NODES"; then umount -R "$NODES"; fi

# 5b. The pod network: our bridge, the host's /var/lib/cni if up.sh made it (it stayed empty:
# libcni's cache was bind-mounted in the namespace), and ip_forward as it was before.
if ip -o link show dev "$BRIDGE" type bridge >/dev/null 2>&1; then
  ip link del "$BRIDGE" && echo "cri: removed bridge $BRIDGE"
fi
if [ -e "$CNI_CACHE_MARKER" ]; then rmdir /var/lib/cni 2>/dev/null || true; fi
if [ -r "$BASE/ip_forward.before" ]; then
  before=$(cat "$BASE/ip_forward.before")
  [ "$(cat /proc/sys/net/ipv4/ip_forward)" = "$before" ] || echo "$before" > /proc/sys/net/ipv4/ip_forward
fi

# 6. The (empty) pod cgroups runc left under the test cgroup parent, deepest first. Tasks killed
# just now may take a moment to leave their cgroup, so try for up to 2 s.
left=0
case "$CGROUP_PARENT" in
  /?*)
    for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
      d=$h${CGROUP_PARENT#/}
      [ -e "$d/cgroup.procs" ] || continue
      for _ in $(seq 20); do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null && break; sleep 0.1; done
      if [ -d "$d" ]; then echo "cri: could not remove cgroup $d (still in use)" >&2; left=1; fi
    done;;
esac

# 7. $BASE, unless something is still mounted under it.
if findmnt -rn -o TARGET | grep -q "^$BASE/"; then
  echo "cri: not removing $BASE: still mounted: $(findmnt -rn -o TARGET | grep "^$BASE/" | tr '\n' ' ')" >&2
  exit 1
fi
rm -rf --one-file-system "$BASE"
echo "cri: removed $BASE"
exit $left
