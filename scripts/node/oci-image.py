#!/usr/bin/env python3
"""Write a one-layer OCI image tarball (an OCI image layout in a tar) from files on this host.

    oci-image.py OUT.tar NAME:TAG [--entrypoint PATH] [--user UID:GID] SRC=DEST [LINK->TARGET ...]

SRC=DEST copies the host file SRC to DEST in the image (mode kept); LINK->TARGET adds a
symlink. The tar is what `ctr images import` takes: index.json names the image with
io.containerd.image.name (the full reference) and org.opencontainers.image.ref.name (the tag).
Used for the node's helper images (the pause image from Kubernetes' pause.c, a static busybox
for the chart's demo app); the sidecar's own image comes from scripts/image.sh.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile
import time

EPOCH = 0  # fixed mtimes: the same inputs give the same digests


def add_bytes(tar, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = EPOCH
    tar.addfile(info, io.BytesIO(data))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("ref")
    p.add_argument("--entrypoint", action="append", default=[])
    p.add_argument("--user", default="")
    p.add_argument("entries", nargs="+")
    a = p.parse_args()

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        dirs = set()
        for e in a.entries:
            dest = e.split("->")[0] if "->" in e else e.split("=", 1)[1]
            parts = dest.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    info.mtime = EPOCH
                    t.addfile(info)
        for e in a.entries:
            if "->" in e:
                link, target = e.split("->", 1)
                info = tarfile.TarInfo(link.strip("/"))
                info.type = tarfile.SYMTYPE
                info.linkname = target
                info.mtime = EPOCH
                t.addfile(info)
            else:
                src, dest = e.split("=", 1)
                with open(src, "rb") as f:
                    add_bytes(t, dest.strip("/"), f.read(), os.stat(src).st_mode & 0o7777)
    raw = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    gz = gzip.compress(raw, mtime=EPOCH)

    config = {
        "architecture": "amd64" if os.uname().machine == "x86_64" else "arm64",
        "os": "linux",
        "config": {"Entrypoint": a.entrypoint, "User": a.user, "Env": ["PATH=/bin:/usr/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "scripts/node/oci-image.py"}],
    }
    blobs = {}

    def blob(data):
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return "sha256:" + d

    config_raw = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": blob(config_raw), "size": len(config_raw)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": blob(gz), "size": len(gz)}],
    }
    manifest_raw = json.dumps(manifest, sort_keys=True).encode()
    name, tag = a.ref.rsplit(":", 1)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": manifest["mediaType"], "digest": blob(manifest_raw),
                       "size": len(manifest_raw),
                       "annotations": {"io.containerd.image.name": a.ref,
                                       "org.opencontainers.image.ref.name": tag}}],
    }
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w") as t:
        add_bytes(t, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes(t, "index.json", json.dumps(index, sort_keys=True).encode())
        for d, data in sorted(blobs.items()):
            add_bytes(t, "blobs/sha256/" + d, data)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
