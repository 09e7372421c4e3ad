"""The account area: at the domain's root hosted, at `/` on a local broker."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from console import views
from lobbies.api.http import handle_bad_request, handle_not_found

handler400 = handle_bad_request
handler404 = handle_not_found

urlpatterns = [
    path("", views.home),
    path("lobbies/create", views.create_lobby),
    path("sign-in", views.sign_in_page),
    path("sign-in/code", views.sign_in_code),
    path("sign-out", views.sign_out),
    path("open/<str:lobby>", views.open_lobby),
    path("ticket", views.redeem_ticket),
    path("admin/login/", views.admin_login),  # sign-in's limits, before admin's own route
    path("admin/", admin.site.urls),
]
