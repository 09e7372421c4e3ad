from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse(
        "PocoLobby broker. Agents use /v1 with a bearer token; see docs/API.md.\n",
        content_type="text/plain; charset=utf-8",
    )


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


handler400 = bad_request
handler404 = not_found

urlpatterns = [
    path("", home),
    path("v1/", include("lobbies.urls")),
    path("admin/", admin.site.urls),
]
