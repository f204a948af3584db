#!/bin/bash
# certs.sh DIR NODE [PORT]: the TLS material of the fake kube-apiserver, made with openssl.
#
#   ca.crt ca.key          the test CA
#   server.crt server.key  the apiserver (SAN IP:127.0.0.1, DNS:localhost)
#   node.crt node.key      CN=system:node:NODE, O=system:nodes (a kubelet's client certificate)
#   admin.crt admin.key    CN=kubernetes-admin, O=system:masters
#   apiserver-kubelet-client.crt .key
#                          CN=kube-apiserver-kubelet-client, O=kubeadm:cluster-admins: what the
#                          apiserver presents to kubelets (--kubelet-client-certificate), as kubeadm
#   other-ca.crt other-ca.key, other-client.crt other-client.key
#                          a second CA and a client certificate it signed (CN=kubernetes-admin,
#                          O=system:masters): the name of an admin from a CA nobody trusts
#
# certs.sh --user DIR NAME [GROUP...]: user-NAME.crt and user-NAME.key, CN=NAME and one O per
# GROUP, signed by the CA of DIR (made before by certs.sh DIR NODE); an existing pair is kept.
#
# With PORT, also the kubeconfigs for https://127.0.0.1:PORT:
#   node.kubeconfig        CA, certificate and key by file path (absolute)
#   node-data.kubeconfig   the same inline (certificate-authority-data, client-*-data: base64)
#   admin.kubeconfig       the admin, by file path
#
# Keys are made as kubeadm writes them: FERROLET_TEST_KEY_TYPE=rsa (default: RSA 2048,
# PKCS#1 "RSA PRIVATE KEY") or ec (P-256, SEC1 "EC PRIVATE KEY").
# Certificates already in DIR are kept, so a second run with PORT only writes kubeconfigs
# (the fake binds port 0 first, then the kubeconfigs get the port it got).
set -euo pipefail
USER_NAME=
if [ "${1:-}" = --user ]; then
  [ $# -ge 3 ] || { echo "usage: $0 --user DIR NAME [GROUP...]" >&2; exit 2; }
  DIR=$2 USER_NAME=$3
  shift 3
  USER_GROUPS=("$@")
else
  [ $# -ge 2 ] || { echo "usage: $0 DIR NODE [PORT] | $0 --user DIR NAME [GROUP...]" >&2; exit 2; }
  DIR=$1 NODE=$2 PORT=${3:-}
fi
KEY_TYPE=${FERROLET_TEST_KEY_TYPE:-rsa}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
CNF="$DIR/openssl.cnf"

key() {
  case $KEY_TYPE in
    rsa) openssl genrsa -traditional -out "$1" 2048 2>/dev/null || openssl genrsa -out "$1" 2048 2>/dev/null ;;
    ec) openssl ecparam -name prime256v1 -genkey -noout -out "$1" ;;
    *) echo "FERROLET_TEST_KEY_TYPE must be rsa or ec, not $KEY_TYPE" >&2; exit 2 ;;
  esac
  chmod 600 "$1"
}

# leaf NAME SUBJECT EXTENSIONS [CA]: a key and a certificate signed by the CA (default `ca`).
leaf() {
  local ca=${4:-ca}
  key "$DIR/$1.key"
  openssl req -new -key "$DIR/$1.key" -subj "$2" -config "$CNF" -out "$DIR/$1.csr"
  openssl x509 -req -in "$DIR/$1.csr" -CA "$DIR/$ca.crt" -CAkey "$DIR/$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 365 -extfile "$CNF" -extensions "$3" -out "$DIR/$1.crt" 2>/dev/null
  rm -f "$DIR/$1.csr"
}

# ca NAME CN: a self-signed CA.
ca() {
  key "$DIR/$1.key"
  openssl req -x509 -new -key "$DIR/$1.key" -subj "/CN=$2" -days 3650 -config "$CNF" -extensions ca -out "$DIR/$1.crt"
}

if [ -n "$USER_NAME" ]; then
  [ -s "$DIR/ca.key" ] || { echo "$0: no CA in $DIR (run certs.sh DIR NODE first)" >&2; exit 2; }
  # One O per group (in order, as kubeadm's subjects list them), then the CN; `/` in a value
  # would split the subject, so it is refused.
  subject=
  for g in ${USER_GROUPS[@]+"${USER_GROUPS[@]}"} "$USER_NAME"; do
    case $g in */*) echo "$0: no / in user or group names: $g" >&2; exit 2 ;; esac
  done
  for g in ${USER_GROUPS[@]+"${USER_GROUPS[@]}"}; do subject="$subject/O=$g"; done
  [ -s "$DIR/user-$USER_NAME.crt" ] || leaf "user-$USER_NAME" "$subject/CN=$USER_NAME" client
  exit 0
fi

if [ ! -s "$DIR/node.crt" ]; then
  cat > "$CNF" <<'EOF'
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
EOF
  ca ca ferrolet-test-ca
  leaf server "/CN=kube-apiserver" server
  leaf admin "/O=system:masters/CN=kubernetes-admin" client
  leaf apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" client
  ca other-ca ferrolet-other-ca
  leaf other-client "/O=system:masters/CN=kubernetes-admin" client other-ca
  leaf node "/O=system:nodes/CN=system:node:$NODE" client
fi

[ -n "$PORT" ] || exit 0

b64() { base64 -w0 < "$1"; }

# kubeconfig FILE USER CERT KEY INLINE
kubeconfig() {
  local ca cert key
  if [ "$5" = inline ]; then
    ca="certificate-authority-data: $(b64 "$DIR/ca.crt")"
    cert="client-certificate-data: $(b64 "$3")"
    key="client-key-data: $(b64 "$4")"
  else
    ca="certificate-authority: $DIR/ca.crt"
    cert="client-certificate: $3"
    key="client-key: $4"
  fi
  cat > "$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: https://127.0.0.1:$PORT
    $ca
users:
- name: $2
  user:
    $cert
    $key
contexts:
- name: $2@fake
  context:
    cluster: fake
    user: $2
current-context: $2@fake
preferences: {}
EOF
  mv "$1.tmp" "$1"
}

kubeconfig "$DIR/node.kubeconfig" "system:node:$NODE" "$DIR/node.crt" "$DIR/node.key" file
kubeconfig "$DIR/node-data.kubeconfig" "system:node:$NODE" "$DIR/node.crt" "$DIR/node.key" inline
kubeconfig "$DIR/admin.kubeconfig" kubernetes-admin "$DIR/admin.crt" "$DIR/admin.key" file
