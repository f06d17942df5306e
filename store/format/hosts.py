"""Born/store host addresses as RocketMQ writes them: 4- or 16-byte address + int32 port (FORMAT §3)."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Any

_PORT = struct.Struct(">i")


def _java_ipv6_text(packed: bytes) -> str:
    # Inet6Address.getHostAddress(): eight lower-case hex groups, no '::' compression, no zero padding.
    return ":".join(f"{int.from_bytes(packed[i:i + 2], 'big'):x}" for i in range(0, 16, 2))


@dataclass(frozen=True)
class HostAddress:
    """An IP address and port; IPv6 when the text form contains ':'."""

    ip: str
    port: int

    @property
    def ipv6(self) -> bool:
        return ":" in self.ip

    def to_bytes(self) -> bytes:
        """8 bytes for IPv4, 20 for IPv6: the address then the port as a big-endian int32."""
        addr = ipaddress.ip_address(self.ip.split("%", 1)[0])
        return addr.packed + _PORT.pack(_to_int32(self.port))

    @classmethod
    def parse(cls, s: "str | dict[str, Any] | HostAddress") -> "HostAddress":
        """Accepts "a.b.c.d:port", "[v6]:port" or {"ip", "port"}.

        Like Java's InetAddress, an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is an IPv4 address,
        and IPv6 text is normalised to Java's getHostAddress() form so parse and from_bytes agree.
        """
        if isinstance(s, HostAddress):
            return s
        if isinstance(s, dict):
            ip, port = str(s["ip"]), int(s["port"])
        else:
            text = s.strip()
            if text.startswith("["):
                close = text.find("]")
                if close < 0 or not text[close + 1:].startswith(":"):
                    raise ValueError(f"host {s!r}: expected '[ipv6]:port'")
                ip, port = text[1:close], int(text[close + 2:])
            else:
                ip, sep, port_text = text.rpartition(":")
                if not sep or ":" in ip:
                    raise ValueError(f"host {s!r}: expected 'a.b.c.d:port' or '[ipv6]:port'")
                port = int(port_text)
        try:
            addr = ipaddress.ip_address(ip.split("%", 1)[0])
        except ValueError as exc:
            raise ValueError(f"host {s!r}: {exc}") from None
        if isinstance(addr, ipaddress.IPv6Address):
            mapped = addr.ipv4_mapped
            ip = str(mapped) if mapped is not None else _java_ipv6_text(addr.packed)
        else:
            ip = str(addr)
        return cls(ip, port)

    @classmethod
    def from_bytes(cls, b: bytes | bytearray | memoryview) -> "HostAddress":
        b = bytes(b)
        if len(b) == 8:
            return cls(".".join(str(x) for x in b[:4]), _PORT.unpack_from(b, 4)[0])
        if len(b) == 20:
            return cls(_java_ipv6_text(b[:16]), _PORT.unpack_from(b, 16)[0])
        raise ValueError(f"host address is {len(b)} bytes; expected 8 (IPv4) or 20 (IPv6)")

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if self.ipv6 else f"{self.ip}:{self.port}"


def _to_int32(v: int) -> int:
    # Java writes the port with putInt: keep the low 32 bits, as a signed value.
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v
