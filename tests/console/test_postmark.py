"""Sign-in mail through postmarker's real Django backend, against a fake of Postmark's HTTP
API that answers with Postmark's own JSON.

postmarker speaks through `requests`, which respx (httpx-only) cannot intercept, so the fake
is a requests transport adapter: it sees the real request and returns a real response.
"""

from __future__ import annotations

import json

import pytest
import requests
from django.core import mail

from console.models import SignInCode
from tests.console.conftest import ACCOUNT_HOST, browser_at, post_json

pytestmark = pytest.mark.usefixtures("hosted")


class FakePostmark(requests.adapters.HTTPAdapter):
    """Postmark's /email/batch: the answer queued by the test, with the request kept."""

    status = 200
    answer: object = None
    seen: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, **kwargs: object) -> requests.Response:
        FakePostmark.seen.append(request)
        response = requests.Response()
        response.status_code = FakePostmark.status
        response._content = json.dumps(FakePostmark.answer).encode()
        response.headers["Content-Type"] = "application/json"
        response.url = request.url
        response.request = request
        return response


@pytest.fixture
def postmark(settings, monkeypatch, make_account):
    settings.EMAIL_BACKEND = "postmarker.django.EmailBackend"
    settings.POSTMARK = {"TOKEN": "server-token", "TEST_MODE": False, "VERBOSITY": 0}
    settings.POCOLOBBY_MAIL_FROM = "codes@pocolobby.test"
    settings.DEFAULT_FROM_EMAIL = "codes@pocolobby.test"
    monkeypatch.setattr(requests.adapters, "HTTPAdapter", FakePostmark)
    FakePostmark.seen = []
    make_account("ann@example.com")
    return FakePostmark


def test_a_code_goes_out_through_postmarks_batch_api(postmark):
    postmark.status, postmark.answer = (
        200,
        [
            {
                "ErrorCode": 0,
                "Message": "OK",
                "MessageID": "b7bc2f4a-e38e-4336-af7d-e6c392c2f817",
                "SubmittedAt": "2026-11-30T11:00:00.0000000-05:00",
                "To": "ann@example.com",
            }
        ],
    )
    answer = post_json(browser_at(ACCOUNT_HOST), "/sign-in", {"email": "ann@example.com"})
    assert answer.status_code == 200, answer.content
    (request,) = postmark.seen
    assert request.url == "https://api.postmarkapp.com/email/batch"
    assert request.headers["X-Postmark-Server-Token"] == "server-token"
    (sent,) = json.loads(request.body)
    assert sent["To"] == "ann@example.com" and sent["From"] == "codes@pocolobby.test"
    assert "sign-in code" in sent["Subject"]
    assert not mail.outbox


def test_a_postmark_refusal_is_shown_plainly(postmark):
    postmark.status, postmark.answer = (
        200,
        [
            {
                "ErrorCode": 406,
                "Message": "You tried to send to a recipient that has been marked as inactive.",
            }
        ],
    )
    answer = post_json(browser_at(ACCOUNT_HOST), "/sign-in", {"email": "ann@example.com"})
    assert answer.status_code == 502
    message = answer.json()["error"]["message"]
    assert message.startswith("the mail service refused to send the code: ")
    assert "[406] You tried to send to a recipient that has been marked as inactive." in message
    assert SignInCode.objects.count() == 1


def test_a_bad_server_token_is_shown_plainly(postmark):
    postmark.status, postmark.answer = (
        401,
        {
            "ErrorCode": 10,
            "Message": "The Server Token you provided in the X-Postmark-Server-Token request "
            "header was invalid. Please verify that you are using a valid token.",
        },
    )
    answer = post_json(browser_at(ACCOUNT_HOST), "/sign-in", {"email": "ann@example.com"})
    assert answer.status_code == 502
    assert "[10] The Server Token you provided" in answer.json()["error"]["message"]


def test_an_unknown_address_reaches_no_mail_service(postmark):
    answer = post_json(browser_at(ACCOUNT_HOST), "/sign-in", {"email": "nobody@example.com"})
    assert answer.status_code == 200 and postmark.seen == []


def test_the_configured_api_url_is_where_our_backend_sends(postmark, settings):
    settings.EMAIL_BACKEND = "console.mail.PostmarkBackend"
    settings.POSTMARK = {**settings.POSTMARK, "ROOT_API_URL": "https://mail-relay.internal/"}
    postmark.status, postmark.answer = (
        200,
        [{"ErrorCode": 0, "Message": "OK", "MessageID": "m-1", "To": "ann@example.com"}],
    )
    answer = post_json(browser_at(ACCOUNT_HOST), "/sign-in", {"email": "ann@example.com"})
    assert answer.status_code == 200, answer.content
    (request,) = postmark.seen
    assert request.url == "https://mail-relay.internal/email/batch"
    assert request.headers["X-Postmark-Server-Token"] == "server-token"
