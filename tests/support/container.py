"""Slipway's OCI image, built by deploy/image/build.py and run with real podman.

podman is configured for this machine in a directory of its own (never the host's /etc/containers or storage):
crun refuses this host's hybrid cgroups ("cgroups in hybrid mode not supported"), runc with the cgroupfs manager
runs; containers share the host's network, so a containerised server reaches the test PostgreSQL and Redis on
127.0.0.1 as it would reach them by their service names in a cluster; podman's default ulimits (a million open
files) are above this host's hard limits, so containers get the test's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "deploy" / "image" / "build.py"

CONTAINERS_CONF = """\
[containers]
netns = "host"
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def build_image(out: Path, *options: str) -> tuple[float, str]:
    """Build the image into ``out`` (image/ and slipway-image.tar, unless ``options`` say otherwise, e.g.
    --debian-stage DIR, --config-digest); returns the seconds it took and what the build printed."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--out", str(out), "--cache", str(REPO / "dist" / "image-cache"), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert result.returncode == 0, result.stdout
    return time.monotonic() - started, result.stdout


def layer_differences(layout: Path, rootfs: Path, epoch: int) -> list[str]:
    """The paths whose type, mode, owner, clamped time or content differ between the image's (single) layer and an
    unpacked rootfs: what makes two builds' digests differ, named."""
    _index, manifest, _config = read_layout(layout)
    blob = layout / "blobs" / "sha256" / manifest["layers"][0]["digest"].split(":")[1]
    layer: dict[str, tuple[object, ...]] = {}
    with tarfile.open(blob, mode="r|gz") as tar:
        for member in tar:
            content = member.linkname
            if member.isreg() and not member.islnk():
                reader = tar.extractfile(member)
                content = hashlib.sha256(reader.read() if reader else b"").hexdigest()
            layer[member.name] = (oct(member.mode & 0o7777), member.uid, member.gid, member.mtime, content)
    unpacked: dict[str, tuple[object, ...]] = {}
    first_names: dict[tuple[int, int], str] = {}
    # Sorted paths compare part by part: the build's order, so a hard link's first name is the one the tar keeps.
    for path in sorted(rootfs.rglob("*")):
        info = path.lstat()
        if stat.S_ISSOCK(info.st_mode) or stat.S_ISFIFO(info.st_mode):
            continue
        name = str(path.relative_to(rootfs))
        if path.is_symlink():
            content = os.readlink(path)
        elif stat.S_ISREG(info.st_mode) and info.st_nlink > 1 and (info.st_dev, info.st_ino) in first_names:
            content = first_names[(info.st_dev, info.st_ino)]  # the tar's hard link names its first path
        elif stat.S_ISREG(info.st_mode):
            first_names[(info.st_dev, info.st_ino)] = name
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            content = ""
        mtime = min(int(info.st_mtime), epoch)
        unpacked[name] = (oct(info.st_mode & 0o7777), info.st_uid, info.st_gid, mtime, content)
    return [
        f"{name}: {layer.get(name)} != {unpacked.get(name)}"
        for name in sorted(set(layer) | set(unpacked))
        if layer.get(name) != unpacked.get(name)
    ]


def read_layout(layout: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The OCI layout's index, the manifest it points to and the image config, read as the spec lays them out."""

    def blob(digest: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((layout / "blobs" / "sha256" / digest.split(":")[1]).read_text())
        return data

    index: dict[str, Any] = json.loads((layout / "index.json").read_text())
    manifest = blob(index["manifests"][0]["digest"])
    return index, manifest, blob(manifest["config"]["digest"])


class Podman:
    """podman with its own containers.conf and storage under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "containers.conf").write_text(CONTAINERS_CONF)
        (root / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{root / "storage"}"\nrunroot = "{root / "run"}"\n'
        )
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(root / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
        }
        # podman's defaults (a million open files and processes) exceed this host's hard limits, and runc is refused
        # even the host's own process limit: the host's open-file limit, and processes enough for a server.
        _soft, files = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.ulimits = ("--ulimit", f"nofile={files}:{files}", "--ulimit", "nproc=4096:4096")

    def __call__(self, *args: str, timeout: float = 300.0) -> str:
        result = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"podman {' '.join(args)}: {result.stderr}"
        return result.stdout.strip()

    def load(self, layout: Path, tag: str = "latest") -> str:
        """Copy the image from the OCI layout into this podman's storage; returns its image id."""
        return self("pull", "--quiet", f"oci:{layout}:{tag}").splitlines()[-1]

    def run(self, image: str, name: str, *args: str, env: dict[str, str], log: Path) -> Container:
        """`podman run` in the foreground (it forwards signals to the container); the image's own user,
        entrypoint and working directory; a read-only root filesystem, as the charts run it."""
        options = [f"--env={key}={value}" for key, value in sorted(env.items())]
        command = ["podman", "run", "--rm", "--name", name, "--read-only", *self.ulimits, *options, image, *args]
        with log.open("ab") as out:
            process = subprocess.Popen(command, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        return Container(self, name, process, log)

    def close(self) -> None:
        subprocess.run(["podman", "rm", "--all", "--force"], env=self.env, capture_output=True, timeout=120)
        # podman keeps its overlay directory mounted on itself (a private mount); with no container left, that
        # is the only mount, and deleting the storage is quicker than `podman system reset` (25 s here).
        subprocess.run(["umount", str(self.root / "storage" / "overlay")], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


class Container:
    def __init__(self, podman: Podman, name: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.podman, self.name, self.process, self.log_path = podman, name, process, log
        self.url = ""  # where it serves, for a server

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """Until /healthz answers 200; fails at once, with the log, if the container exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"container {self.name} exited {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"{self.url}/healthz did not answer 200 within {timeout:.0f} s:\n{self.log()}")

    def exec(self, *args: str) -> str:
        return self.podman("exec", self.name, *args)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as Kubernetes stops a pod; kill only if it does not end in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                subprocess.run(["podman", "kill", self.name], env=self.podman.env, capture_output=True)
                self.process.wait(timeout=30)
        return self.process.returncode
