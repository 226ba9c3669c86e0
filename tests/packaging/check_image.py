"""The image scripts/image.sh writes agrees with the Dockerfile (the published recipe).

    check_image.py DOCKERFILE ARCHIVE FLAGS_FILE

DOCKERFILE is parsed with `dockerfile` (Docker's own Go parser, buildkit's, behind a Python API).
ARCHIVE is the OCI archive; its index, manifest, config and layer are read from the tar as a
runtime reads them. FLAGS_FILE is `scripts/image.sh flags` (RUSTFLAGS and the cargo command).
Checked: USER, EXPOSE, ENTRYPOINT and LABEL keys of the final stage against the image config; the
builder stage's RUSTFLAGS, `cargo build` arguments (with its `$(uname -m)` evaluated here) and
`strip` against what image.sh ran; the final stage's files (the binary, static and stripped,
and what distroless:nonroot brings: passwd/group with 65532, /tmp 1777, CA certificates).
Prints what it compared; exits non-zero with every disagreement listed.
"""

import hashlib
import io
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import tempfile

import dockerfile

problems = []


def check(ok, what):
    if ok:
        print(f"    ok: {what}")
    else:
        print(f"    FAIL: {what}")
        problems.append(what)


def stages(path):
    """[(FROM args, [instructions])] in order."""
    out = []
    for ins in dockerfile.parse_file(path):
        if ins.cmd.upper() == "FROM":
            out.append((ins.value, []))
        elif out:
            out[-1][1].append(ins)
    return out


def env_pairs(ins):
    v = list(ins.value)
    return {v[i]: shlex.split(v[i + 1])[0] if v[i + 1] else "" for i in range(0, len(v), 2)}


def label_pairs(ins):
    v = list(ins.value)
    return {v[i]: v[i + 1].strip('"') for i in range(0, len(v), 2)}


def builder_flags(dockerfile_path):
    """(RUSTFLAGS, cargo build argv with `$(uname -m)` evaluated, strips?) of the builder stage."""
    builder = next(body for args, body in stages(dockerfile_path) if len(args) >= 3 and args[-1] == "builder")
    env = {}
    for ins in builder:
        if ins.cmd.upper() == "ENV":
            env.update(env_pairs(ins))
    runs = [ins.value[0] for ins in builder if ins.cmd.upper() == "RUN"]
    release = next(r for r in runs if "--bin redlock-elector" in r)
    steps = [s.strip() for s in release.split("&&")]
    cargo = next(s for s in steps if s.startswith("cargo build"))
    cargo_args = [a.replace("$(uname -m)", platform.machine()) for a in shlex.split(cargo)]
    return env.get("RUSTFLAGS"), cargo_args, any(s.startswith("strip ") for s in steps)


def image_sh_flags(text):
    """`scripts/image.sh flags` output -> (RUSTFLAGS, cargo argv)."""
    lines = [line for line in text.splitlines() if line]
    rustflags = next(line.split("=", 1)[1] for line in lines if line.startswith("RUSTFLAGS="))
    cargo = next(line for line in lines if line.startswith("cargo "))
    return rustflags, shlex.split(cargo)


def main():
    dockerfile_path, archive, flags_file = sys.argv[1:4]
    built = stages(dockerfile_path)
    final_from, final = built[-1]
    by_cmd = {}
    for ins in final:
        by_cmd.setdefault(ins.cmd.upper(), []).append(ins)

    # ------------------------------------------------------------------ the archive as a runtime reads it
    tar = tarfile.open(archive)

    def blob(digest):
        algo, hexd = digest.split(":")
        data = tar.extractfile(f"blobs/{algo}/{hexd}").read()
        check(hashlib.sha256(data).hexdigest() == hexd, f"blob {digest[:19]}... matches its digest")
        return data

    layout = json.loads(tar.extractfile("oci-layout").read())
    check(layout.get("imageLayoutVersion") == "1.0.0", "oci-layout 1.0.0")
    index = json.loads(tar.extractfile("index.json").read())
    check(len(index["manifests"]) == 1, "index.json holds one image")
    desc = index["manifests"][0]
    ann = desc.get("annotations", {})
    ref = ann.get("io.containerd.image.name", "")
    print(f"    image: {ref} ({desc['digest']})")
    check(ann.get("org.opencontainers.image.ref.name") == ref.rsplit(":", 1)[-1],
          "index names the image for containerd (io.containerd.image.name) and skopeo/podman (ref.name = tag)")
    manifest = json.loads(blob(desc["digest"]))
    check(manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json", "OCI image manifest")
    config = json.loads(blob(manifest["config"]["digest"]))
    cfg = config["config"]

    # ------------------------------------------------------------------ final stage vs image config
    user = by_cmd["USER"][-1].value[0]
    check(cfg.get("User") == user, f"USER {user} == image User {cfg.get('User')!r}")
    entry = by_cmd["ENTRYPOINT"][-1]
    check(entry.json, "Dockerfile ENTRYPOINT is in exec (JSON) form, as the image's is")
    check(cfg.get("Entrypoint") == list(entry.value),
          f"ENTRYPOINT {list(entry.value)} == image Entrypoint {cfg.get('Entrypoint')}")
    check(not cfg.get("Cmd"), "no Cmd (the Dockerfile sets none; distroless sets none)")
    ports = {p if "/" in p else f"{p}/tcp" for ins in by_cmd["EXPOSE"] for p in ins.value}
    check(set(cfg.get("ExposedPorts", {})) == ports, f"EXPOSE {sorted(ports)} == image ExposedPorts {sorted(cfg.get('ExposedPorts', {}))}")
    labels = {}
    for ins in by_cmd.get("LABEL", []):
        labels.update(label_pairs(ins))
    image_labels = cfg.get("Labels") or {}
    check(set(image_labels) == set(labels), f"LABEL keys {sorted(labels)} == image label keys")
    for k, v in labels.items():
        if "${" not in v:
            check(image_labels.get(k) == v, f"label {k}={v!r}")
    check(final_from[0].startswith("gcr.io/distroless/static-debian12:nonroot"),
          f"final stage FROM {final_from[0]} is the base the layer below reproduces")
    check(config.get("os") == "linux", "os linux")
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    check(config.get("architecture") == arch, f"architecture {config.get('architecture')} == this machine's {arch}")
    check(cfg.get("WorkingDir") == "/home/nonroot", "WorkingDir /home/nonroot (distroless:nonroot's)")
    check("SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" in cfg.get("Env", []), "Env SSL_CERT_FILE (distroless's)")

    # ------------------------------------------------------------------ builder stage vs image.sh flags
    rustflags, cargo_args, strips = builder_flags(dockerfile_path)
    sh_rustflags, sh_cargo = image_sh_flags(open(flags_file).read())
    check(rustflags == sh_rustflags, f"builder RUSTFLAGS {rustflags!r} == image.sh's {sh_rustflags!r}")
    check(cargo_args == sh_cargo,
          f"builder `{' '.join(cargo_args)}` == image.sh's `{' '.join(sh_cargo)}` (uname -m = {platform.machine()})")
    check(strips, "builder strips the binary (image.sh does too)")

    # ------------------------------------------------------------------ the layer: final stage's files
    check(len(manifest["layers"]) == 1, "one layer")
    layer = tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"])))
    members = {m.name.lstrip("./"): m for m in layer.getmembers()}

    def text(name):
        return layer.extractfile(members[name]).read().decode()

    exe = list(entry.value)[0].lstrip("/")
    m = members.get(exe)
    check(m is not None and m.isfile() and m.mode == 0o755 and m.uid == 0,
          f"{exe}: file, 0755, owned by root (the COPY --from=builder)")
    uid, gid = (int(x) for x in user.split(":"))
    check(f"nonroot:x:{uid}:{gid}:" in text("etc/passwd"), f"/etc/passwd has nonroot {uid}:{gid}")
    check(f"nonroot:x:{gid}:" in text("etc/group"), f"/etc/group has nonroot {gid}")
    t = members.get("tmp")
    check(t is not None and t.isdir() and t.mode == 0o1777, "/tmp is a directory with mode 1777")
    h = members.get("home/nonroot")
    check(h is not None and h.isdir() and (h.uid, h.gid) == (uid, gid), f"/home/nonroot owned by {uid}:{gid}")
    certs = text("etc/ssl/certs/ca-certificates.crt").count("BEGIN CERTIFICATE")
    check(certs > 100, f"/etc/ssl/certs/ca-certificates.crt holds {certs} certificates (Debian's bundle)")
    check(all(mm.uid == 0 for n, mm in members.items() if not n.startswith("home/nonroot")),
          "everything else owned by root")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "redlock-elector")
        with open(path, "wb") as f:
            f.write(layer.extractfile(m).read())
        os.chmod(path, 0o755)
        headers = subprocess.run(["readelf", "-lS", "-W", path], capture_output=True, text=True,
                                 env={**os.environ, "LC_ALL": "C"}, check=True).stdout
        check("Requesting program interpreter" not in headers, "binary is static (no program interpreter)")
        check(".symtab" not in headers, "binary is stripped (no .symtab)")
        version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout.split()
        check(version[-1] == image_labels.get("org.opencontainers.image.version"),
              f"`redlock-elector --version` says {version[-1]}, the version label too")
        check(ref.endswith(":" + version[-1]), f"the image reference {ref} is tagged with that version")
        print(f"    binary: {os.path.getsize(path)} bytes; layer {manifest['layers'][0]['size']} bytes compressed")

    if problems:
        print(f"\ncheck_image.py: the image and the Dockerfile disagree ({len(problems)}):", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
