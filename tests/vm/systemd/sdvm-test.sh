#!/bin/sh
# The systemd VM's test (sdvm-test.service; tests/vm_systemd.rs checks what it prints).
# On the CRI case (/etc/ferrolet/cri exists) it first imports the images into the VM's
# containerd (SystemdCgroup = true, from /etc/containerd/config.toml). Then it starts
# ferrolet.service (the shipped unit, etc/systemd/ferrolet.service) with the static pods of
# /etc/ferrolet/manifests; once they run, it prints as `SDVM ...` lines what systemd and the
# kernel show (at tag `running`), again after `systemctl daemon-reload` (`reloaded`: systemd
# writes its units' values back), after the burstable manifest is removed (`removed`), and
# after `systemctl stop ferrolet` (`stopped`: the shipped unit's KillMode=process leaves the
# pods running), then the agent's journal, and powers off. Every wait is bounded (about
# 150 s in all, inside the Rust side's limit); the VM always powers off.
#
# Lines (TAG: running | reloaded | removed | stopped):
#   SDVM key=value
#   SDVM pods TAG JSON                      ferrolet get pods -o json, on one line
#   SDVM status TAG | LINE                  systemctl status kubepods.slice, line by line
#   SDVM unit TAG UNIT LOAD ACTIVE SUB ...  systemctl list-units --all 'kubepods*'
#   SDVM prop TAG UNIT KEY=VALUE            systemctl show of each of those units
#   SDVM dir TAG PATH                       each cgroup whose path has `kubepods` (v1: with
#                                           its hierarchy's directory first, /memory/...)
#   SDVM file TAG PATH NAME VALUE           its control files
#   SDVM proc TAG PID CGROUP CMDLINE        each workload (`sleep 300N`) and its cgroup
#                                           (the unified hierarchy's, where systemd tracks it)
#   SDVM failed TAG UNIT ...                systemctl --failed
set +e
say() { echo "SDVM $*"; }
CG=/sys/fs/cgroup
CONF=/etc/ferrolet/ferrolet.toml
MANIFESTS=/etc/ferrolet/manifests
uptime() { cut -d' ' -f1 /proc/uptime; }

say "up uptime=$(uptime)"
say "pid1=$(cat /proc/1/comm) kernel=$(uname -r) cgroupfs=$(stat -fc %T $CG)"
say "systemd=$(systemctl --version | head -n1 | tr ' ' '_')"
say "cpus=$(grep -c ^processor /proc/cpuinfo)"
say "mem_total_kb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)"
say "pid_max=$(cat /proc/sys/kernel/pid_max)"
say "is-system-running=$(timeout 60 systemctl is-system-running --wait) uptime=$(uptime)"
if [ -e /etc/ferrolet/cri ]; then
  say "containerd=$(systemctl is-active containerd.service) $(containerd --version | cut -d' ' -f3)"
  for t in /var/lib/sdvm-images/*.tar; do
    ctr -n k8s.io images import "$t" >/dev/null 2>&1 || say "error=ctr could not import $t"
  done
  say "images=$(ctr -n k8s.io images ls -q | grep -c '^localhost/')"
fi
systemctl start ferrolet.service
say "ferrolet-active=$(systemctl is-active ferrolet.service) uptime=$(uptime)"

# wait_until SECONDS COMMAND...: runs COMMAND every 200 ms until it succeeds; 1 on timeout.
wait_until() {
  n=$(($1 * 5))
  shift
  while [ $n -gt 0 ]; do
    "$@" && return 0
    sleep 0.2
    n=$((n - 1))
  done
  return 1
}
pods_json() { /usr/local/bin/ferrolet get pods -o json --config $CONF 2>/dev/null | tr -d '\n'; }
running() { [ "$(pods_json | grep -o '"phase": *"Running"' | wc -l)" -ge "$1" ]; }
units() { systemctl list-units --all --no-legend --plain 'kubepods*' 2>&1; }
# dump TAG: the pods (while the agent runs), the units, their properties, the cgroups and the workloads.
dump() {
  [ "$1" = stopped ] || say "pods $1 $(pods_json)"
  systemctl status kubepods.slice --no-pager -l 2>&1 | sed "s/^/SDVM status $1 | /"
  units | while read -r u rest; do
    [ -n "$u" ] || continue
    say "unit $1 $u $rest"
    systemctl show -p ControlGroup -p ActiveState -p CPUWeight -p MemoryMax -p TasksMax \
      -p CPUQuotaPerSecUSec -p CPUShares -p MemoryLimit "$u" | while read -r kv; do say "prop $1 $u $kv"; done
  done
  find $CG -type d -path '*kubepods*' 2>/dev/null | while read -r d; do
    p=${d#$CG}
    say "dir $1 $p"
    for f in cpu.weight cpu.max memory.max pids.max cgroup.subtree_control cgroup.controllers \
      cpu.shares cpu.cfs_quota_us memory.limit_in_bytes; do
      [ -f "$d/$f" ] && say "file $1 $p $f $(tr '\n' ' ' <"$d/$f")"
    done
  done
  # One grep for the sleeps (a fork per process is slow under TCG).
  for c in $(grep -lx sleep /proc/[0-9]*/comm 2>/dev/null); do
    p=${c%/comm}
    cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)
    case "$cmd" in
      "sleep 300"[0-9]" ") say "proc $1 ${p#/proc/} $(sed -n 's/^0:://p' "$p/cgroup") $cmd" ;;
    esac
  done
  systemctl --failed --no-legend --plain 2>&1 | while read -r l; do [ -n "$l" ] && say "failed $1 $l"; done
}

# (A failed ferrolet.service ends the wait: no pods will come.)
running_or_failed() { running 3 || systemctl -q is-failed ferrolet.service; }
if wait_until 60 running_or_failed && running 3; then
  say "pods=running uptime=$(uptime)"
else
  say "error=the three pods did not all run within 60 s of the boot's end (ferrolet.service: $(systemctl is-active ferrolet.service))"
fi
sleep 1
dump running

# A daemon-reload makes systemd apply its units' settings again: the limits must survive.
systemctl daemon-reload
sleep 1
dump reloaded

# Removal: the burstable pod goes from the agent, then its cgroup (either driver's name).
# A Burstable pod's cgroup: /kubepods/burstable/pod<uid> (cgroupfs driver) or
# /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice (systemd).
burstable_pods() { find $CG -mindepth 3 -maxdepth 4 -type d -path '*burstable*' \( -name 'pod*' -o -name '*-pod*' \) 2>/dev/null; }
rm -f $MANIFESTS/burstable.yaml
burstable_gone() { ! pods_json | grep -q '"name": *"burstable-'; }
no_burstable_dirs() { [ -z "$(burstable_pods)" ]; }
wait_until 30 burstable_gone || say "error=the burstable pod still on ferrolet get pods 30 s after its manifest went"
wait_until 15 no_burstable_dirs || say "warning=a burstable pod cgroup still there 15 s after the pod went"
say "removed uptime=$(uptime)"
dump removed

# The agent stopped as systemd stops it.
systemctl stop ferrolet.service
say "stop-rc=$? $(systemctl show -p ActiveState -p SubState -p Result ferrolet.service | tr '\n' ' ')"
sleep 1
dump stopped

journalctl -u ferrolet.service --no-pager -o cat 2>&1 | tail -n 300 | sed 's/^/agent: /'
say "done uptime=$(uptime)"
# Without stopping units: the pods left running would each take systemd's 90 s stop timeout
# (a container's PID 1 ignores SIGTERM); the disk is a snapshot, so nothing is lost.
systemctl --force poweroff
