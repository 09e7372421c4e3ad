"""Email-code sign-in: the rules of codes, throttles and the answers known and unknown
addresses get (hosted mode; a local broker has no accounts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.utils import timezone

from console.actions import sign_in as codes
from console.models import Account, DashboardViewer, SignInCode, SignInThrottle, WebSession
from console.web import digest
from lobbies.actions import operator
from tests.console.conftest import (
    ACCOUNT_HOST,
    LOCAL_HOST,
    browser_at,
    last_code,
    post_json,
    sign_in,
)
from tests.console.hosted_server import (
    SIGN_IN_COOKIE,
    hosted_server,
    sign_in_cookie,
    start_hosted,
)
from tests.postgres import own_database, url

pytestmark = pytest.mark.usefixtures("hosted")
__all__ = ["hosted_server"]  # a fixture used here by name

WRONG = "000000"


def wrong(code: str) -> str:
    return WRONG if code != WRONG else "111111"


@pytest.fixture
def alice(make_account):
    return make_account("alice@example.com")


@pytest.fixture
def browser():
    return browser_at(ACCOUNT_HOST)


def ask(browser, email: str, **extra):
    return post_json(browser, "/sign-in", {"email": email}, **extra)


def verify(browser, email: str, code: str, **extra):
    return post_json(browser, "/sign-in/code", {"email": email, "code": code}, **extra)


def test_a_right_code_signs_in_once_and_sets_the_account_cookie(browser, alice):
    answer = ask(browser, "  Alice@Example.com ")
    assert answer.status_code == 200
    assert answer.json()["message"] == "if that address may sign in, a code is on its way"
    code = last_code("alice@example.com")

    signed = verify(browser, "alice@example.com", code)

    assert signed.status_code == 200 and signed.json()["redirect"] == "/"
    cookie = signed.cookies["__Host-pocolobby-account"]
    assert cookie["secure"] and cookie["httponly"] and cookie["path"] == "/"
    assert WebSession.objects.filter(account=alice, place="account").count() == 1
    assert not SignInCode.objects.exists()
    home = browser.get("/")
    assert home.status_code == 200 and b"alice@example.com" in home.content
    again = verify(browser_at(ACCOUNT_HOST), "alice@example.com", code)
    assert again.status_code == 400 and "no code" in again.json()["error"]["message"]
    assert WebSession.objects.count() == 1


def test_codes_are_stored_only_as_macs_bound_to_the_address(browser, alice):
    ask(browser, "alice@example.com")
    code = last_code("alice@example.com")
    row = SignInCode.objects.get()
    assert code not in row.code_mac and "alice" not in row.address_mac
    asking = browser.cookies["__Host-pocolobby-sign-in"].value
    assert row.address_mac == codes.code_key("alice@example.com")
    assert row.browser_mac == codes.browser_mac(asking) and asking not in row.browser_mac
    assert row.code_mac == codes.code_mac("alice@example.com", code)
    assert row.code_mac != codes.code_mac("bob@example.com", code)
    assert row.expires_at - row.created_at == timedelta(minutes=10)


def test_a_wrong_code_is_refused_and_counted(browser, alice):
    ask(browser, "alice@example.com")
    code = last_code("alice@example.com")
    refused = verify(browser, "alice@example.com", wrong(code))
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "that code is not right; 4 tries left for it"
    assert "__Host-pocolobby-account" not in refused.cookies
    assert not WebSession.objects.exists()
    assert SignInCode.objects.get().tries == 1
    assert SignInThrottle.objects.filter(kind="wrong_code").count() == 1


def test_an_expired_code_is_refused(browser, alice):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        ask(browser, "alice@example.com")
        code = last_code("alice@example.com")
        clock.shift(timedelta(minutes=10, seconds=1))
        refused = verify(browser, "alice@example.com", code)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "that code has expired; ask for a new one"
    assert not WebSession.objects.exists()


def test_the_sixth_try_on_a_code_is_refused_even_when_right(browser, alice):
    ask(browser, "alice@example.com")
    code = last_code("alice@example.com")
    for _ in range(5):
        assert verify(browser, "alice@example.com", wrong(code)).status_code == 400
    sixth = verify(browser, "alice@example.com", code)
    assert sixth.status_code == 400
    assert "five wrong tries" in sixth.json()["error"]["message"]
    assert not WebSession.objects.exists()


def test_the_eleventh_wrong_code_in_an_hour_is_refused_across_new_codes(browser, alice):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        ask(browser, "alice@example.com")
        for _ in range(5):
            verify(browser, "alice@example.com", wrong(last_code("alice@example.com")))
        clock.shift(timedelta(minutes=2))
        assert ask(browser, "alice@example.com").status_code == 200
        for _ in range(5):
            verify(browser, "alice@example.com", wrong(last_code("alice@example.com")))
        clock.shift(timedelta(minutes=2))
        assert ask(browser, "alice@example.com").status_code == 200
        right = last_code("alice@example.com")
        eleventh = verify(browser, "alice@example.com", right)
        assert eleventh.status_code == 429
        assert "too many wrong tries" in eleventh.json()["error"]["message"]
        assert not WebSession.objects.exists()
        clock.shift(timedelta(minutes=57))
        assert ask(browser, "alice@example.com").status_code == 200
        later = verify(browser, "alice@example.com", last_code("alice@example.com"))
        assert later.status_code == 200


def test_a_second_code_within_a_minute_is_refused_and_the_first_stays(browser, alice):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        ask(browser, "alice@example.com")
        first = SignInCode.objects.get()
        clock.shift(timedelta(seconds=30))
        second = ask(browser, "alice@example.com")
    assert second.status_code == 429
    assert "less than a minute ago" in second.json()["error"]["message"]
    assert len(mail.outbox) == 1
    assert SignInCode.objects.get().code_mac == first.code_mac


@pytest.mark.parametrize("email", ["alice@example.com", "nobody@example.com"])
def test_a_sixth_code_in_an_hour_is_refused_for_known_and_unknown_addresses(browser, alice, email):
    answers = []
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(6):
            answers.append(ask(browser, email))
            clock.shift(timedelta(minutes=1, seconds=1))
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    assert "five codes" in answers[-1].json()["error"]["message"]
    assert SignInThrottle.objects.filter(kind="code_sent").count() == 5


def test_unknown_and_disabled_addresses_get_the_same_answer_and_rows_but_no_mail(
    make_account, alice
):
    make_account("off@example.com", enabled=False)
    answers, browsers = {}, {}
    for n, email in enumerate(("alice@example.com", "nobody@example.com", "off@example.com")):
        browsers[email] = browser_at(ACCOUNT_HOST)
        answer = ask(browsers[email], email)
        answers[email] = (answer.status_code, answer.json()["message"])
        assert SignInThrottle.objects.filter(kind="code_sent").count() == n + 1
        asking = browsers[email].cookies["__Host-pocolobby-sign-in"].value
        row = SignInCode.objects.get(address_mac=codes.code_key(email))
        assert row.browser_mac == codes.browser_mac(asking)
    assert len(set(answers.values())) == 1
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]
    # Trying a code reads the same too: an unknown address has a code nobody received.
    unknown = verify(browsers["nobody@example.com"], "nobody@example.com", "123456")
    known = verify(
        browsers["alice@example.com"], "alice@example.com", wrong(last_code("alice@example.com"))
    )
    assert unknown.json() == known.json()
    assert not Account.objects.filter(email="nobody@example.com").exists()


def test_the_answer_waits_out_the_one_second_floor_for_unknown_addresses(settings, browser, db):
    settings.POCOLOBBY_SIGN_IN_FLOOR_SECONDS = 1.0
    began = time.monotonic()
    answer = ask(browser, "nobody@example.com")
    assert answer.status_code == 200
    assert time.monotonic() - began >= 1.0


def test_a_listed_viewer_without_an_account_gets_one_on_first_sign_in(browser, db):
    lobby = operator.create_lobby("team")
    DashboardViewer.objects.create(
        lobby=lobby, email="viewer@example.com", created_at=timezone.now()
    )
    signed = sign_in(browser, "viewer@example.com")
    assert signed.status_code == 200
    assert Account.objects.get(email="viewer@example.com").enabled


def test_a_client_is_limited_per_hour_and_an_ipv6_client_by_its_64(db):
    for n in range(20):
        client = browser_at(ACCOUNT_HOST, REMOTE_ADDR=f"2001:db8:1:2::{n + 1:x}")
        assert ask(client, f"user{n}@example.com").status_code == 200
    neighbour = browser_at(ACCOUNT_HOST, REMOTE_ADDR="2001:db8:1:2:ffff::9")
    refused = ask(neighbour, "user99@example.com")
    assert refused.status_code == 429 and "your network" in refused.json()["error"]["message"]
    other_net = browser_at(ACCOUNT_HOST, REMOTE_ADDR="2001:db8:1:3::1")
    assert ask(other_net, "user99@example.com").status_code == 200


def test_verify_attempts_are_limited_per_client(alice):
    client = browser_at(ACCOUNT_HOST, REMOTE_ADDR="192.0.2.7")
    for n in range(30):
        verify(client, f"user{n}@example.com", "123456")
    refused = verify(client, "alice@example.com", "123456")
    assert refused.status_code == 429
    assert "sign-in attempts from your network" in refused.json()["error"]["message"]


def test_x_forwarded_for_is_ignored_unless_a_proxy_is_trusted(settings, db):
    def spoofing(n: int):
        return browser_at(ACCOUNT_HOST, REMOTE_ADDR="192.0.2.1", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")

    for n in range(20):
        ask(spoofing(n), f"user{n}@example.com")
    assert ask(spoofing(99), "late@example.com").status_code == 429
    settings.POCOLOBBY_TRUSTED_PROXY_HOPS = 1
    assert ask(spoofing(99), "late@example.com").status_code == 200


def test_without_mail_settings_the_page_names_what_is_missing(settings, browser, alice):
    settings.EMAIL_BACKEND = "console.mail.MissingMailBackend"
    page = browser.get("/sign-in")
    assert b"mail is not configured: set POSTMARK_TOKEN and POCOLOBBY_MAIL_FROM" in page.content
    refused = ask(browser, "alice@example.com")
    assert refused.status_code == 503
    assert refused.json()["error"]["message"] == (
        "mail is not configured: set POSTMARK_TOKEN and POCOLOBBY_MAIL_FROM"
    )
    assert not SignInCode.objects.exists() and not SignInThrottle.objects.exists()


def test_the_sign_in_pages_have_the_fields_and_buttons_browsers_use(browser):
    page = browser.get("/sign-in").content.decode()
    assert 'name="email"' in page and "Send me a code" in page
    code_page = browser.get("/sign-in/code?email=a%40example.com").content.decode()
    assert 'name="code"' in code_page and ">Sign in</button>" in code_page


def test_sign_out_deletes_the_session_row(browser, alice):
    sign_in(browser, "alice@example.com")
    assert WebSession.objects.count() == 1
    out = post_json(browser, "/sign-out", {})
    assert out.status_code == 200 and out.json()["redirect"] == "/sign-in"
    assert not WebSession.objects.exists()
    assert browser.get("/").status_code == 302


def test_a_disabled_accounts_existing_session_no_longer_works(browser, alice, make_account):
    sign_in(browser, "alice@example.com")
    token = browser.cookies["__Host-pocolobby-account"].value
    assert WebSession.objects.filter(token_hash=digest(token)).exists()
    make_account("alice@example.com", enabled=False)
    assert not WebSession.objects.exists()
    assert browser.get("/").status_code == 302
    make_account("alice@example.com", enabled=True)
    assert browser.get("/").status_code == 302


@pytest.mark.parametrize(
    ("body", "content_type", "status", "fragment"),
    [
        ('{"email": "a@example.com", "admin": true}', "application/json", 400, "not a field"),
        ("email=a@example.com", "application/x-www-form-urlencoded", 415, "application/json"),
        ("{not json", "application/json", 400, "not valid JSON"),
        ('{"email": "' + "a" * 17000 + '"}', "application/json", 413, "larger than"),
        # Issue 28: nested 1,000+ deep, these were 500s with a logged traceback.
        ("[" * 1024 + "]" * 1024, "application/json", 400, "nests JSON deeper than 64 levels"),
        ('{"email": ' + "[" * 300 + "]" * 300 + "}", "application/json", 400, "deeper than 64"),
    ],
)
def test_bad_bodies_are_refused_and_store_nothing(
    browser, alice, body, content_type, status, fragment
):
    answer = browser.post(
        "/sign-in", data=body, content_type=content_type, HTTP_ORIGIN=f"https://{ACCOUNT_HOST}"
    )
    assert answer.status_code == status
    assert fragment in answer.json()["error"]["message"]
    assert not SignInThrottle.objects.exists() and not mail.outbox


def test_a_forged_origin_cannot_ask_for_codes(browser, alice):
    answer = ask(browser, "alice@example.com", origin="https://evil.example")
    assert answer.status_code == 403
    assert "must be sent from https://pocolobby.test" in answer.json()["error"]["message"]
    assert not SignInThrottle.objects.exists() and not mail.outbox


def test_a_local_broker_has_no_email_sign_in(settings, db):
    settings.POCOLOBBY_DOMAIN = ""
    client = browser_at(LOCAL_HOST)
    answer = post_json(client, "/sign-in", {"email": "a@example.com"})
    assert answer.status_code == 404 and "pocolobby settings" in answer.json()["error"]["message"]
    assert not SignInThrottle.objects.exists()


NETWORKS = [f"127.0.0.{n}" for n in range(2, 10)]  # eight source addresses, eight networks


def test_wrong_codes_from_eight_networks_are_ten_an_hour_for_the_address(alice):
    """A guesser holding eight networks gets no more guesses at one address than one network:
    each network asks for a code and tries five; ten are checked, the other thirty refused."""
    answers: list[tuple[str, int]] = []
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for network in NETWORKS:
            guesser = browser_at(ACCOUNT_HOST, REMOTE_ADDR=network)
            ask(guesser, "alice@example.com")
            for _ in range(5):
                answer = verify(guesser, "alice@example.com", wrong(last_code("alice@example.com")))
                answers.append((answer.json()["error"]["code"], answer.status_code))
            clock.shift(timedelta(seconds=61))
        assert answers == [("wrong_code", 400)] * 10 + [("throttled", 429)] * 30
        assert SignInThrottle.objects.filter(kind="wrong_code").count() == 10
        assert len(mail.outbox) == 5  # and five codes an hour, whatever the network
        owner = browser_at(ACCOUNT_HOST, REMOTE_ADDR="192.0.2.10")
        assert ask(owner, "alice@example.com").status_code == 429
        clock.shift(timedelta(hours=1))
        assert ask(owner, "alice@example.com").status_code == 200
        assert verify(owner, "alice@example.com", last_code("alice@example.com")).status_code == 200


def test_code_requests_from_eight_networks_within_a_minute_mail_one_code(alice):
    with time_machine.travel(timezone.now(), tick=False) as clock:
        answers = []
        for network in NETWORKS:
            answers.append(ask(browser_at(ACCOUNT_HOST, REMOTE_ADDR=network), "alice@example.com"))
            clock.shift(timedelta(seconds=5))
    assert [a.status_code for a in answers] == [200] + [429] * 7
    assert "less than a minute ago" in answers[-1].json()["error"]["message"]
    assert len(mail.outbox) == 1 and SignInCode.objects.count() == 1


@pytest.mark.slow
def test_over_a_real_server_eight_networks_asking_within_a_minute_get_one_mail(hosted_server):
    """Eight source addresses, each its own network to the broker: one code is mailed, the
    seven refused requests replace nothing, and the one that was mailed signs in."""
    hosted_server.admin("POST", "/accounts", {"email": "alice@example.com"})
    answers = []
    for network in NETWORKS:
        with hosted_server.client(source=network) as client:
            answers.append(client.post("/sign-in", json={"email": "alice@example.com"}))
    assert [a.status_code for a in answers] == [200] + [429] * 7, answers[-1].text
    assert all("less than a minute ago" in a.text for a in answers[1:])
    code = hosted_server.code_for("alice@example.com")
    with hosted_server.client(source=NETWORKS[0]) as client:
        signed = client.post(
            "/sign-in/code",
            json={"email": "alice@example.com", "code": code},
            headers={"Cookie": f"{SIGN_IN_COOKIE}={sign_in_cookie(answers[0])}"},
        )
    assert signed.status_code == 200, signed.text


def test_a_new_code_replaces_the_old_one_whichever_browser_asked(alice):
    owner = browser_at(ACCOUNT_HOST, REMOTE_ADDR="192.0.2.10")
    with time_machine.travel(timezone.now(), tick=False) as clock:
        ask(owner, "alice@example.com")
        first = last_code("alice@example.com")
        clock.shift(timedelta(seconds=61))
        other = browser_at(ACCOUNT_HOST, REMOTE_ADDR="198.51.100.1")
        assert ask(other, "alice@example.com").status_code == 200
        assert SignInCode.objects.count() == 1
        old = verify(owner, "alice@example.com", first)
        assert old.status_code == 400 and old.json()["error"]["code"] == "no_code"
        # The new code works only where it was asked for, and a guess elsewhere spends nothing.
        assert SignInCode.objects.get().tries == 0
        clock.shift(timedelta(seconds=61))
        ask(owner, "alice@example.com")
        assert verify(owner, "alice@example.com", last_code("alice@example.com")).status_code == 200


def test_a_code_works_only_in_the_browser_that_asked_for_it(alice):
    asking = browser_at(ACCOUNT_HOST)
    ask(asking, "alice@example.com")
    code = last_code("alice@example.com")
    elsewhere = verify(browser_at(ACCOUNT_HOST), "alice@example.com", code)
    assert elsewhere.status_code == 400 and elsewhere.json()["error"]["code"] == "no_code"
    assert SignInCode.objects.get().tries == 0
    signed = verify(asking, "alice@example.com", code)
    assert signed.status_code == 200
    assert signed.cookies["__Host-pocolobby-sign-in"].value == ""


def test_the_django_admin_login_has_the_same_limits_per_user_whatever_the_network(db, settings):
    from django.contrib.auth.models import User  # the admin's own users, only here

    settings.POCOLOBBY_ADMIN_PASSWORD_RECOVERY = True  # hosted, the form is recovery only

    User.objects.create_superuser("operator", "op@example.com", "right-password")

    def log_in(address: str, password: str):
        return browser_at(ACCOUNT_HOST, REMOTE_ADDR=address).post(
            "/admin/login/",
            {"username": "operator", "password": password, "next": "/admin/"},
        )

    for n in range(10):
        assert log_in(f"198.51.100.{n + 1}", "guess").status_code == 200
    refused = log_in("192.0.2.10", "right-password")
    assert refused.status_code == 429 and b"too many wrong tries" in refused.content


def test_x_forwarded_for_without_a_trusted_proxy_is_named_once_in_the_log(caplog, db):
    from console import clients  # its once-per-process flag, reset for this test

    clients._said_forwarded = False
    forwarded = browser_at(ACCOUNT_HOST, HTTP_X_FORWARDED_FOR="203.0.113.9")
    with caplog.at_level("WARNING", logger="pocolobby.sign_in"):
        forwarded.get("/sign-in")
        forwarded.get("/sign-in")
    said = [r for r in caplog.records if "X-Forwarded-For" in r.getMessage()]
    assert len(said) == 1
    assert "POCOLOBBY_TRUSTED_PROXY_HOPS is 0" in said[0].getMessage()


@pytest.fixture
def database() -> Iterator[str]:
    yield from own_database("sign_in")


@pytest.mark.slow
def test_on_postgresql_two_brokers_asked_at_once_from_eight_networks_mail_one_code(
    database, tmp_path
):
    """Two brokers on one PostgreSQL store, each asked from four networks at the same moment,
    for each of three addresses: one code per address, because an address's requests are
    counted one at a time (its code row is locked first)."""
    brokers = [start_hosted(tmp_path / name, DATABASE_URL=url(database)) for name in "ab"]
    try:
        addresses = [f"user{n}@example.com" for n in range(3)]
        for address in addresses:
            brokers[0].admin("POST", "/accounts", {"email": address})
        for address in addresses:
            at_once = threading.Barrier(len(NETWORKS))

            def ask(n: int, address: str = address, at_once: threading.Barrier = at_once) -> int:
                with brokers[n % 2].client(source=NETWORKS[n]) as client:
                    at_once.wait()
                    return client.post("/sign-in", json={"email": address}).status_code

            with ThreadPoolExecutor(len(NETWORKS)) as pool:
                statuses = sorted(pool.map(ask, range(len(NETWORKS))))
            mailed = sum(len(server.mails_to(address)) for server in brokers)
            assert (statuses, mailed) == ([200] + [429] * 7, 1), address
    finally:
        for server in brokers:
            server.broker.stop()
