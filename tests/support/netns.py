"""A host of its own for a process under test: a network namespace joined to this one by an emulated link that a
test can cut (a partition) or degrade (delay and loss), packet by packet, while real TCP runs over it.

The link is two TUN devices and a thread that carries IP packets between them: one device stays here, holding the
address a server listens on; the other is moved into the namespace. `tc qdisc ... netem` would do the same on a veth
pair, but the kernels these tests run on are built without it (``CONFIG_NET_SCH_NETEM`` is not set), while TUN and
network namespaces are always there; the kernel's TCP on both ends sees the same thing either way.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import random
import re
import secrets
import selectors
import signal
import struct
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import TracebackType

_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
# 10.231.0.0/16 is private and unused here; each link takes one /30 of it (the host's end .1, the namespace's .2).
_LINK_NETWORK = ipaddress.IPv4Network("10.231.0.0/16")


def _ip(*args: str) -> None:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise AssertionError("these tests need the `ip` command (iproute2); they do not skip without it") from None
    if done.returncode != 0:
        raise AssertionError(
            f"`ip {' '.join(args)}` failed ({done.stderr.strip()}): these tests need root, network namespaces and "
            "TUN devices (/dev/net/tun); they do not skip without them"
        )


@dataclass(frozen=True)
class Faults:
    """What happens to each packet, in each direction: ``delay`` seconds late, ``loss`` the share dropped.
    ``partitioned`` drops every packet (as `netem loss 100%` on both ends)."""

    delay: float = 0.0
    loss: float = 0.0
    partitioned: bool = False


HEALTHY = Faults()


class _Direction:
    """Packets on their way from one device to the other, each with the time it is due."""

    def __init__(self, source: int, target: int) -> None:
        self.source, self.target = source, target
        self.queue: deque[tuple[float, bytes]] = deque()
        self.carried = self.dropped = 0


class EmulatedLink:
    """The wire between this host and the namespace; :meth:`apply` changes its faults at any time."""

    def __init__(self, host_fd: int, namespace_fd: int, seed: int) -> None:
        self.faults = HEALTHY
        self._random = random.Random(seed)  # a fault test's losses can be replayed from its seed
        self._directions = {host_fd: _Direction(host_fd, namespace_fd), namespace_fd: _Direction(namespace_fd, host_fd)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._carry, name="emulated-link", daemon=True)

    def apply(self, faults: Faults) -> None:
        self.faults = faults

    @property
    def dropped(self) -> int:
        return sum(direction.dropped for direction in self._directions.values())

    @property
    def carried(self) -> int:
        return sum(direction.carried for direction in self._directions.values())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _carry(self) -> None:
        selector = selectors.DefaultSelector()
        for fd in self._directions:
            selector.register(fd, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                due = [direction.queue[0][0] for direction in self._directions.values() if direction.queue]
                # Wake for the next packet due, and at least every 0.1 s to notice stop().
                timeout = max(0.0, min([*due, time.monotonic() + 0.1]) - time.monotonic())
                for key, _ in selector.select(timeout):
                    self._receive(self._directions[int(key.fd)])
                now = time.monotonic()
                for direction in self._directions.values():
                    while direction.queue and direction.queue[0][0] <= now:
                        _, packet = direction.queue.popleft()
                        with contextlib.suppress(OSError):  # the other device is going away: the packet is lost
                            os.write(direction.target, packet)
        finally:
            selector.close()

    def _receive(self, direction: _Direction) -> None:
        while True:
            try:
                packet = os.read(direction.source, 65536)
            except (BlockingIOError, OSError):
                return
            faults = self.faults
            if faults.partitioned or self._random.random() < faults.loss:
                direction.dropped += 1
                continue
            direction.carried += 1
            direction.queue.append((time.monotonic() + faults.delay, packet))


def _tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 no address of this host is in (other test runs on the machine may hold links of their own)."""
    listed = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    taken = set(re.split(r"[\s/]+", listed))
    subnets = list(_LINK_NETWORK.subnets(new_prefix=30))
    while True:
        subnet = subnets[secrets.randbelow(len(subnets))]
        if str(subnet[1]) not in taken and str(subnet[2]) not in taken:
            return subnet


class IsolatedHost:
    """A network namespace whose only way out is an :class:`EmulatedLink` to this host. ``server_address`` is this
    host's end (bind a server to it); :meth:`command` runs a program inside. Leaving the ``with`` kills what still
    runs inside and removes the namespace and the link, whatever the test did."""

    def __init__(self, seed: int | None = None) -> None:
        token = secrets.token_hex(4)
        self.namespace = f"slipway-{token}"
        self._devices = (f"sw{token}h", f"sw{token}n")  # at most 15 characters, unique per run
        subnet = _free_subnet()
        self.server_address, self.address = str(subnet[1]), str(subnet[2])
        self._prefix = subnet.prefixlen
        self.seed = secrets.randbits(32) if seed is None else seed
        self.link: EmulatedLink | None = None
        self._fds: list[int] = []

    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def apply(self, faults: Faults) -> None:
        assert self.link is not None
        self.link.apply(faults)

    def __enter__(self) -> IsolatedHost:
        try:
            self._create()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._remove()

    def _create(self) -> None:
        _ip("netns", "add", self.namespace)
        _ip("-n", self.namespace, "link", "set", "lo", "up")
        host, inside = self._devices
        try:
            self._fds = [_tun(host), _tun(inside)]
        except OSError as exc:
            raise AssertionError(f"cannot create a TUN device ({exc}): these tests need /dev/net/tun") from exc
        _ip("link", "set", inside, "netns", self.namespace)
        _ip("addr", "add", self.server_address, "peer", f"{self.address}/{self._prefix}", "dev", host)
        _ip("link", "set", host, "up")
        _ip(
            "-n",
            self.namespace,
            "addr",
            "add",
            self.address,
            "peer",
            f"{self.server_address}/{self._prefix}",
            "dev",
            inside,
        )
        _ip("-n", self.namespace, "link", "set", inside, "up")
        self.link = EmulatedLink(self._fds[0], self._fds[1], self.seed)
        self.link.start()

    def _remove(self) -> None:
        listed = subprocess.run(["ip", "netns", "pids", self.namespace], capture_output=True, text=True, check=False)
        for pid in listed.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        if self.link is not None:
            self.link.stop()
        for fd in self._fds:  # a TUN device goes with its last descriptor
            os.close(fd)
        self._fds = []
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, check=False)
