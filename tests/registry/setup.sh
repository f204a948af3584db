#!/bin/bash
# Writes a test registry's files into DIR, for `docker-registry serve DIR/config.yml`:
#   ca.crt, ca.key          a CA made for this registry alone (what containerd is told to trust)
#   server.crt, server.key  its certificate, for IP 127.0.0.1 and DNS localhost, signed by that CA
#   htpasswd                USER with PASSWORD, bcrypt (the registry accepts no other hash)
#   config.yml              TLS on 127.0.0.1:PORT, basic auth from htpasswd, storage in DIR/data
# Keys are EC P-256 (fast to make); certificates last 2 days.
#   setup.sh DIR PORT USER PASSWORD
set -euo pipefail
[ $# = 4 ] || { echo "usage: $0 DIR PORT USER PASSWORD" >&2; exit 2; }
dir=$1 port=$2 user=$3 password=$4
mkdir -p "$dir/data"
dir=$(cd "$dir" && pwd)
cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 2 -subj "/CN=ferrolet test registry CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req "${ec[@]}" -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature extendedKeyUsage=serverAuth \
  subjectAltName=IP:127.0.0.1,DNS:localhost > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext \
  -out server.crt 2>/dev/null
rm -f server.csr server.ext ca.srl
htpasswd -Bbc htpasswd "$user" "$password" 2>/dev/null
cat > config.yml <<YAML
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: "$dir/data"
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$port
  secret: ferrolet-test-registry
  tls:
    certificate: "$dir/server.crt"
    key: "$dir/server.key"
auth:
  htpasswd:
    realm: ferrolet-test-registry
    path: "$dir/htpasswd"
YAML
