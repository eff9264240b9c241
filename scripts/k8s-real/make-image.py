#!/usr/bin/env python3
"""Writes an OCI image archive (what `ctr images import` reads) without a container engine.

usage: make-image.py OUT.tar NAME:TAG [--entrypoint JSON] [--user UID] [--env K=V ...] FILE...

Each FILE is HOST_PATH[=IMAGE_PATH] (IMAGE_PATH defaults to HOST_PATH), or LINK->TARGET for a symlink.
A host file that is a shared object or program brings the shared libraries `ldd` lists for it, at
their own paths, so host-built binaries run inside the image unchanged.
"""
import argparse
import hashlib
import io
import json
import os
import subprocess
import tarfile


def ldd(path):
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
    except OSError:
        return []
    libs = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts:
            target = parts[parts.index("=>") + 1]
            if target.startswith("/"):
                libs.append(target)
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])  # the dynamic loader
    return libs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("name")
    ap.add_argument("--entrypoint", default="null")
    ap.add_argument("--user", default="0")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("files", nargs="*")
    a = ap.parse_intermixed_args()

    entries = {}  # image path -> host path or ("link", target)
    for spec in a.files:
        if "->" in spec:
            link, target = spec.split("->", 1)
            entries[link] = ("link", target)
            continue
        host, _, image = spec.partition("=")
        image = image or host
        entries[image] = host
        with open(host, "rb") as f:
            elf = f.read(4) == b"\x7fELF"
        if elf:
            for lib in ldd(host):
                entries.setdefault(lib, os.path.realpath(lib))

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = set()
        for path in sorted(entries):
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
            src = entries[path]
            info = tarfile.TarInfo(path.strip("/"))
            if isinstance(src, tuple):
                info.type = tarfile.SYMTYPE
                info.linkname = src[1]
                tar.addfile(info)
                continue
            data = open(src, "rb").read()
            info.size = len(data)
            info.mode = os.stat(src).st_mode & 0o777 | 0o444
            tar.addfile(info, io.BytesIO(data))
        for d in ("tmp", "etc", "var/run", "dev", "proc", "sys"):
            if d not in dirs:
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o1777 if d == "tmp" else 0o755
                tar.addfile(info)
    layer_bytes = layer.getvalue()
    layer_digest = hashlib.sha256(layer_bytes).hexdigest()

    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": json.loads(a.entrypoint), "User": a.user,
                   "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"] + a.env},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_digest]},
    }
    config_bytes = json.dumps(config).encode()
    config_digest = hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": "sha256:" + config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": "sha256:" + layer_digest, "size": len(layer_bytes)}],
    }
    manifest_bytes = json.dumps(manifest).encode()
    manifest_digest = hashlib.sha256(manifest_bytes).hexdigest()
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": "sha256:" + manifest_digest, "size": len(manifest_bytes),
                       "annotations": {"io.containerd.image.name": a.name,
                                       "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[-1]}}],
    }
    with tarfile.open(a.out, mode="w") as out:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index).encode())
        add("blobs/sha256/" + layer_digest, layer_bytes)
        add("blobs/sha256/" + config_digest, config_bytes)
        add("blobs/sha256/" + manifest_digest, manifest_bytes)


if __name__ == "__main__":
    main()
