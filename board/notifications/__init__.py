"""The owner's notifications: Web Push to phones and browsers (the VAPID key, the push
services' endpoints and transport, the device subscriptions) and the still-waiting mail.
Not the agents' push, which is the broker's WebSocket (lobbies)."""
