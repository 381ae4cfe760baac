"""Build Slipway's OCI image from Debian packages and our own wheels, with no base image from any registry.

    python deploy/image/build.py [--out dist] [--cache dist/image-cache] [--debian-stage DIR] [--no-archive]
    python deploy/image/build.py --config-digest --debian-stage DIR   # the config digest only, nothing written

Writes OUT/image/ (an OCI image layout tagged with the version and `latest`) and OUT/slipway-image.tar (a
docker-archive for `docker load` / `podman load`). Needs root (or a user namespace mmdebstrap can use),
mmdebstrap, skopeo and the Debian mirror (`make image-deps`).

Reproducible: everything is built from the commit (HEAD, via `git archive`), every time in the image is clamped to
SOURCE_DATE_EPOCH (the commit's time unless set), the umask is 022, the files that say where the build ran
(/etc/hostname, /etc/resolv.conf) are emptied, the layer is written by this script in a fixed order with numeric
owners, and Python's bytecode is hash-based; so two builds of one commit against one mirror state give one digest.

--debian-stage DIR keeps the Debian stage (mmdebstrap's rootfs, the slow and network-bound part) in DIR and reuses
it while its inputs (suite, packages, mirrors, excludes, SOURCE_DATE_EPOCH) are the same. --config-digest builds
everything after that stage, hashes the uncompressed layer and prints the image config's digest without writing a
layout: the config names the layer's diff_id, so two builds with one config digest have the same layer bytes
(compressing them is deterministic: gzip with no name and mtime 0).

Layout inside the image (documented in the README's "Container image"):
    /opt/slipway                 Slipway and its Python dependencies (with templates/, static/, migrations/)
    /usr/share/slipway/agent-wheels   the agent wheelhouse (the server's default --agent-wheelhouse)
    /var/lib/slipway             data dir (SLIPWAY_DATA_DIR), owned by uid 1000
    /var/cache/slipway           provisioner cache (SLIPWAY_PROVISIONER_CACHE_DIR's parent), owned by uid 1000
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

REPO = Path(__file__).resolve().parents[2]
IMAGE_NAME = "slipway"
SOURCE_URL = "https://github.com/slipway-dev/slipway"
UID = GID = 1000
SITE = "/opt/slipway"
DATA_DIR = "/var/lib/slipway"
CACHE_DIR = "/var/cache/slipway"
# The user's home is the data dir: the root filesystem may be read-only, and anything a tool keeps in ~ (git's,
# ssh's known_hosts) then lives with the rest of the deployment's state.
HOME = DATA_DIR
WHEELHOUSE = "/usr/share/slipway/agent-wheels"
# Debian bookworm: its python3 is 3.11, the minor our wheels are fetched for (the build checks it runs 3.11 too).
SUITE = "bookworm"
IMAGE_PYTHON = "3.11.2"  # bookworm's python3 (checked once the rootfs is built)
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# What Slipway runs besides Python: git for template repositories, ssh for git over SSH, CA certificates for HTTPS.
# libstdc++6: google-re2's wheel links it without bundling it (the build checks every .so finds its libraries).
PACKAGES = ("python3", "git", "openssh-client", "ca-certificates", "libstdc++6")
# Documentation, manuals and translations are a third of a Debian rootfs and nobody reads them in a container.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
# The image's runtime filesystems: present as empty mount points, never with the build host's contents.
MOUNT_POINTS = ("dev", "proc", "sys", "run", "tmp")


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    # pip's warnings about the machine's index go to stderr: shown only when the step fails.
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout.strip()


def log(message: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)


@dataclass(frozen=True)
class Commit:
    revision: str
    epoch: int
    version: str


def describe_commit(name: str) -> Commit:
    revision = run("git", "rev-parse", "--verify", f"{name}^{{commit}}", cwd=REPO)
    # The commit's time: the same for every build of it, unlike the clock (SOURCE_DATE_EPOCH wins when set).
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or run("git", "log", "-1", "--format=%ct", revision, cwd=REPO))
    import tomllib

    pyproject = run("git", "show", f"{revision}:pyproject.toml", cwd=REPO)
    version = str(tomllib.loads(pyproject)["project"]["version"])
    return Commit(revision, epoch, version)


def runtime_pins() -> list[str]:
    """Slipway's runtime dependencies, transitively, at the versions its environment was installed and tested with
    (the project has no lock file: the tested environment is the lock). Dev extras are left out. Markers are
    evaluated for the image's Python, not this one: redis needs async-timeout below 3.11.3, bookworm has 3.11.2."""
    from importlib import metadata

    from packaging.requirements import Requirement

    target = {"python_full_version": IMAGE_PYTHON, "python_version": IMAGE_PYTHON.rsplit(".", 1)[0]}
    pins: dict[str, str] = {}

    def walk(requirement: Requirement) -> None:
        key = requirement.name.lower().replace("_", "-")
        if key in pins:
            return
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            # Needed only by the image's older Python: the newest version the requirement allows.
            pins[key] = str(requirement.specifier)
            return
        pins[key] = f"=={dist.version}"
        for line in dist.requires or []:
            needed = Requirement(line)
            marker = needed.marker
            extras = ("", *requirement.extras)
            if marker is not None and not any(marker.evaluate({**target, "extra": extra}) for extra in extras):
                continue
            walk(needed)

    walk(Requirement("slipway"))
    pins.pop("slipway")
    return [f"{name}{version}" for name, version in sorted(pins.items())]


def fetch_wheels(pins: list[str], directory: Path) -> None:
    """Binary wheels only, for CPython 3.11 on Linux: what Debian bookworm's python3 imports. Kept in the cache
    between builds (pip skips files already there), so rebuilds are offline and the same bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    requirements = directory / "requirements.txt"
    requirements.write_text("\n".join(pins) + "\n")
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "-q")
    run(*pip, "download", "--no-deps", "--only-binary=:all:", "-d", str(directory), "-r", str(requirements))


def our_wheel(commit: Commit, work: Path) -> Path:
    """Our wheel, from the commit's tree (not the working tree: the image's revision label must say what is in it);
    also returns that tree, whose templates/, static/ and migrations/ the app reads beside its packages."""
    source = work / "source"
    source.mkdir()
    archive = subprocess.run(("git", "archive", commit.revision), cwd=REPO, check=True, stdout=subprocess.PIPE)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    wheels = work / "ours"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "-q")
    run(*pip, "wheel", "--no-deps", "-w", str(wheels), str(source))
    return next(wheels.glob("slipway-*.whl"))


def debian_rootfs(rootfs: Path, commit: Commit, stage: Path | None) -> bool:
    """A minimal Debian with our packages: the `essential` variant has no apt (nothing installs at run time).
    With a stage dir, a stage built there from the same inputs is copied instead (returns True then)."""
    args = ["mmdebstrap", "--quiet", "--variant=essential", "--mode=root", f"--include={','.join(PACKAGES)}"]
    args += [f"--dpkgopt={option}" for option in DPKG_EXCLUDES]
    inputs = json.dumps({"args": [*args, SUITE, *MIRRORS], "epoch": commit.epoch})
    if stage is not None and (stage / "inputs.json").is_file() and (stage / "inputs.json").read_text() == inputs:
        # cp -a keeps modes, owners, times and hard links: the copy is the stage as mmdebstrap left it.
        subprocess.run(("cp", "-a", str(stage / "rootfs"), str(rootfs)), check=True)
        return True
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(commit.epoch)}
    subprocess.run([*args, SUITE, str(rootfs), *MIRRORS], check=True, env=env)
    if stage is not None:
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        subprocess.run(("cp", "-a", str(rootfs), str(stage / "rootfs")), check=True)
        (stage / "inputs.json").write_text(inputs)  # last: a stage cut short is never reused
    return False


def install_slipway(rootfs: Path, wheels: Path, ours: Path, source: Path) -> None:
    target = rootfs / SITE.lstrip("/")
    version = run("chroot", str(rootfs), "/usr/bin/python3", "-c", "import platform; print(platform.python_version())")
    if version != IMAGE_PYTHON:
        raise SystemExit(f"the rootfs has Python {version}, not {IMAGE_PYTHON}: update IMAGE_PYTHON")
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "-q")
    # --no-compile: the image's own python3 compiles below; --target: no interpreter paths baked into the files.
    run(*pip, "install", "--no-deps", "--no-index", "--no-compile", "--target", str(target), str(ours),
        *sorted(str(path) for path in wheels.glob("*.whl")))  # fmt: skip
    # bin/ holds scripts for the build host's Python; direct_url.json names the build's temporary path (and
    # RECORD lists it: that line goes too, so that pip can still uninstall cleanly).
    shutil.rmtree(target / "bin", ignore_errors=True)
    for direct_url in target.glob("*.dist-info/direct_url.json"):
        direct_url.unlink()
        record = direct_url.with_name("RECORD")
        lines = record.read_text().splitlines(keepends=True)
        record.write_text(
            "".join(line for line in lines if not line.startswith(f"{direct_url.parent.name}/direct_url"))
        )
    # app/factory.py reads these beside the packages (the wheel does not carry them).
    for name in ("templates", "static", "migrations"):
        shutil.copytree(source / name, target / name)
    python_path = rootfs / "usr/local/lib/python3.11/dist-packages"
    python_path.mkdir(parents=True, exist_ok=True)
    (python_path / "slipway.pth").write_text(SITE + "\n")
    entrypoint = rootfs / "usr/local/bin/slipway"
    entrypoint.write_text("#!/usr/bin/python3\nimport sys\n\nfrom cli.main import main\n\nsys.exit(main())\n")
    entrypoint.chmod(0o755)
    # The image's interpreter compiles, with hash-based .pyc (no timestamps): the same bytes every build, and no
    # write attempts at run time by a user who cannot write there.
    subprocess.run(
        ("chroot", str(rootfs), "/usr/bin/python3", "-m", "compileall", "-q", "-j", "0",
         "--invalidation-mode", "unchecked-hash", SITE),
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def check_shared_libraries(rootfs: Path) -> None:
    """Some wheels link system libraries they do not bundle: a missing one fails the build here, not an import
    in production."""
    found = subprocess.run(
        ("chroot", str(rootfs), "/bin/sh", "-c", f"find {SITE} -name '*.so*' -type f -exec ldd {{}} + 2>/dev/null"),
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    missing = sorted({line.split()[0] for line in found.splitlines() if "not found" in line})
    if missing:
        raise SystemExit(f"libraries the wheels need are missing from the image (add their packages): {missing}")


def install_wheelhouse(rootfs: Path) -> None:
    # The server serves these to workspaces whose agent downloads its dependencies; `make agent-bundle` built them.
    from protocol.agent_bundle import default_agent_wheelhouse

    source = default_agent_wheelhouse()
    if not source.is_dir():
        raise SystemExit(f"no agent wheelhouse at {source}: run `make agent-bundle` first")
    shutil.copytree(source, rootfs / WHEELHOUSE.lstrip("/"))


def add_user(rootfs: Path) -> None:
    """uid/gid 1000, written directly: useradd stamps today's date into /etc/shadow."""
    etc = rootfs / "etc"
    with (etc / "passwd").open("a") as passwd:
        passwd.write(f"slipway:x:{UID}:{GID}:Slipway:{HOME}:/usr/sbin/nologin\n")
    with (etc / "group").open("a") as group:
        group.write(f"slipway:x:{GID}:\n")
    with (etc / "shadow").open("a") as shadow:
        shadow.write("slipway:!:0::::::\n")
    for directory in (DATA_DIR, CACHE_DIR):
        path = rootfs / directory.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, UID, GID)
        path.chmod(0o750)


def scrub(rootfs: Path) -> None:
    """What varies between two builds and has no business in an image."""
    for pattern in ("var/log/**/*", "var/cache/ldconfig/aux-cache", "var/lib/dpkg/*-old", "etc/machine-id"):
        for path in rootfs.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()
    # mmdebstrap copies these from the build host; the container runtime mounts its own over them.
    for name in ("etc/hostname", "etc/resolv.conf"):
        path = rootfs / name
        if path.is_symlink():
            path.unlink()
        path.write_bytes(b"")
        path.chmod(0o644)
    for name in MOUNT_POINTS:
        path = rootfs / name
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


class Hashing:
    """A write-through file object that counts and hashes what passes."""

    def __init__(self, sink: Writable | None) -> None:
        self.sink, self.sha256, self.size = sink, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        if self.sink is not None:
            self.sink.write(data)
        return len(data)

    def flush(self) -> None:
        pass


def walk(root: Path) -> Iterator[Path]:
    """Every path under root in a fixed (sorted) order, directories before their contents."""
    for entry in sorted(os.scandir(root), key=lambda item: item.name):
        path = Path(entry.path)
        yield path
        if entry.is_dir(follow_symlinks=False):
            yield from walk(path)


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int


def write_tar(rootfs: Path, sink: Writable, epoch: int) -> None:
    """The rootfs as a tar stream, each member's time clamped to the epoch and its owner numeric only."""
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for path in walk(rootfs):
            mode = path.lstat().st_mode
            if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
                continue
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.mtime = min(int(info.mtime), epoch)
            info.uname = info.gname = ""
            if info.isreg() and not info.islnk():
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)


def write_layer(rootfs: Path, blobs: Path, epoch: int) -> tuple[Blob, str]:
    """The rootfs as one gzipped tar layer; returns it and its diff_id (the uncompressed tar's digest)."""
    partial = blobs / "layer.partial"
    with partial.open("wb") as out:
        compressed = Hashing(out)
        # mtime=0 and no file name: gzip's header is then the same every build.
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, compresslevel=6, mtime=0) as gz:
            uncompressed = Hashing(gz)
            write_tar(rootfs, uncompressed, epoch)
    digest = f"sha256:{compressed.sha256.hexdigest()}"
    partial.rename(blobs / digest.split(":")[1])
    return Blob(digest, compressed.size), f"sha256:{uncompressed.sha256.hexdigest()}"


def diff_id(rootfs: Path, epoch: int) -> str:
    """The layer's diff_id without compressing or writing it."""
    uncompressed = Hashing(None)
    write_tar(rootfs, uncompressed, epoch)
    return f"sha256:{uncompressed.sha256.hexdigest()}"


def image_config(commit: Commit, layer_diff_id: str) -> tuple[dict[str, str], dict[str, object]]:
    """The image's labels and its config document (which names the layer by its diff_id)."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(commit.epoch))
    labels = {
        "org.opencontainers.image.title": IMAGE_NAME,
        "org.opencontainers.image.version": commit.version,
        "org.opencontainers.image.revision": commit.revision,
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "AGPL-3.0-only",
    }
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{UID}:{GID}",
            "Entrypoint": ["/usr/local/bin/slipway"],
            "Cmd": ["server"],
            "WorkingDir": DATA_DIR,
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                f"HOME={HOME}",
                "LANG=C.UTF-8",
                "PYTHONDONTWRITEBYTECODE=1",
                f"SLIPWAY_DATA_DIR={DATA_DIR}",
                f"XDG_CACHE_HOME={CACHE_DIR}",
                # Listen on every interface: in a container, the loopback default is unreachable from outside.
                "SLIPWAY_ADDRESS=0.0.0.0:3000",
            ],
            "ExposedPorts": {"3000/tcp": {}},
            "Volumes": {DATA_DIR: {}, CACHE_DIR: {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_diff_id]},
        "history": [{"created": created, "created_by": "deploy/image/build.py"}],
    }
    return labels, config


def json_bytes(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def write_json_blob(blobs: Path, document: object) -> Blob:
    data = json_bytes(document)
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return Blob(f"sha256:{digest}", len(data))


def write_layout(rootfs: Path, layout: Path, commit: Commit) -> str:
    """An OCI image layout (image-spec 1.1) by hand: every byte of it is then ours to keep reproducible."""
    if layout.exists():
        shutil.rmtree(layout)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer, layer_diff_id = write_layer(rootfs, blobs, commit.epoch)
    labels, config_document = image_config(commit, layer_diff_id)
    config = write_json_blob(blobs, config_document)
    manifest = write_json_blob(
        blobs,
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **vars(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **vars(layer)}],
            "annotations": labels,
        },
    )
    descriptor = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **vars(manifest)}
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {**descriptor, "annotations": {"org.opencontainers.image.ref.name": tag}}
            for tag in (commit.version, "latest")
        ],
    }
    (layout / "index.json").write_bytes(json_bytes(index))
    return manifest.digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    parser.add_argument("--cache", type=Path, default=REPO / "dist" / "image-cache")
    parser.add_argument("--revision", default="HEAD", help="the commit to build (default: HEAD)")
    parser.add_argument("--debian-stage", type=Path, help="keep the Debian stage here and reuse it (see above)")
    parser.add_argument("--no-archive", action="store_true", help="write the OCI layout only, no docker archive")
    parser.add_argument(
        "--config-digest", action="store_true", help="print the image config's digest only; write no image"
    )
    parser.add_argument("--keep-rootfs", type=Path, help="leave the finished rootfs here (to compare two builds)")
    args = parser.parse_args()
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("build the image with Python 3.11: its wheels are fetched for Debian bookworm's python3")
    # Every file and directory the build creates takes its mode from the umask: a 002 umask would change the layer.
    os.umask(0o022)
    started = time.monotonic()
    commit = describe_commit(args.revision)
    log(f"slipway {commit.version} at {commit.revision[:12]}, SOURCE_DATE_EPOCH={commit.epoch}", started)
    wheels = args.cache / "wheels"
    fetch_wheels(runtime_pins(), wheels)
    log("dependency wheels ready", started)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="slipway-image-", dir=args.out) as scratch:
        work = Path(scratch)
        ours = our_wheel(commit, work)
        log(f"built {ours.name}", started)
        rootfs = work / "rootfs"
        reused = debian_rootfs(rootfs, commit, args.debian_stage)
        log(f"Debian rootfs {'copied from the stage' if reused else 'built'}", started)
        install_slipway(rootfs, wheels, ours, work / "source")
        check_shared_libraries(rootfs)
        install_wheelhouse(rootfs)
        add_user(rootfs)
        scrub(rootfs)
        log("Slipway installed", started)
        if args.keep_rootfs:
            shutil.rmtree(args.keep_rootfs, ignore_errors=True)
            shutil.move(rootfs, args.keep_rootfs)
            rootfs = args.keep_rootfs
        if args.config_digest:
            _labels, config = image_config(commit, diff_id(rootfs, commit.epoch))
            print(f"config sha256:{hashlib.sha256(json_bytes(config)).hexdigest()}", flush=True)
            log("config digest computed", started)
            return
        digest = write_layout(rootfs, args.out / "image", commit)
    log(f"OCI layout {args.out / 'image'}: {digest}", started)
    if args.no_archive:
        return
    archive = args.out / "slipway-image.tar"
    archive.unlink(missing_ok=True)
    run("skopeo", "copy", "--quiet", f"oci:{args.out / 'image'}:{commit.version}",
        f"docker-archive:{archive}:{IMAGE_NAME}:{commit.version}")  # fmt: skip
    log(f"docker archive {archive}", started)


if __name__ == "__main__":
    main()
