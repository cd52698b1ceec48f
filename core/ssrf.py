"""The SSRF guard for tenant-supplied URLs.

Pure library: no Django. The worker passes the operator allow-list in
(``SCHEDULER_HTTP_ALLOW_NETWORKS`` parsed by :func:`parse_allow_networks`).

Steps: :func:`check_url_syntax` parses strictly (and :func:`check_saved_url`, when a job
is saved, also refuses address literals in refused ranges);
:func:`resolve_destination` resolves the host once, to all its addresses, and refuses the
URL if ANY address is in a refused range that the allow-list does not cover. The caller
then connects to one of ``Destination.addresses`` (pinning), never to the name again.

Messages: ``str(RefusedDestination)`` names the host as the tenant wrote it (normalised)
and the category of the refused address, but never the address a *name* resolved to:
telling a tenant "db.internal resolves to 10.2.3.4" would map the operator's private
network for them. The address is kept on ``exc.address`` for operator logs only.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
AllowList = tuple[IPNetwork, ...]
Resolver = Callable[[str, int], list[str]]

SCHEMES = {"http": 80, "https": 443}
MAX_URL_LENGTH = 4096

_net = ipaddress.ip_network

# Cloud metadata endpoints: checked first so the reason is the specific one.
# AWS/GCP/Azure/OpenStack, AWS over IPv6, AWS ECS task metadata, Alibaba Cloud.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)

# Ordered: the first matching category names the reason. `ipaddress` flags cover most of
# them; the explicit networks give precise reasons and cover what the flags miss
# (Python 3.11 calls 100.64/10 neither private nor global, and fec0::/10 global).
_CATEGORY_NETWORKS: tuple[tuple[str, tuple[IPNetwork, ...]], ...] = (
    ("unspecified", (_net("0.0.0.0/8"), _net("::/128"))),
    ("loopback", (_net("127.0.0.0/8"), _net("::1/128"))),
    ("link_local", (_net("169.254.0.0/16"), _net("fe80::/10"))),
    ("multicast", (_net("224.0.0.0/4"), _net("ff00::/8"))),
    ("broadcast", (_net("255.255.255.255/32"),)),
    ("carrier_grade_nat", (_net("100.64.0.0/10"),)),
    ("benchmarking", (_net("198.18.0.0/15"), _net("2001:2::/48"))),
    (
        "documentation",
        (
            _net("192.0.2.0/24"),
            _net("198.51.100.0/24"),
            _net("203.0.113.0/24"),
            _net("2001:db8::/32"),
            _net("3fff::/20"),
        ),
    ),
    (
        "private_address",
        (
            _net("10.0.0.0/8"),
            _net("172.16.0.0/12"),
            _net("192.168.0.0/16"),
            _net("fc00::/7"),
            _net("fec0::/10"),  # deprecated site-local, still routed inside some networks
        ),
    ),
    ("reserved", (_net("240.0.0.0/4"),)),
    # IETF protocol assignments; Python 3.11.7 calls parts of it global (fixed in 3.11.10).
    ("not_global", (_net("192.0.0.0/24"),)),
)

_REASON_WORDS = {
    "metadata": "a cloud metadata address",
    "unspecified": "an unspecified address",
    "loopback": "a loopback address",
    "link_local": "a link-local address",
    "multicast": "a multicast address",
    "broadcast": "the broadcast address",
    "carrier_grade_nat": "a carrier-grade NAT (100.64.0.0/10) address",
    "benchmarking": "a benchmarking address",
    "documentation": "a documentation-only address",
    "private_address": "a private-network address",
    "reserved": "a reserved address",
    "not_global": "an address that is not globally reachable",
}

_NAT64 = _net("64:ff9b::/96")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_HOST_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


class RefusedDestination(Exception):
    """A URL the scheduler will not call. ``reason`` is a short machine-readable code."""

    def __init__(
        self, reason: str, message: str, *, host: str | None = None, address: str | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.host = host
        self.address = address  # for operator logs only; never shown to the tenant


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str  # normalised: lowercase, IDNA A-labels, IPv4 number forms as dotted quads
    port: int
    addresses: tuple[str, ...]  # checked addresses in resolver order; connect to these only
    path_and_query: str


# --- allow-list -------------------------------------------------------------------------


def parse_allow_networks(value: str | Sequence[str] | None) -> AllowList:
    """Parse the operator allow-list: comma-separated CIDRs (or bare addresses)."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    networks = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            # strict: "10.1.2.3/8" is more likely a typo for /32 than a wish for 10/8.
            networks.append(ipaddress.ip_network(item, strict=True))
        except ValueError as exc:
            raise ValueError(
                f"allow-list entry {item!r} is not a valid network in CIDR form ({exc})"
            ) from None
    return tuple(networks)


def _covered(address: IPAddress, allow: AllowList) -> bool:
    if any(address in network for network in allow):
        return True
    # ::ffff:a.b.c.d *is* a.b.c.d on a dual-stack socket, so the IPv4 entry covers it.
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped is not None and any(mapped in network for network in allow)


# --- address classification --------------------------------------------------------------


def refused_reason(address: IPAddress, allow: AllowList) -> str | None:
    """The reason code why ``address`` is refused, or None if it may be called."""
    if _covered(address, allow):
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return refused_reason(address.ipv4_mapped, allow)
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = _category(embedded)
            if inner is not None:
                return inner
            # NAT64 and 6to4 of a public IPv4 address are how IPv6-only networks reach the
            # IPv4 internet (DNS64 answers 64:ff9b::/96 for every IPv4-only name).
            if address in _NAT64 or address.sixtofour is not None:
                return None
    return _category(address)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address carried inside NAT64, 6to4, Teredo or IPv4-compatible forms."""
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # (server, client): the client is where packets go
    if int(address) >> 32 == 0 and int(address) > 1:  # ::a.b.c.d, deprecated compat form
        return ipaddress.IPv4Address(int(address))
    return None


def _category(address: IPAddress) -> str | None:
    if address in METADATA_ADDRESSES:
        return "metadata"
    for reason, networks in _CATEGORY_NETWORKS:
        if any(address in network for network in networks):
            return reason
    # The flags catch what the table does not name (e.g. 192.0.0.0/24, 2001::/23).
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link_local"
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified:
        return "unspecified"
    if address.is_reserved:
        return "reserved"
    if address.is_private or not address.is_global:
        return "not_global"
    return None


# --- URL syntax ------------------------------------------------------------------------


def check_url_syntax(url: str) -> tuple[str, str, int, str]:
    """Strictly parse ``url``: (scheme, normalised host, port, path_and_query).

    Raises RefusedDestination (reasons bad_url, bad_scheme, userinfo, missing_host,
    bad_host, bad_port). Used both at job-save time and before every request.
    """
    _check_characters(url)
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced or invalid [IPv6] literal
        raise RefusedDestination("bad_host", "the URL's host is not valid") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        shown = f"{scheme!r}" if scheme else "none"
        raise RefusedDestination(
            "bad_scheme", f"only http and https URLs can be called (scheme: {shown})"
        )
    if "@" in parts.netloc:
        raise RefusedDestination(
            "userinfo", "URLs with a user name or password (user@host) are not allowed"
        )
    if not parts.hostname:
        raise RefusedDestination("missing_host", "the URL has no host")
    host = normalise_host(parts.hostname)
    port = _port(parts)
    path_and_query = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return scheme, host, port, path_and_query


def _check_characters(url: str) -> None:
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    if len(url) > MAX_URL_LENGTH:
        raise RefusedDestination("bad_url", f"the URL is longer than {MAX_URL_LENGTH} characters")
    # urlsplit silently strips some of these, and parsers disagree about "\" (WHATWG
    # reads it as "/"), which is how "http://ok.example\@internal/" tricks are built.
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in url):
        raise RefusedDestination(
            "bad_url", "the URL contains whitespace, control characters or backslashes"
        )


def _port(parts) -> int:
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port is None:
        return SCHEMES[parts.scheme.lower()]
    if not 1 <= port <= 65535:
        raise RefusedDestination("bad_port", "the URL's port must be a number from 1 to 65535")
    return port


def normalise_host(hostname: str) -> str:
    """Lowercase, IDNA-encode and canonicalise IP literals; RefusedDestination if invalid."""
    if ":" in hostname or "%" in hostname:  # only bracketed IPv6 literals contain ":"
        return _ipv6_literal(hostname)
    host = hostname[:-1] if hostname.endswith(".") else hostname  # FQDN trailing dot
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            raise _bad_host(hostname) from None
    host = host.lower()
    labels = host.split(".")
    # After IDNA, as UTS 46 maps full-width digits to ASCII ones.
    if all(_NUMERIC_LABEL.match(label) for label in labels):
        return str(_ipv4_number_form(labels, hostname))
    if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
        raise _bad_host(hostname)
    return host


def _ipv6_literal(hostname: str) -> str:
    try:
        if "%" in hostname:  # zone ids are meaningless off-box and confuse URL building
            raise ValueError
        return str(ipaddress.IPv6Address(hostname))
    except ValueError:
        raise _bad_host(hostname) from None


def _ipv4_number_form(labels: list[str], original: str) -> ipaddress.IPv4Address:
    """inet_aton rules, as getaddrinfo and browsers apply them: 2130706433, 0x7f.1, 127.1,
    0177.0.0.1 all mean 127.0.0.1. An all-numeric host that is not a valid one is refused
    rather than sent to DNS, where a resolver might read it differently."""
    try:
        if len(labels) > 4:
            raise ValueError
        numbers = [_inet_aton_number(label) for label in labels]
        *head, last = numbers
        if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
            raise ValueError
    except ValueError:
        raise _bad_host(original) from None
    value = last
    for index, number in enumerate(head):
        value += number << (24 - 8 * index)
    return ipaddress.IPv4Address(value)


def _inet_aton_number(label: str) -> int:
    if label.startswith("0x"):
        return int(label[2:] or "0", 16)
    if len(label) > 1 and label.startswith("0"):
        return int(label, 8)  # ValueError for 08, 09: refused, not guessed
    return int(label)


def _bad_host(hostname: str) -> RefusedDestination:
    return RefusedDestination("bad_host", f"{hostname!r} is not a valid host name", host=hostname)


# --- save time ---------------------------------------------------------------------------

# RFC 6761: `localhost` and the names under it are loopback, whatever a resolver says.
_LOCALHOST_ADDRESSES = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


def check_saved_url(url: str, *, allow: AllowList) -> tuple[str, str, int, str]:
    """The check when a job is saved: the syntax, and a host that is an address literal
    (or `localhost`) in a refused range is refused now, with the reason, rather than at
    its first run. A name is not resolved here: its DNS answers may change before a run,
    which :func:`resolve_destination` checks again at send time."""
    parts = check_url_syntax(url)
    host = parts[1]
    literal = _ip_or_none(host)
    if literal is not None:
        candidates: tuple[IPAddress, ...] = (literal,)
    elif host == "localhost" or host.endswith(".localhost"):
        candidates = _LOCALHOST_ADDRESSES
    else:
        return parts
    for address in candidates:
        reason = refused_reason(address, allow)
        if reason is not None:
            raise _refused_address(reason, host, address, literal=True)
    return parts


# --- resolution ---------------------------------------------------------------------------


def system_resolver(host: str, port: int) -> list[str]:
    """All addresses of ``host`` (every family), in the system resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def resolve_destination(
    url: str, *, allow: AllowList, resolver: Resolver | None = None
) -> Destination:
    """Check ``url`` and resolve its host once; refuse if ANY address is refused."""
    scheme, host, port, path_and_query = check_url_syntax(url)
    literal = _ip_or_none(host)
    texts = [host] if literal is not None else _resolve(host, port, resolver or system_resolver)
    addresses: list[str] = []
    for text in texts:
        address = _parse_resolved(text, host)
        reason = refused_reason(address, allow)
        if reason is not None:
            raise _refused_address(reason, host, address, literal is not None)
        addresses.append(str(_connectable(address)))
    return Destination(scheme, host, port, tuple(dict.fromkeys(addresses)), path_and_query)


def _resolve(host: str, port: int, resolver: Resolver) -> list[str]:
    try:
        texts = list(resolver(host, port))
    except (OSError, UnicodeError):  # socket.gaierror is an OSError
        texts = []
    if not texts:
        raise RefusedDestination(
            "unresolvable", f"the host {host!r} could not be resolved", host=host
        )
    return texts


def _ip_or_none(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _parse_resolved(text: str, host: str) -> IPAddress:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        raise RefusedDestination(
            "unresolvable", f"the host {host!r} resolved to something that is not an address"
        ) from None


def _connectable(address: IPAddress) -> IPAddress:
    # Connect to ::ffff:a.b.c.d as plain IPv4: it works without a dual-stack socket.
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def _refused_address(
    reason: str, host: str, address: IPAddress, literal: bool
) -> RefusedDestination:
    words = _REASON_WORDS.get(reason, "a refused address")
    if literal:
        message = f"{host} is {words}, which the scheduler does not call"
    else:
        message = f"the host {host!r} resolves to {words}, which the scheduler does not call"
    return RefusedDestination(reason, message, host=host, address=str(address))
