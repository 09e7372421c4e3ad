"""The API hosts' routes: /v1 only. Pages live in console.urls and board.urls."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path

from pocolobby import readiness


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/v1/"):
        return JsonResponse(
            {"error": {"code": "not_found", "message": f"no route {request.path}"}}, status=404
        )
    return HttpResponse("Not found\n", status=404, content_type="text/plain; charset=utf-8")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's own refusals (such as a Host not allowed) stay JSON on the API."""
    if request.path.startswith("/v1/"):
        return JsonResponse(
            {"error": {"code": "bad_request", "message": "the request was refused (check Host)"}},
            status=400,
        )
    return HttpResponse("Bad request\n", status=400, content_type="text/plain; charset=utf-8")


def health(request: HttpRequest) -> JsonResponse:
    """Readiness for proxies and supervisors: one bounded read of the store, 503 without it."""
    try:
        broker = readiness.read_store()
    except readiness.StoreUnavailable as exc:
        return JsonResponse(
            {
                "ok": False,
                "service": "pocolobby",
                "error": {"code": "store_unavailable", "message": str(exc)},
            },
            status=503,
        )
    return JsonResponse({"ok": True, "service": "pocolobby", **broker})


handler400 = bad_request
handler404 = not_found

urlpatterns = [
    path("v1/health", health),
    path("v1/", include("lobbies.urls")),
]
