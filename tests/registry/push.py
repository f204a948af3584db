#!/usr/bin/env python3
"""Pushes an image tarball (tests/cri/mkimage.py's) into a registry through its HTTP API v2,
offline, with the standard library only.

  push.py --registry 127.0.0.1:PORT --ca DIR/ca.crt --user U --password P \\
      --image test/busybox:1 busybox.tar

Both of mkimage.py's formats:
  docker   (manifest.json, <config>.json, <layer>/layer.tar): pushed as a Docker schema 2
           manifest, each layer gzipped (as `docker push` does; the config's diff_ids stay
           the digests of the uncompressed tars)
  oci      (oci-layout, index.json, blobs/sha256/...): the first manifest of index.json and
           the blobs it names, pushed as they are
Each blob is one monolithic upload (POST /v2/<name>/blobs/uploads/, then PUT <location>
with ?digest=), skipped when the registry has it; then PUT /v2/<name>/manifests/<tag> with
the manifest's media type. Every request carries basic auth (the registry's htpasswd auth
asks for nothing else: no token service). Prints the manifest's digest.
"""
import argparse, base64, gzip, hashlib, json, ssl, sys, tarfile, urllib.error, urllib.parse, urllib.request

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read(tf, name):
    return tf.extractfile(tf.getmember(name)).read()


def from_docker_archive(tf):
    """(blobs, manifest, media type) of a docker-archive tarball's first image."""
    entry = json.loads(read(tf, "manifest.json"))[0]
    config = read(tf, entry["Config"])
    layers = [gzip.compress(read(tf, path), mtime=0) for path in entry["Layers"]]
    manifest = {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
                "config": {"mediaType": DOCKER_CONFIG, "size": len(config), "digest": digest(config)},
                "layers": [{"mediaType": DOCKER_LAYER, "size": len(l), "digest": digest(l)} for l in layers]}
    return [config] + layers, json.dumps(manifest).encode(), DOCKER_MANIFEST


def from_oci_layout(tf):
    """(blobs, manifest, media type) of an OCI layout tarball's first manifest."""
    blob = lambda d: read(tf, "blobs/" + d.replace(":", "/", 1))
    desc = json.loads(read(tf, "index.json"))["manifests"][0]
    manifest = blob(desc["digest"])
    parsed = json.loads(manifest)
    blobs = [blob(d["digest"]) for d in [parsed["config"]] + parsed["layers"]]
    return blobs, manifest, desc.get("mediaType") or parsed["mediaType"]


class Registry:
    def __init__(self, host, ca, user, password):
        self.base = f"https://{host}"
        self.ctx = ssl.create_default_context(cafile=ca)
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def call(self, method, url, data=None, content_type=None, ok=(200, 201, 202)):
        req = urllib.request.Request(urllib.parse.urljoin(self.base, url), data=data, method=method)
        req.add_header("Authorization", self.auth)
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=60) as resp:
                return resp.status, resp.headers
        except urllib.error.HTTPError as e:
            if e.code in ok:
                return e.code, e.headers
            body = e.read().decode(errors="replace").strip()
            raise SystemExit(f"push.py: {method} {req.full_url}: HTTP {e.code} {e.reason}: {body}")

    def has_blob(self, name, d):
        status, _ = self.call("HEAD", f"/v2/{name}/blobs/{d}", ok=(200, 404))
        return status == 200

    def push_blob(self, name, data):
        d = digest(data)
        if self.has_blob(name, d):
            return
        _, headers = self.call("POST", f"/v2/{name}/blobs/uploads/", data=b"")
        location = headers["Location"]
        sep = "&" if "?" in location else "?"
        self.call("PUT", f"{location}{sep}digest={urllib.parse.quote(d)}", data=data,
                  content_type="application/octet-stream")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--registry", required=True, help="HOST:PORT (https)")
    p.add_argument("--ca", required=True, help="the CA certificate the registry's certificate is signed by")
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--image", required=True, help="NAME:TAG in that registry, e.g. test/busybox:1")
    p.add_argument("tar", help="mkimage.py's output (docker or oci format)")
    args = p.parse_args()
    name, _, tag = args.image.rpartition(":")
    if not name or "/" in tag:
        sys.exit(f"push.py: --image wants NAME:TAG, not {args.image!r}")

    with tarfile.open(args.tar) as tf:
        names = set(tf.getnames())
        if "manifest.json" in names:
            blobs, manifest, media_type = from_docker_archive(tf)
        elif "index.json" in names:
            blobs, manifest, media_type = from_oci_layout(tf)
        else:
            sys.exit(f"push.py: {args.tar} is neither a docker archive nor an OCI layout")

    reg = Registry(args.registry, args.ca, args.user, args.password)
    for b in blobs:
        reg.push_blob(name, b)
    reg.call("PUT", f"/v2/{name}/manifests/{tag}", data=manifest, content_type=media_type)
    print(digest(manifest))


if __name__ == "__main__":
    main()
