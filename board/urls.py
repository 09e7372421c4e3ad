"""A lobby's pages: on its own host hosted, under /<lobby>/ locally (same paths)."""

from __future__ import annotations

from django.urls import include, path

from board import hand_over, message_views, replies, views
from board.notifications import views as notifications
from lobbies.api.http import handle_bad_request, handle_not_found

handler400 = handle_bad_request
handler404 = handle_not_found

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("parts/waiting", views.waiting_part, name="dashboard-waiting"),
    path("parts/agents", views.agents_part, name="dashboard-agents"),
    path("parts/accounts", views.accounts_part, name="dashboard-accounts"),
    path("tokens", views.tokens, name="dashboard-tokens"),
    path("reply", replies.reply, name="dashboard-reply"),
    path("broadcast", replies.broadcast, name="dashboard-broadcast"),
    path("hand-over", hand_over.hand_over_view, name="dashboard-hand-over"),
    path("messages", message_views.messages, name="dashboard-messages"),
    path("parts/messages", message_views.messages_part, name="dashboard-messages-part"),
    path("push/service-worker.js", notifications.service_worker, name="push-service-worker"),
    path("push/key", notifications.key, name="push-key"),
    path("push/subscriptions", notifications.subscriptions, name="push-subscriptions"),
    path("push/preferences", notifications.preferences, name="push-preferences"),
    path("push/unsubscribe/<str:token>", notifications.unsubscribe, name="push-unsubscribe"),
    path("", include("board.settings.urls")),
    path("", include("console.lobby_urls")),
]
