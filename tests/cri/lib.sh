# Shared by up.sh and down.sh (sourced, not run).
#   FERROLET_CRI_BASE   where everything lives (default /tmp/ferrolet-cri-test)
#   FERROLET_CRI_CGROUP cgroup parent the CRI tests put their pods under (default /ferrolet-cri-test)
BASE=${FERROLET_CRI_BASE:-/tmp/ferrolet-cri-test}
case "$BASE" in /?*) ;; *) echo "cri: FERROLET_CRI_BASE must be an absolute path, not '$BASE'" >&2; exit 1;; esac
BASE=${BASE%/}
SOCK=$BASE/containerd.sock
CONFIG=$BASE/config.toml
PIDFILE=$BASE/containerd.pid
NSDIR=$BASE/ns                 # holds the bind mount that keeps the private mount namespace alive
NODES=$BASE/nodes              # the tests' agents' state directories: a shared mount (see up.sh)
CGROUP_PARENT=${FERROLET_CRI_CGROUP:-/ferrolet-cri-test}
# The pod network of this harness: a bridge and a /24 derived from $BASE, so two harnesses
# (CI's and a developer's) never share one; override with FERROLET_CRI_BRIDGE/_SUBNET.
_h=$(printf '%s' "$BASE" | md5sum)
BRIDGE=${FERROLET_CRI_BRIDGE:-flcri-${_h:0:6}}
SUBNET=${FERROLET_CRI_SUBNET:-10.222.$((16#${_h:6:2})).0/24}
CNI_CACHE_MARKER=$BASE/cni/created-var-lib-cni   # up.sh made the host's (empty) /var/lib/cni

# Prints the pid of the containerd this harness started, if it still runs: the pid from our
# pid file, and that process really is /usr/bin/containerd with our config (a pid can be reused).
our_containerd() {
  local pid want have
  [ -r "$PIDFILE" ] || return 1
  pid=$(cat "$PIDFILE")
  case "$pid" in '' | *[!0-9]*) return 1;; esac
  want=$(printf 'containerd\n--config\n%s' "$CONFIG")
  have=$(tr '\0' '\n' 2>/dev/null < "/proc/$pid/cmdline") || return 1
  [ "$have" = "$want" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = /usr/bin/containerd ] || return 1
  echo "$pid"
}

# Prints the pids of containerd shims that talk to our socket (shims outlive containerd).
our_shims() {
  local d argv i
  for d in /proc/[0-9]*; do
    mapfile -d '' -t argv 2>/dev/null < "$d/cmdline" || continue
    [ "${#argv[@]}" -gt 2 ] || continue
    case "${argv[0]##*/}" in containerd-shim*) ;; *) continue;; esac
    for ((i = 1; i + 1 < ${#argv[@]}; i++)); do
      if [ "${argv[i]}" = -address ] && [ "${argv[i+1]}" = "$SOCK" ]; then echo "${d#/proc/}"; break; fi
    done
  done
}

ctr_() { ctr --address "$SOCK" "$@"; }
