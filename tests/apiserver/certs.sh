#!/bin/bash
# certs.sh DIR NODE [PORT]: the TLS material of the fake kube-apiserver, made with openssl.
#
#   ca.crt ca.key          the test CA
#   server.crt server.key  the apiserver (SAN IP:127.0.0.1, DNS:localhost)
#   node.crt node.key      CN=system:node:NODE, O=system:nodes (a kubelet's client certificate)
#   admin.crt admin.key    CN=kubernetes-admin, O=system:masters
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
[ $# -ge 2 ] || { echo "usage: $0 DIR NODE [PORT]" >&2; exit 2; }
DIR=$1 NODE=$2 PORT=${3:-}
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

# leaf NAME SUBJECT EXTENSIONS: a key and a certificate signed by the CA.
leaf() {
  key "$DIR/$1.key"
  openssl req -new -key "$DIR/$1.key" -subj "$2" -config "$CNF" -out "$DIR/$1.csr"
  openssl x509 -req -in "$DIR/$1.csr" -CA "$DIR/ca.crt" -CAkey "$DIR/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 365 -extfile "$CNF" -extensions "$3" -out "$DIR/$1.crt" 2>/dev/null
  rm -f "$DIR/$1.csr"
}

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
  key "$DIR/ca.key"
  openssl req -x509 -new -key "$DIR/ca.key" -subj "/CN=ferrolet-test-ca" -days 3650 -config "$CNF" -extensions ca \
    -out "$DIR/ca.crt"
  leaf server "/CN=kube-apiserver" server
  leaf admin "/O=system:masters/CN=kubernetes-admin" client
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
