"""The transport ranks used, no torch: this process's TCP connections and their interfaces
(gloo, the probe's record), and NCCL's own account of its channels (from an NCCL_DEBUG=INFO log,
read on the host by the bench and the GPU check)."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import re
import socket
import struct
import subprocess
from pathlib import Path

_TCP_ESTABLISHED = "01"


def _hex_ip(hexaddr: str) -> str:
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # IPv6: four 32-bit words, each in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    ip = ipaddress.IPv6Address(words)
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


def parse_proc_net_tcp(text: str) -> list[dict]:
    """Rows of /proc/net/tcp{,6}: [{local_ip, local_port, remote_ip, remote_port, state, inode}]."""
    rows = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        (lip, lport), (rip, rport) = f[1].split(":"), f[2].split(":")
        rows.append(
            {
                "local_ip": _hex_ip(lip),
                "local_port": int(lport, 16),
                "remote_ip": _hex_ip(rip),
                "remote_port": int(rport, 16),
                "state": f[3],
                "inode": int(f[9]),
            }
        )
    return rows


def parse_ip_addr(text: str) -> dict[str, str]:
    """`ip -o addr` output -> {address: interface}."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] in ("inet", "inet6"):
            out[f[3].split("/")[0]] = f[1].rstrip(":").split("@")[0]
    return out


def _socket_inodes(pid: str = "self") -> set[int]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def interface_addresses() -> dict[str, str]:
    """This network namespace's addresses -> interface name."""
    try:
        res = subprocess.run(
            ["ip", "-o", "addr"], capture_output=True, text=True, timeout=5, check=True
        )
        found = parse_ip_addr(res.stdout)
        if found:
            return found
    except (OSError, subprocess.SubprocessError):
        pass
    found = {}
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                res = fcntl.ioctl(s.fileno(), siocgifaddr, req)
                found[socket.inet_ntoa(res[20:24])] = name
            except OSError:
                continue
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                p = line.split()
                if len(p) >= 6:
                    found[str(ipaddress.IPv6Address(bytes.fromhex(p[0])))] = p[5]
    except OSError:
        pass
    return found


def _interface_of(ip: str, addrs: dict[str, str]) -> str | None:
    if ip in addrs:
        return addrs[ip]
    if ipaddress.ip_address(ip).is_loopback:
        return next((n for a, n in addrs.items() if ipaddress.ip_address(a).is_loopback), "lo")
    return None


def tcp_connections(master_port: int | None, pid: str = "self") -> list[dict]:
    """This process's ESTABLISHED TCP connections, each with interface, kind and loopback."""
    inodes = _socket_inodes(pid)
    addrs = interface_addresses()
    conns = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            text = Path(table).read_text()
        except OSError:
            continue
        for r in parse_proc_net_tcp(text):
            if r["state"] != _TCP_ESTABLISHED or r["inode"] not in inodes:
                continue
            store = master_port is not None and master_port in (r["local_port"], r["remote_port"])
            remote_local = ipaddress.ip_address(r["remote_ip"]).is_loopback or (
                r["remote_ip"] in addrs
            )
            conns.append(
                {
                    "local": f"{r['local_ip']}:{r['local_port']}",
                    "remote": f"{r['remote_ip']}:{r['remote_port']}",
                    "interface": _interface_of(r["local_ip"], addrs),
                    "kind": "store" if store else "collective",
                    "loopback": remote_local,
                }
            )
    return sorted(conns, key=lambda c: (c["kind"], c["local"], c["remote"]))


def transport_info(rank: int, master_port: int | None) -> dict:
    conns = tcp_connections(master_port)
    coll = [c for c in conns if c["kind"] == "collective"]
    ifaces = sorted({c["interface"] or "?" for c in coll})
    return {
        "rank": rank,
        "hostname": socket.gethostname(),
        "interface": ",".join(ifaces) if ifaces else None,
        "interfaces": ifaces,
        "local": sorted({c["local"].rsplit(":", 1)[0] for c in coll}),
        "peers": [c["remote"] for c in coll],
        "loopback": bool(coll) and all(c["loopback"] for c in coll),
        "store": [c["remote"] for c in conns if c["kind"] == "store"],
        "connections": conns,
        "nccl_debug": os.environ.get("NCCL_DEBUG"),
    }


# NCCL names each channel's transport when it connects the ring/tree peers, at INFO level under
# the INIT subsystem (NCCL src/transport/p2p.cc, shm.cc, net.cc):
#   "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"   (P2P/CUMEM/read, P2P/direct pointer)
#   "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"
#   "NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0"   (NET/IB/0/GDRDMA ...)
_NCCL_CHANNEL = re.compile(
    r"NCCL INFO Channel \d+/\d+ : .*?\bvia\s+([A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)?)"
)


def parse_nccl_transport(text: str) -> list[str]:
    """NCCL's transports from an ``NCCL_DEBUG=INFO`` log, unique, in order of first appearance:
    the kind and its mechanism (``P2P/IPC``, ``P2P/CUMEM``, ``SHM/direct``, ``NET/Socket``,
    ``NET/IB``), without device index, read/write mode or GDR. Empty when no channel line is
    there (one rank, or NCCL_DEBUG not INFO)."""
    seen: list[str] = []
    for line in text.splitlines():
        m = _NCCL_CHANNEL.search(line)
        if m and m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def probe_transport(probe: dict | None) -> list[str]:
    """``backend/interface`` strings from a probe.json (e.g. ``gloo/lo``, ``gloo/eth0``); a
    connection bound to another interface but staying inside its network namespace (the probe's
    ``loopback``: gloo binds the hostname's address, and the kernel carries traffic between
    local addresses over lo) reads ``gloo/eth0 via lo``."""
    if not probe:
        return []
    out = set()
    for t in probe.get("transport") or []:
        iface = t.get("interface")
        via = " via lo" if t.get("loopback") else ""
        for i in (iface or "").split(","):
            if i:
                out.add(f"{probe.get('backend', '?')}/{i}" + (via if i != "lo" else ""))
    return sorted(out)
