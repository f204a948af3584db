#!/bin/bash
# Installs what the registry tests need, if missing: Debian's docker-registry (the reference
# registry server), apache2-utils (htpasswd -B: the registry accepts bcrypt entries only) and
# openssl. tests/cri/up.sh runs it after its own packages; by hand it can run again safely.
#
# Debian's docker-registry starts its system service (port 5000, /var/lib/docker-registry)
# when installed: through invoke-rc.d on a sysvinit machine, deb-systemd-invoke under systemd.
# Both ask /usr/sbin/policy-rc.d first, so during the install that is a script of ours that
# denies every start (exit 101); the machine's own, if it had one, is put back after it. The
# service is also disabled, so it does not start at the next boot either. The tests start
# their own registries (tests/common/registry.rs) and never this service.
#
# When the tests cannot have it (FERROLET_SKIP_REGISTRY=1, not root, apt fails) it prints one
# line saying why the registry tests will skip, and exits 0.
set -euo pipefail
skip() { echo "registry: no docker-registry, the registry tests will skip: $*"; exit 0; }

[ "${FERROLET_SKIP_REGISTRY:-0}" = 1 ] && skip "FERROLET_SKIP_REGISTRY=1"
missing=""
for p in docker-registry apache2-utils openssl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
[ "$(id -u)" = 0 ] || skip "not root, cannot install$missing"

POLICY=/usr/sbin/policy-rc.d
SAVED=$POLICY.ferrolet-saved
MARK="# written by ferrolet's tests/registry/install.sh for one install"
# One install at a time: two would save each other's policy as the machine's.
lockdir=/run/lock; [ -d "$lockdir" ] && [ -w "$lockdir" ] || lockdir=/tmp
exec 9>"$lockdir/ferrolet-registry-install.lock"
flock 9
# The machine's own policy is kept; a policy of ours (an install killed halfway) is not.
if [ -e "$POLICY" ] && ! grep -qF "$MARK" "$POLICY"; then cp -p "$POLICY" "$SAVED"; fi
restore() { if [ -e "$SAVED" ]; then mv -f "$SAVED" "$POLICY"; else rm -f "$POLICY"; fi; }
trap restore EXIT
printf '#!/bin/sh\n%s\nexit 101\n' "$MARK" > "$POLICY.new" && chmod 0755 "$POLICY.new" && mv -f "$POLICY.new" "$POLICY"

echo "registry: installing$missing (its service is not started)"
apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -qq "$@"; }
if ! { apt_get update && apt_get install -y --no-install-recommends $missing; } >/tmp/ferrolet-registry-apt.log 2>&1; then
  skip "apt-get could not install$missing (see /tmp/ferrolet-registry-apt.log)"
fi
case "$missing" in
  *docker-registry*)
    deb-systemd-helper disable docker-registry.service >/dev/null 2>&1 || true
    update-rc.d docker-registry disable >/dev/null 2>&1 || true;;
esac
