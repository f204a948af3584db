#!/bin/sh
# Runs at boot in the systemd VM (ferrolet-check.service): proves systemd is PID 1 with its
# manager on the system bus, creates a transient slice with MemoryMax over D-Bus and a scope
# in it, prints what the kernel shows as `SYSVM ...` lines, then powers off.
say() { echo "SYSVM $*"; }
say "up uptime=$(cut -d' ' -f1 /proc/uptime)"
say "pid1=$(cat /proc/1/comm) exe=$(readlink /proc/1/exe)"
say "cgroupfs=$(stat -fc %T /sys/fs/cgroup) kernel=$(uname -r)"
say "is-system-running=$(timeout 60 systemctl is-system-running --wait) uptime=$(cut -d' ' -f1 /proc/uptime)"
say "bus-owner=$(busctl --system status org.freedesktop.systemd1 2>/dev/null | sed -n 's/^PID=//p' | head -n1)"
say "version=$(busctl get-property org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager Version)"
say "StartTransientUnit slice: $(busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
  org.freedesktop.systemd1.Manager StartTransientUnit 'ssa(sv)a(sa(sv))' \
  ferrolet-test.slice fail 2 MemoryMax t 104857600 CPUWeight t 50 0 2>&1)"
sleep 60 &
pid=$!
say "StartTransientUnit scope: $(busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
  org.freedesktop.systemd1.Manager StartTransientUnit 'ssa(sv)a(sa(sv))' \
  ferrolet-test-sleep.scope fail 3 Slice s ferrolet-test.slice PIDs au 1 $pid Delegate b true 0 2>&1)"
sleep 1
# A dash in a slice's name is a level of the tree: ferrolet-test.slice is
# /ferrolet.slice/ferrolet-test.slice (systemd makes the parent ferrolet.slice itself).
CG=/sys/fs/cgroup$(systemctl show ferrolet-test.slice -p ControlGroup --value)
say "slice cgroup=${CG#/sys/fs/cgroup}"
say "slice memory.max=$(cat $CG/memory.max 2>&1) cpu.weight=$(cat $CG/cpu.weight 2>&1)"
say "slice systemctl $(systemctl show ferrolet-test.slice -p MemoryMax -p CPUWeight -p ActiveState | tr '\n' ' ')"
say "scope cgroup.procs=$(cat $CG/ferrolet-test-sleep.scope/cgroup.procs 2>&1 | tr '\n' ' ') sleep=$pid"
say "scope proc-cgroup=$(cat /proc/$pid/cgroup)"
say "scope cgroup.subtree_control=$(cat $CG/ferrolet-test-sleep.scope/cgroup.subtree_control 2>&1) owner=$(stat -c %U $CG/ferrolet-test-sleep.scope/cgroup.procs)"
say "failed-units=$(systemctl --failed --plain --no-legend | tr '\n' ';')"
say "done uptime=$(cut -d' ' -f1 /proc/uptime)"
systemctl poweroff --no-block
