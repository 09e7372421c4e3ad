"""HTTP through Django; the bridges' WebSocket stream at /v1/stream."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from lobbies.consumers import BridgeConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_application,
        "websocket": URLRouter([path("v1/stream", BridgeConsumer.as_asgi())]),
    }
)
