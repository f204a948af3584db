#!/bin/sh
# A stand-in for the systemd cgroup driver, to check tests/vm_systemd.rs's own checks before
# the driver exists (FERROLET_SDVM_DRIVER=fake): the agent runs on its cgroupfs driver, then
# this makes over D-Bus (StartTransientUnit, as kubelet's driver does) the slices kubelet
# would, with kubelet's values, and moves each workload into a ferrolet-*.scope of its pod's
# slice. `sdvm-fake-driver.sh remove UID` stops a Burstable pod's slice.
# Not a test of ferrolet: a test of the test.
CG=/sys/fs/cgroup
call() {
  busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager \
    StartTransientUnit 'ssa(sv)a(sa(sv))' "$@" 0 >/dev/null || echo "SDVM error=fake driver: StartTransientUnit $1 failed"
}
if [ "$1" = remove ]; then
  systemctl stop "kubepods-burstable-pod$(echo "$2" | tr - _).slice"
  exit 0
fi
INF=18446744073709551615
MEM=$(($(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo) * 1024))
call kubepods.slice replace 3 CPUWeight t 79 MemoryMax t $MEM TasksMax t "$(cat /proc/sys/kernel/pid_max)"
call kubepods-burstable.slice replace 1 CPUWeight t 10
call kubepods-besteffort.slice replace 1 CPUWeight t 1
# The cgroupfs driver's pod cgroups give the uids: /kubepods[/QOS]/pod<uid>.
for d in $CG/kubepods/pod* $CG/kubepods/burstable/pod* $CG/kubepods/besteffort/pod*; do
  [ -d "$d" ] || continue
  uid=${d##*/pod}
  u=$(echo "$uid" | tr - _)
  case "$d" in
    */burstable/*) slice=kubepods-burstable-pod$u.slice
      call "$slice" replace 4 CPUWeight t 10 CPUQuotaPerSecUSec t 1000000 MemoryMax t 100663296 TasksMax t $INF ;;
    */besteffort/*) slice=kubepods-besteffort-pod$u.slice
      call "$slice" replace 2 CPUWeight t 1 TasksMax t $INF ;;
    *) slice=kubepods-pod$u.slice
      call "$slice" replace 4 CPUWeight t 20 CPUQuotaPerSecUSec t 500000 MemoryMax t 67108864 TasksMax t $INF ;;
  esac
  # The container's processes (the workload and the runtime's own for it), in one scope.
  pids=$(cat "$d"/*/cgroup.procs 2>/dev/null)
  set -- $pids
  call "ferrolet-app-$u.scope" replace 3 Slice s "$slice" PIDs au $# $pids Delegate b true
done
