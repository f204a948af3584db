#!/usr/bin/env python3
"""Writes a one-layer container image tarball, offline, with the standard library only.

The layer holds a minimal root (/bin, /etc/passwd, /tmp, ...), optionally a static busybox
with a symlink per applet, and any extra files. Two tarball formats, both of which
`ctr images import` reads:
  --format docker   docker-archive: manifest.json, <config>.json, <layer>/layer.tar
  --format oci      OCI image layout: oci-layout, index.json, blobs/sha256/...
The output is reproducible (mtime 0, uid 0, fixed order), so its digests are stable.

  mkimage.py --name localhost/busybox:latest --busybox /bin/busybox --cmd /bin/sh --out bb.tar
  mkimage.py --name localhost/pause:catatonit --format oci \\
      --file /usr/bin/catatonit:/usr/bin/catatonit --entrypoint /usr/bin/catatonit,-P --out pause.tar
"""
import argparse, hashlib, io, json, subprocess, tarfile


def add(tf, name, data=None, mode=0o755, link=None):
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = mode, 0
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
    elif data is None:
        info.type = tarfile.DIRTYPE
    else:
        info.size = len(data)
    tf.addfile(info, io.BytesIO(data) if data is not None else None)


def layer(args):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for d, mode in [("bin", 0o755), ("dev", 0o755), ("etc", 0o755), ("proc", 0o555),
                        ("root", 0o700), ("sys", 0o555), ("tmp", 0o1777), ("usr", 0o755),
                        ("usr/bin", 0o755), ("var", 0o755)]:
            add(tf, d, mode=mode)
        add(tf, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n", 0o644)
        add(tf, "etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
        if args.busybox:
            add(tf, "bin/busybox", open(args.busybox, "rb").read())
            applets = subprocess.run([args.busybox, "--list"], check=True,
                                     capture_output=True, text=True).stdout.split()
            for a in sorted(set(applets) - {"busybox"}):
                add(tf, "bin/" + a, link="busybox")
        for spec in args.file:
            src, dst = spec.split(":", 1)
            add(tf, dst.lstrip("/"), open(src, "rb").read())
    return buf.getvalue()


def digest(data):
    return hashlib.sha256(data).hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="image reference, e.g. localhost/busybox:latest")
    p.add_argument("--out", required=True)
    p.add_argument("--format", choices=["docker", "oci"], default="docker")
    p.add_argument("--arch", default="amd64", help="GOARCH name (dpkg --print-architecture)")
    p.add_argument("--busybox", help="a static busybox to put in /bin, with its applets")
    p.add_argument("--file", action="append", default=[], metavar="SRC:DST", help="an extra executable")
    p.add_argument("--entrypoint", help="comma-separated")
    p.add_argument("--cmd", help="comma-separated")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable (also makes an image's id differ from another's)")
    args = p.parse_args()

    tar = layer(args)
    config = {"architecture": args.arch, "os": "linux", "created": "1970-01-01T00:00:00Z",
              "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + args.env,
                         "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest(tar)]}}
    if args.entrypoint:
        config["config"]["Entrypoint"] = args.entrypoint.split(",")
    if args.cmd:
        config["config"]["Cmd"] = args.cmd.split(",")
    cfg = canonical(config)

    with tarfile.open(args.out, "w", format=tarfile.GNU_FORMAT) as out:
        if args.format == "docker":
            add(out, digest(cfg) + ".json", cfg, 0o644)
            add(out, digest(tar))
            add(out, digest(tar) + "/layer.tar", tar, 0o644)
            add(out, "manifest.json", json.dumps([{"Config": digest(cfg) + ".json", "RepoTags": [args.name],
                                                   "Layers": [digest(tar) + "/layer.tar"]}]).encode(), 0o644)
        else:
            manifest = canonical({
                "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": "sha256:" + digest(cfg), "size": len(cfg)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": "sha256:" + digest(tar), "size": len(tar)}]})
            index = canonical({
                "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "digest": "sha256:" + digest(manifest), "size": len(manifest),
                               "platform": {"architecture": args.arch, "os": "linux"},
                               "annotations": {"io.containerd.image.name": args.name,
                                               "org.opencontainers.image.ref.name": args.name.rpartition(":")[2]}}]})
            add(out, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644)
            add(out, "blobs")
            add(out, "blobs/sha256")
            for blob in sorted([cfg, tar, manifest], key=digest):
                add(out, "blobs/sha256/" + digest(blob), blob, 0o644)
            add(out, "index.json", index, 0o644)


if __name__ == "__main__":
    main()
