"""HTTP through Django; the bridges' WebSocket stream at /v1/stream; the agent API's fast lane
(lobbies/fastlane/lane.py) in front of Django for /v1."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path as route  # noqa: E402

from lobbies.fastlane.lane import AgentAPI  # noqa: E402
from lobbies.push.consumers import BridgeConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": AgentAPI(django_application),
        "websocket": URLRouter([route("v1/stream", BridgeConsumer.as_asgi())]),
    }
)
