"""Ports and the loopback interface: where the ranks of a local run meet, on this machine only."""

from __future__ import annotations

import socket
import sys

from ..arguments import check_int

__all__ = ["check_port", "free_port", "loopback_interface", "port_is_free"]


def check_port(port) -> int:
    """``port`` as a TCP port number, or a ``ValueError`` naming it."""
    return check_int("port", port, "a TCP port number from 1 to 65535", low=1, high=65535)


def loopback_interface() -> str:
    """The name of the loopback network interface: ``lo`` on Linux, ``lo0`` on macOS."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        names = []
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return "lo0" if sys.platform == "darwin" else "lo"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now: the operating system's answer to binding port 0."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """True when nothing listens on ``port``, on loopback or on any address (where the store binds)."""
    port = check_port(port)
    for host in ("127.0.0.1", ""):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True
