"""`CELERY_BROKER_URL` for RabbitMQ: one URL, or several nodes of one cluster in kombu's
failover syntax, `amqp://u:p@h1:5672/vh;amqp://u:p@h2:5672/vh` (ADR 0026).

Celery's workers hand the string to kombu, which splits it at `;` and moves to the next
URL when a connection fails (`broker_failover_strategy`, round robin by default); the
leader's publisher, the depth reads and the health check read it here, into the same
list. Pure: the settings validate the URL with it before Django is set up.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import unquote, urlsplit

AMQP_SCHEMES = ("amqp", "pyamqp", "amqps")


class AmqpNode(NamedTuple):
    host: str
    port: int
    userid: str
    password: str
    vhost: str
    ssl: bool

    @property
    def address(self) -> str:
        """`host:port` as py-amqp takes it (an IPv6 literal in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def split_urls(value: str) -> list[str]:
    """The elements of a `;`-separated URL list, stripped (kombu splits the same way)."""
    return [part.strip() for part in value.split(";")]


def is_amqp_url(value: str) -> bool:
    """Whether the (first) URL is RabbitMQ's; the settings refuse a list that mixes."""
    return split_urls(value)[0].split("://", 1)[0] in AMQP_SCHEMES


def amqp_nodes(value: str) -> list[AmqpNode]:
    """Every node of a RabbitMQ URL (list), in its order; `ValueError` with one line that
    names the bad element otherwise. Every element must be a full URL (kombu would give a
    bare host the first element's credentials and port: explicit is clearer) and all must
    name the same vhost (a worker failing over to another vhost would consume queues the
    leader does not publish to)."""
    urls = split_urls(value)
    nodes = []
    for position, url in enumerate(urls, start=1):
        where = f"element {position} of {len(urls)}" if len(urls) > 1 else "the URL"
        if not url:
            raise ValueError(f"{where} is empty (a stray ';'?)")
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in AMQP_SCHEMES:
            raise ValueError(
                f"{where}, {_safe(url)!r}, is not a RabbitMQ URL (amqp://user:password@host:port/vhost)"
            )
        parts = urlsplit(url)
        try:
            port = parts.port or 5672
        except ValueError:
            # not echoed: a password holding a raw ':' or ';' would show up as the "port"
            raise ValueError(
                f"{where} has a port that is not a number (or an unquoted ';' or"
                " ':' in its password: percent-encode them)"
            ) from None
        nodes.append(
            AmqpNode(
                host=parts.hostname or "127.0.0.1",  # `amqp://`: this machine, as before
                port=port,
                userid=unquote(parts.username or "guest"),
                password=unquote(parts.password or "guest"),
                vhost=unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
                ssl=scheme == "amqps",
            )
        )
    vhosts = {node.vhost for node in nodes}
    if len(vhosts) > 1:
        raise ValueError(f"the URLs name different vhosts {sorted(vhosts)}: one cluster, one vhost")
    return nodes


def _safe(url: str) -> str:
    """The URL without its credentials, for an error message: everything between `://`
    and the last `@` is masked, whether or not it parses."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
