#!/bin/sh
# The VM's test (after tests/vm/init): a cgroup v2 host with every controller enabled at the
# root and swap on zram, ferrolet on the process runtime, the manifests under /vm/manifests
# started in phases, and what the kernel shows afterwards printed as `FLVM ...` lines on the
# serial console for tests/vm_cgroup2.rs to check. Every wait is bounded (125 s in all, inside
# the test's 150 s for the whole boot); the VM always powers off.
set +e
say() { echo "FLVM $*"; }
API=http://127.0.0.1:10255
CG=/sys/fs/cgroup

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mkdir -p /tmp /var /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var
mount -t tmpfs tmpfs /run
mount -t cgroup2 cgroup2 "$CG" || say "error=mounting cgroup2 failed"
for m in $(cat /vm/modules/order 2>/dev/null); do
  insmod "/vm/modules/$m" 2>/dev/null || say "warning=insmod $m failed"
done
say "kernel=$(uname -r)"
say "controllers=$(cat $CG/cgroup.controllers)"
for c in $(cat $CG/cgroup.controllers); do
  echo "+$c" >"$CG/cgroup.subtree_control" || say "warning=cannot enable $c at the root"
done

# Swap, as a Raspberry Pi OS node has by default.
if [ -e /sys/block/zram0 ]; then
  echo 128M >/sys/block/zram0/disksize && mkswap /dev/zram0 >/dev/null && swapon /dev/zram0 \
    || say "warning=zram swap failed"
fi
say "swap_kb=$(sed -n 's/^SwapTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)"
say "cpus=$(grep -c ^processor /proc/cpuinfo)"
say "mem_total_kb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)"
say "pid_max=$(cat /proc/sys/kernel/pid_max)"

mkdir -p /var/lib/ferrolet /var/manifests /var/log /etc/ferrolet
cat >/etc/ferrolet/ferrolet.toml <<CONF
node_name = "vm"
node_ip = "127.0.0.1"
runtime = "process"
state_dir = "/var/lib/ferrolet"
manifest_dir = "/var/manifests"
manifest_check_interval = "200ms"
sync_frequency = "200ms"
[api]
listen = "127.0.0.1:10255"
[server]
listen = "127.0.0.1:0"
[devices]
plugin_dir = ""
[eviction]
hard = { "memory.available" = "20Mi" }
[cgroups]
root = "/"
CONF
RUST_LOG=debug /vm/ferrolet run --config /etc/ferrolet/ferrolet.toml >/var/log/ferrolet.log 2>&1 &
agent=$!

get() { wget -qO- "$API$1" 2>/dev/null; }
# wait_until SECONDS COMMAND...: runs COMMAND every 200 ms until it succeeds; 1 on timeout.
wait_until() {
  local n=$(($1 * 5))
  shift
  while [ $n -gt 0 ]; do
    "$@" && return 0
    sleep 0.2
    n=$((n - 1))
  done
  return 1
}
start() { # start FILE: a manifest from /vm/manifests, written whole (copy, then rename)
  cp "/vm/manifests/$1" "/var/manifests/.$1" && mv "/var/manifests/.$1" "/var/manifests/$1"
}
running() { [ "$(get /pods | grep -o '"phase": *"Running"' | wc -l)" -ge "$1" ]; }
pods() { say "pods $1 $(get /pods | tr -d '\n')"; }
# dump_one TAG DIR: one cgroup's control files and processes.
dump_one() {
  p=${2#$CG}
  say "dir $1 $p"
  for f in cgroup.controllers cgroup.subtree_control cpu.weight cpu.max memory.max memory.swap.max memory.oom.group pids.max; do
    [ -f "$2/$f" ] && say "file $1 $p $f $(tr '\n' ' ' <"$2/$f")"
  done
  for pid in $(cat "$2/cgroup.procs"); do
    say "score $1 $p $pid $(cat "/proc/$pid/oom_score_adj" 2>/dev/null)"
    say "proc $1 $p $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
  done
}
# dump TAG: the root's delegation, then every cgroup under kubepods.
dump() {
  say "file $1 / cgroup.subtree_control $(cat $CG/cgroup.subtree_control)"
  find $CG/kubepods -type d 2>/dev/null | while read -r d; do dump_one "$1" "$d"; done
}
# The host pids of the processes in the cgroup where `sleep 1000` runs (the OOM pod's container).
oom_pids() {
  for f in $(find $CG/kubepods -name cgroup.procs); do
    for pid in $(cat "$f"); do
      if [ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" = "sleep 1000 " ]; then
        OOM_CG=${f%/cgroup.procs}
        OOM_PIDS=$(cat "$f" | tr '\n' ' ')
        return 0
      fi
    done
  done
  return 1
}
alive() { # alive PID: a process that is not a zombie
  [ -r "/proc/$1/stat" ] && ! sed 's/.*) //' "/proc/$1/stat" | grep -q '^Z'
}
none_alive() { for pid in $OOM_PIDS; do alive "$pid" && return 1; done; return 0; }
oom_reported() { get /pods | tr -d '\n ' | grep -q '"reason":"OOMKilled"'; }
pod_dirs() { find $CG/kubepods -maxdepth 2 -type d -name 'pod*' | wc -l; }

ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
if wait_until 20 get /healthz >/dev/null; then
  say "agent=up"
  # 1. A Guaranteed, a Burstable and a BestEffort pod.
  start guaranteed.yaml; start burstable.yaml; start besteffort.yaml
  wait_until 30 running 3 || say "error=the three pods did not all run within 30 s"
  sleep 1
  pods running
  dump running
  # 2. An OOM in a container with two processes.
  start oom.yaml
  if wait_until 20 oom_pids; then
    say "oom cgroup=${OOM_CG#$CG} pids=$OOM_PIDS"
    dump_one oom "$OOM_CG"
    wait_until 20 none_alive || say "oom error=processes of the container still alive 20 s after it started"
    wait_until 10 oom_reported || say "oom error=no OOMKilled on /pods within 10 s"
    for pid in $OOM_PIDS; do
      if alive "$pid"; then say "oom alive $pid $(tr '\0' ' ' <"/proc/$pid/cmdline")"; fi
    done
    say "oom memory.events $(tr '\n' ' ' <"$OOM_CG/memory.events" 2>/dev/null)"
  else
    say "oom error=no container with sleep 1000 within 20 s"
  fi
  pods oom
  # 3. Removal.
  before=$(pod_dirs)
  rm -f /var/manifests/burstable.yaml
  fewer() { [ "$(pod_dirs)" -lt "$before" ]; }
  wait_until 15 fewer || say "error=no pod cgroup removed within 15 s of deleting a manifest"
  pods removed
  dump removed
else
  say "error=the agent's /healthz did not answer within 20 s"
fi
kill "$agent" 2>/dev/null
agent_gone() { ! alive "$agent"; }
wait_until 10 agent_gone
tail -n 300 /var/log/ferrolet.log | sed 's/^/agent: /'
say "done"
poweroff -f
