"""The SSRF guard: URL syntax, address classification, resolution, the allow-list."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from core.ssrf import (
    Destination,
    RefusedDestination,
    check_saved_url,
    check_url_syntax,
    parse_allow_networks,
    refused_reason,
    resolve_destination,
)

# (address, expected reason): each refused by default.
REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.1.2.3", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private_address"),
    ("172.16.0.1", "private_address"),
    ("172.31.255.255", "private_address"),
    ("192.168.1.1", "private_address"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("169.254.1.1", "link_local"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("100.64.0.1", "carrier_grade_nat"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.0.0.1", "private_address"),
    ("::ffff:169.254.169.254", "metadata"),
    ("fe80::1", "link_local"),
    ("fc00::1", "private_address"),
    ("fec0::1", "private_address"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.2.1", "documentation"),
    ("2001:db8::1", "documentation"),
    ("192.0.0.8", "not_global"),
    ("2001::1", "reserved"),  # Teredo, client 255.255.255.254
    ("::ffff:0:7f00:1", "reserved"),  # IPv4-translated (SIIT)
    ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
    ("64:ff9b::a00:1", "private_address"),  # NAT64 of 10.0.0.1
    ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ("2002:a9fe:a9fe::1", "metadata"),  # 6to4 of 169.254.169.254
    ("::7f00:1", "loopback"),  # IPv4-compatible 127.0.0.1
    ("::808:808", "reserved"),  # IPv4-compatible form of anything: deprecated
]

# (resolver answer, the address connected to)
PUBLIC = [
    ("93.184.216.34", "93.184.216.34"),
    ("8.8.8.8", "8.8.8.8"),
    ("2606:4700:4700:0::1111", "2606:4700:4700::1111"),
    ("::ffff:8.8.8.8", "8.8.8.8"),  # IPv4-mapped: connected to as plain IPv4
    ("64:ff9b::808:808", "64:ff9b::808:808"),  # NAT64 of a public address (DNS64 networks)
    ("2002:808:808::1", "2002:808:808::1"),  # 6to4 of a public address
]


def stub(answers: dict[str, list[str]]):
    def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return answers[host]

    return resolve


def url_for(address: str) -> str:
    return f"http://[{address}]/" if ":" in address else f"http://{address}/"


def refusal(url: str, **kwargs) -> RefusedDestination:
    kwargs.setdefault("allow", ())
    with pytest.raises(RefusedDestination) as caught:
        resolve_destination(url, **kwargs)
    return caught.value


# --- addresses refused by default -------------------------------------------------------


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_literal_address_is_refused_by_default(address, reason):
    exc = refusal(url_for(address))
    assert exc.reason == reason
    assert "does not call" in str(exc)


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_refused_reason_classifies_the_address(address, reason):
    assert refused_reason(ipaddress.ip_address(address), ()) == reason


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_a_name_resolving_to_a_refused_address_is_refused(address, reason):
    exc = refusal("https://victim.example/", resolver=stub({"victim.example": [address]}))
    assert exc.reason == reason
    assert "victim.example" in str(exc)
    # The tenant learns the category, not the internal address the name points at.
    assert address not in str(exc)
    assert exc.address is not None


@pytest.mark.parametrize(("address", "reason"), REFUSED)
def test_each_refused_address_is_allowed_when_the_allow_list_covers_it(address, reason):
    allow = (ipaddress.ip_network(address),)
    destination = resolve_destination(url_for(address), allow=allow)
    assert refused_reason(ipaddress.ip_address(address), allow) is None
    assert len(destination.addresses) == 1


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",  # decimal
        "http://0x7f000001/",  # hex
        "http://0x7f.1/",  # hex, two parts
        "http://127.1/",  # two parts
        "http://0177.0.0.1/",  # octal
        "http://127.0.0.1./",  # FQDN dot
        "http://\uff11\uff12\uff17.0.0.1/",  # full-width digits, mapped by IDNA
        "http://[::ffff:7f00:1]/",
        "http://[0:0:0:0:0:ffff:127.0.0.1]/",
    ],
)
def test_alternative_spellings_of_loopback_are_refused(url):
    exc = refusal(url)
    assert exc.reason == "loopback"
    assert check_url_syntax(url)[1] in {"127.0.0.1", "::ffff:7f00:1"}


def test_invalid_numeric_host_is_refused_not_sent_to_dns():
    assert refusal("http://1.2.3.256/").reason == "bad_host"
    assert refusal("http://08.0.0.1/").reason == "bad_host"
    assert refusal("http://1.2.3.4.5/").reason == "bad_host"


def test_name_with_any_refused_address_is_refused():
    exc = refusal(
        "http://mixed.example/", resolver=stub({"mixed.example": ["8.8.8.8", "10.0.0.1"]})
    )
    assert exc.reason == "private_address"


def test_localhost_via_the_system_resolver_is_refused():
    assert refusal("http://localhost:8000/").reason == "loopback"


def test_unresolvable_name_is_refused():
    exc = refusal("http://nowhere.example/", resolver=stub({}))
    assert exc.reason == "unresolvable"
    assert "nowhere.example" in str(exc)
    assert refusal("http://empty.example/", resolver=stub({"empty.example": []})).reason == (
        "unresolvable"
    )


# --- allowed destinations ---------------------------------------------------------------


@pytest.mark.parametrize(("address", "expected"), PUBLIC)
def test_public_address_via_a_name_passes(address, expected):
    destination = resolve_destination(
        "https://Example.COM/a/b?c=d#frag",
        allow=(),
        resolver=stub({"example.com": [address]}),
    )
    assert destination == Destination("https", "example.com", 443, (expected,), "/a/b?c=d")


def test_all_addresses_are_kept_in_resolver_order_without_duplicates():
    resolver = stub({"multi.example": ["8.8.8.8", "2606:4700::1111", "8.8.8.8", "1.1.1.1"]})
    destination = resolve_destination("http://multi.example:8080", allow=(), resolver=resolver)
    assert destination.addresses == ("8.8.8.8", "2606:4700::1111", "1.1.1.1")
    assert destination.port == 8080
    assert destination.path_and_query == "/"


def test_ipv4_mapped_address_is_covered_by_its_ipv4_allow_entry():
    allow = parse_allow_networks("127.0.0.0/8")
    destination = resolve_destination("http://[::ffff:127.0.0.1]:9000/", allow=allow)
    assert destination.addresses == ("127.0.0.1",)  # connected to as plain IPv4


def test_allow_list_covers_only_its_networks():
    allow = parse_allow_networks("127.0.0.1/32, 10.0.0.0/8")
    assert resolve_destination("http://127.0.0.1/", allow=allow).addresses == ("127.0.0.1",)
    assert resolve_destination("http://10.9.8.7/", allow=allow).addresses == ("10.9.8.7",)
    assert refusal("http://127.0.0.2/", allow=allow).reason == "loopback"
    assert refusal("http://192.168.0.1/", allow=allow).reason == "private_address"


def test_idna_host_is_normalised():
    resolver = stub({"xn--bcher-kva.example": ["8.8.8.8"]})
    destination = resolve_destination("http://BÜCHER.example/", allow=(), resolver=resolver)
    assert destination.host == "xn--bcher-kva.example"


# --- URL syntax -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/", "bad_scheme"),
        ("file:///etc/passwd", "bad_scheme"),
        ("gopher://example.com:70/_x", "bad_scheme"),
        ("javascript:alert(1)", "bad_scheme"),
        ("//example.com/", "bad_scheme"),
        ("example.com", "bad_scheme"),
        ("http://user:pw@example.com/", "userinfo"),
        ("http://user@example.com/", "userinfo"),
        ("http://:pw@example.com/", "userinfo"),
        ("http:///path", "missing_host"),
        ("http://", "missing_host"),
        ("http://:80/", "missing_host"),
        ("http://example.com:0/", "bad_port"),
        ("http://example.com:65536/", "bad_port"),
        ("http://example.com:http/", "bad_port"),
        ("http://exa mple.com/", "bad_url"),
        ("http://example.com\\@127.0.0.1/", "bad_url"),
        ("http://example.com/\r\nX: y", "bad_url"),
        ("http://exa$mple.com/", "bad_host"),
        ("http://-leading.example/", "bad_host"),
        ("http://a..b/", "bad_host"),
        ("http://[::1/", "bad_host"),
        ("http://[fe80::1%25eth0]/", "bad_host"),
        ("http://%31%32%37.0.0.1/", "bad_host"),
    ],
)
def test_bad_urls_are_refused_with_the_right_reason(url, reason):
    with pytest.raises(RefusedDestination) as caught:
        check_url_syntax(url)
    assert caught.value.reason == reason
    assert str(caught.value)
    # resolve_destination applies the same check before any lookup.
    assert refusal(url, allow=parse_allow_networks("0.0.0.0/0,::/0")).reason == reason


def test_check_url_syntax_normalises():
    assert check_url_syntax("HTTPS://Example.COM.:8443/p?q=1#f") == (
        "https",
        "example.com",
        8443,
        "/p?q=1",
    )
    assert check_url_syntax("http://example.com") == ("http", "example.com", 80, "/")
    assert check_url_syntax("http://[2001:DB8::1]:81/x") == ("http", "2001:db8::1", 81, "/x")


# --- allow-list parsing -----------------------------------------------------------------


def test_parse_allow_networks_accepts_strings_and_sequences():
    expected = (ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.0.0.0/8"))
    assert parse_allow_networks("127.0.0.1/32,10.0.0.0/8") == expected
    assert parse_allow_networks(" 127.0.0.1 , 10.0.0.0/8 ,") == expected
    assert parse_allow_networks(["127.0.0.1/32", "10.0.0.0/8"]) == expected
    assert parse_allow_networks("") == ()
    assert parse_allow_networks("fd00::/8") == (ipaddress.ip_network("fd00::/8"),)


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "not-a-network", "10.1.2.3/8", "::1/129"])
def test_bad_cidr_in_allow_list_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match=rf"'{bad}'.*not a valid network"):
        parse_allow_networks(f"127.0.0.1/32,{bad}")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://2130706433/", "loopback"),  # 127.0.0.1 in another number form
        ("http://10.0.0.5/", "private_address"),
        ("http://[::ffff:192.168.1.1]/", "private_address"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://169.254.1.1/", "link_local"),
        ("http://localhost:9000/", "loopback"),
        ("http://api.localhost/", "loopback"),
    ],
)
def test_a_saved_url_with_a_refused_literal_host_is_refused_with_its_reason(url, reason):
    with pytest.raises(RefusedDestination) as refused:
        check_saved_url(url, allow=())
    assert refused.value.reason == reason
    assert "which the scheduler does not call" in str(refused.value)


def test_a_saved_url_with_a_name_is_not_resolved_and_an_allowed_literal_passes():
    assert check_saved_url("https://db.internal.example/x", allow=())[1] == "db.internal.example"
    loopback = parse_allow_networks("127.0.0.0/8,::1/128")
    assert check_saved_url("http://127.0.0.1:81/", allow=loopback)[1] == "127.0.0.1"
    assert check_saved_url("http://localhost/", allow=loopback)[1] == "localhost"
    with pytest.raises(RefusedDestination):  # localhost is ::1 too, which this list refuses
        check_saved_url("http://localhost/", allow=parse_allow_networks("127.0.0.0/8"))
