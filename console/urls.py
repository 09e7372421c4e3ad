"""The account area: at the domain's root hosted, at `/` on a local broker."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from pocolobby.urls_api import bad_request, not_found

handler400 = bad_request
handler404 = not_found

urlpatterns = [
    path("admin/", admin.site.urls),
]
