"""What signing and secret headers add to one HTTP delivery, in microseconds (in-process,
no services): the Standard Webhooks signature per body size and number of secrets, opening
sealed header values, and redacting a kept response excerpt."""

from __future__ import annotations

import statistics
import timeit

from cryptography.fernet import Fernet

from core.encryption import Keyring
from core.redaction import redact
from core.webhook_signing import generate_secret, webhook_headers
from jobs.headers import open_headers


def _us(func, number: int, repeats: int) -> float:
    times = timeit.repeat(func, number=number, repeat=repeats)
    return round(statistics.median(times) / number * 1e6, 2)


def run(number: int = 5000, repeats: int = 5) -> dict:
    one, two = [generate_secret()], [generate_secret(), generate_secret()]
    out: dict = {"sign_us": {}}
    for size in (1024, 65536):
        body = b"x" * size
        for label, secrets in (("1 secret", one), ("2 secrets", two)):
            out["sign_us"][f"{size} B, {label}"] = _us(
                lambda b=body, s=secrets: webhook_headers(s, "run-id", 1_800_000_000, b),
                number,
                repeats,
            )
    ring = Keyring([Fernet.generate_key().decode(), Fernet.generate_key().decode()])
    stored = {
        "Authorization": {"secret": True, "sealed": ring.seal("Bearer " + "t" * 40)},
        "X-Api-Key": {"secret": True, "sealed": ring.seal("k" * 32)},
        "X-Team": "blue",
    }
    out["open_2_secret_headers_us"] = _us(lambda: open_headers(stored, ring), number, repeats)
    values = open_headers(stored, ring).secrets
    excerpt = ("response text " * 300)[:4096]
    out["redact_4kb_excerpt_us"] = _us(lambda: redact(excerpt, values), number, repeats)
    for case, us in out["sign_us"].items():
        print(f"sign {case:20} {us:8.2f} µs")
    print(f"open 2 secret headers     {out['open_2_secret_headers_us']:8.2f} µs")
    print(f"redact a 4 KB excerpt     {out['redact_4kb_excerpt_us']:8.2f} µs")
    return out
