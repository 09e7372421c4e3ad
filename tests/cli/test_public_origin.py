"""POCOLOBBY_PUBLIC_ORIGIN and POCOLOBBY_TRUSTED_PROXIES are checked where the broker starts,
each wrong value named in a sentence; `settings --qr` draws the phone link with half blocks
only, and the drawing is the link's QR code."""

from __future__ import annotations

from ipaddress import ip_network

import pytest
import segno

from pocolobby import config
from pocolobby.cli.operator import qr_text


@pytest.mark.parametrize(
    ("raw", "origin"),
    [
        ("https://Laptop.Tail1234.ts.net", "https://laptop.tail1234.ts.net"),
        ("https://pocolobby.example.com/", "https://pocolobby.example.com"),
        ("https://pocolobby.example.com:443", "https://pocolobby.example.com"),
        (" https://home.example.org:8443 ", "https://home.example.org:8443"),
    ],
)
def test_a_public_origin_is_kept_as_its_origin(raw, origin):
    assert config.parse_public_origin(raw) == origin


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("http://laptop.tail1234.ts.net", "must be an https origin"),
        ("laptop.tail1234.ts.net", "must be an https origin"),
        ("https://laptop.tail1234.ts.net/team", "without a path"),
        ("https://laptop.tail1234.ts.net/?x=1", "without a path, query or fragment"),
        ("https://*.example.com", "not a wildcard"),
        ("https://user:secret@example.com", "user name or password"),
        ("https://192.0.2.7", "not an address"),
        ("https://example.com:99999", "port"),
        ("https://under_score.example.com", "DNS name"),
    ],
)
def test_a_wrong_public_origin_is_named_with_what_is_wrong(raw, says):
    with pytest.raises(ValueError, match=says):
        config.parse_public_origin(raw)


def test_a_wrong_setting_stops_the_broker_with_its_name(monkeypatch):
    monkeypatch.delenv("POCOLOBBY_DOMAIN", raising=False)
    monkeypatch.setenv("POCOLOBBY_PUBLIC_ORIGIN", "http://laptop.example.ts.net")
    with pytest.raises(SystemExit, match=r"^POCOLOBBY_PUBLIC_ORIGIN must be an https origin"):
        config.public_origin_from_env()
    monkeypatch.setenv("POCOLOBBY_PUBLIC_ORIGIN", "https://laptop.example.ts.net")
    assert config.public_origin_from_env() == "https://laptop.example.ts.net"
    monkeypatch.setenv("POCOLOBBY_DOMAIN", "pocolobby.example.com")
    with pytest.raises(SystemExit, match="two layouts: set one"):
        config.public_origin_from_env()
    monkeypatch.setenv("POCOLOBBY_TRUSTED_PROXIES", "127.0.0.1, caddy.internal")
    with pytest.raises(SystemExit, match=r"^POCOLOBBY_TRUSTED_PROXIES .*'caddy.internal'"):
        config.trusted_proxies_from_env()


def test_trusted_proxies_are_loopback_unless_set(monkeypatch):
    monkeypatch.delenv("POCOLOBBY_TRUSTED_PROXIES", raising=False)
    assert config.trusted_proxies_from_env() == (ip_network("127.0.0.1"), ip_network("::1"))
    monkeypatch.setenv("POCOLOBBY_TRUSTED_PROXIES", "10.0.0.5, 10.1.0.0/24")
    assert config.trusted_proxies_from_env() == (
        ip_network("10.0.0.5"),
        ip_network("10.1.0.0/24"),
    )


def test_the_qr_code_is_half_blocks_only_and_reads_back_as_the_link():
    link = "https://laptop.tail1234.ts.net/#ticket=" + "A" * 43
    drawn = qr_text(link).splitlines()
    assert set("".join(drawn)) <= {"\u2580", "\u2584", "\u2588", " "}
    # Each character is two rows of modules; a drawn (light) half is 0, dark is 1.
    halves = {"\u2588": (0, 0), "\u2580": (0, 1), "\u2584": (1, 0), " ": (1, 1)}
    rows: list[list[int]] = []
    for line in drawn:
        pairs = [halves[c] for c in line]
        rows += [[top for top, _ in pairs], [bottom for _, bottom in pairs]]
    code = segno.make(link, error="m")
    border = 4
    size = code.symbol_size(border=0)[0]
    read = [row[border : border + size] for row in rows[border : border + size]]
    assert read == [[int(bool(module)) for module in row] for row in code.matrix]
    # The quiet zone is light all round.
    assert all(module == 0 for module in rows[0] + rows[border - 1])
