"""PocoLobby settings: environment-driven; the embedded default needs no variable at all."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from csp.constants import NONCE, SELF

from lobbies.access.secret_files import read_or_create_secret
from lobbies.fastlane.sqlite.checkpoints import BACKSTOP_PAGES
from pocolobby import config

BASE_DIR = Path(__file__).resolve().parent.parent
# The pages' templates/ and static/: inside this package when installed from a wheel (setup.py
# maps them there), at the top of the repository in a clone (and an editable install).
PAGE_ASSETS_DIR = next(
    (d for d in (Path(__file__).resolve().parent, BASE_DIR) if (d / "templates").is_dir()),
    BASE_DIR,
)
DATA_DIR = config.data_dir()
BOUNDS = config.Bounds.from_env()

SECRET_KEY = os.environ.get("POCOLOBBY_SECRET_KEY") or read_or_create_secret(
    DATA_DIR / "secret-key"
)
DEBUG = os.environ.get("POCOLOBBY_DEBUG") == "1"
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("POCOLOBBY_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
    if h.strip()
]

# Hosted mode: the account area at this domain (it may carry a port), lobbies at
# <lobby>.<domain>, the API on API hosts. Without it the broker is local (lobbies/access/hosts.py).
POCOLOBBY_DOMAIN = os.environ.get("POCOLOBBY_DOMAIN", "").strip().lower().rstrip(".")
POCOLOBBY_API_HOSTS = frozenset(
    h.strip().lower()
    for h in os.environ.get(
        "POCOLOBBY_API_HOSTS", f"api.{POCOLOBBY_DOMAIN}" if POCOLOBBY_DOMAIN else ""
    ).split(",")
    if h.strip()
)
POCOLOBBY_PUBLIC_SCHEME = os.environ.get("POCOLOBBY_PUBLIC_SCHEME", "https")
POCOLOBBY_PORT = int(os.environ.get("POCOLOBBY_PORT", "8787"))
if POCOLOBBY_DOMAIN:
    _bare = POCOLOBBY_DOMAIN.rsplit(":", 1)[0] if ":" in POCOLOBBY_DOMAIN else POCOLOBBY_DOMAIN
    ALLOWED_HOSTS += [_bare, f".{_bare}"]

# One person's broker behind a tunnel or proxy with an https name (Tailscale Serve, Cloudflare
# Tunnel, Caddy on a home server): the local layout (lobbies under paths) answers at this
# origin too, only through the proxy, which connects from POCOLOBBY_TRUSTED_PROXIES and is
# the only peer whose X-Forwarded-* headers count (lobbies/access/hosts.py, docs/OPERATIONS.md).
POCOLOBBY_PUBLIC_ORIGIN = config.public_origin_from_env()
POCOLOBBY_TRUSTED_PROXIES = config.trusted_proxies_from_env()
if POCOLOBBY_PUBLIC_ORIGIN:
    ALLOWED_HOSTS.append(urlsplit(POCOLOBBY_PUBLIC_ORIGIN).hostname or "")
    # The Django admin's forms (Django's CSRF check; our pages check Origin themselves): the
    # broker sees http from the proxy, the browser sends this https origin.
    CSRF_TRUSTED_ORIGINS = [POCOLOBBY_PUBLIC_ORIGIN]

# Sign-in: answers take at least this long (known and unknown addresses alike); per-client
# limits read X-Forwarded-For only behind this many trusted proxies (lobbies/access/clients.py).
POCOLOBBY_SIGN_IN_FLOOR_SECONDS = float(os.environ.get("POCOLOBBY_SIGN_IN_FLOOR_SECONDS", "1.0"))
POCOLOBBY_TRUSTED_PROXY_HOPS = int(os.environ.get("POCOLOBBY_TRUSTED_PROXY_HOPS", "0"))
# Hosted: operators sign in to the Django admin with the console's email code (accounts marked
# operator). A `createsuperuser` password opens it only while this is 1: recovery, for the
# time it takes (docs/OPERATIONS.md, "The Django admin on a hosted broker").
POCOLOBBY_ADMIN_PASSWORD_RECOVERY = os.environ.get("POCOLOBBY_ADMIN_PASSWORD_RECOVERY") == "1"

# Push endpoints admitted although their host is private or loopback (`host:port`, commas):
# for tests and private push services (board/notifications/webpush_endpoints.py).
POCOLOBBY_PUSH_ENDPOINT_ALLOW = frozenset(
    item.strip().lower()
    for item in os.environ.get("POCOLOBBY_PUSH_ENDPOINT_ALLOW", "").split(",")
    if item.strip()
)

# Mail for sign-in codes: Postmark when POSTMARK_TOKEN is set (console/mail.py).
POSTMARK_TOKEN = os.environ.get("POSTMARK_TOKEN", "")
POCOLOBBY_MAIL_FROM = os.environ.get("POCOLOBBY_MAIL_FROM", "")
EMAIL_BACKEND = os.environ.get("POCOLOBBY_EMAIL_BACKEND") or (
    "console.mail.PostmarkBackend" if POSTMARK_TOKEN else "console.mail.MissingMailBackend"
)
# POCOLOBBY_POSTMARK_API_URL points postmarker at a stand-in speaking Postmark's API (the
# deployment test's; a relay of your own); ROOT_API_URL is read by console.mail.PostmarkBackend.
POSTMARK = {
    "TOKEN": POSTMARK_TOKEN,
    "TEST_MODE": False,
    "VERBOSITY": 0,
    "ROOT_API_URL": os.environ.get("POCOLOBBY_POSTMARK_API_URL") or "https://api.postmarkapp.com/",
}
DEFAULT_FROM_EMAIL = POCOLOBBY_MAIL_FROM or "PocoLobby <no-reply@localhost>"
# Only for Django's file-based backend (local checks and the browser tests read it).
EMAIL_FILE_PATH = os.environ.get("POCOLOBBY_EMAIL_FILE_PATH") or str(DATA_DIR / "mail")

# The dashboard's outside services; each is named on the page when missing.
GITHUB_TOKEN = os.environ.get("POCOLOBBY_GITHUB_TOKEN", "")
GITHUB_API_URL = os.environ.get("POCOLOBBY_GITHUB_API_URL", "https://api.github.com")
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("POCOLOBBY_ANTHROPIC_BASE_URL") or None
# A lobby's summaries: at most one attempt per interval, and a claimed attempt whose broker
# died holds the lobby until it expires (board/summaries/attempts.py). Shorter only for tests.
POCOLOBBY_SUMMARY_INTERVAL_SECONDS = float(
    os.environ.get("POCOLOBBY_SUMMARY_INTERVAL_SECONDS", "600")
)
POCOLOBBY_SUMMARY_CLAIM_EXPIRES_SECONDS = float(
    os.environ.get("POCOLOBBY_SUMMARY_CLAIM_EXPIRES_SECONDS", "300")
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "lobbies",
    "console",
    "board",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "pocolobby.middleware.StaticFilesMiddleware",
    "pocolobby.middleware.HostRouting",
    "pocolobby.middleware.RefuseNul",
    "pocolobby.middleware.StoreFailures",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "console.access.OperatorAdmin",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "pocolobby.urls_api"
ASGI_APPLICATION = "pocolobby.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [PAGE_ASSETS_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "csp.context_processors.nonce",
            ],
        },
    },
]

SQLITE_PATH = DATA_DIR / "pocolobby.sqlite3"
# One file per SHA-256 beside the store (PostgreSQL deployments: on the broker's volume).
ATTACHMENTS_DIR = config.attachments_dir(DATA_DIR)
_database_url = os.environ.get("DATABASE_URL")
if _database_url:
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "lobbies.fastlane.sqlite",
            "NAME": str(SQLITE_PATH),
            # Reopening costs the PRAGMAs, and closing the last connection checkpoints the WAL.
            "CONN_MAX_AGE": None,
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": (
                    "PRAGMA journal_mode=WAL;PRAGMA synchronous=FULL;PRAGMA foreign_keys=ON;"
                    # A shared commit's savepoint journal (and RETURNING's table) in memory:
                    # on disk it spilled to a new temporary file each commit
                    # (docs/PERFORMANCE.md, "Figures from code comments").
                    "PRAGMA temp_store=MEMORY;"
                    # A backstop: `pocolobby serve` checkpoints on a thread of its own
                    # (lobbies/fastlane/sqlite/checkpoints.py); 10x the default otherwise.
                    f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES};"
                ),
            },
            "TEST": {"NAME": os.environ.get("POCOLOBBY_TEST_SQLITE") or None},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CHANNEL_LAYERS = (
    {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # channels_redis blocks 5 s in BZPOPMIN; redis-py's default socket timeout is
            # also 5 s, which turns an idle receive into an error (django/channels_redis#422).
            "CONFIG": {
                "hosts": [
                    {
                        "address": os.environ["REDIS_URL"],
                        "socket_timeout": 15,
                        "socket_connect_timeout": 5,
                    }
                ]
            },
        }
    }
    if os.environ.get("REDIS_URL")
    else {"default": {"BACKEND": "lobbies.fastlane.channel_layer.InMemoryChannelLayer"}}
)

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [PAGE_ASSETS_DIR / "static"]
STORAGES = {
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

SESSION_COOKIE_NAME = "__Host-pocolobby-admin"
CSRF_COOKIE_NAME = "__Host-pocolobby-csrf"
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_SAMESITE = "Strict"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        # NONCE becomes this response's nonce: no inline script runs without it.
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": [SELF],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("POCOLOBBY_LOG_LEVEL", "INFO")},
    "loggers": {
        # Request lines name paths only; bodies and headers are never logged.
        "django.request": {"level": "ERROR"},
        "uvicorn": {"level": "WARNING"},
    },
}

# The admin's static files come from the installed packages; no collectstatic step.
WHITENOISE_USE_FINDERS = True
DATA_UPLOAD_MAX_MEMORY_SIZE = BOUNDS.request_bytes
# /v1 views run on worker threads (lobbies/api/http.py); 0 keeps them on the caller's thread.
API_THREADS = os.environ.get("POCOLOBBY_API_THREADS", "1") != "0"
# /v1 writes queued together on the embedded store share one commit (pocolobby/asgi.py);
# 0 gives each its own, for benchmarks/shared_commit.py to measure what sharing buys.
SHARED_COMMIT = os.environ.get("POCOLOBBY_SHARED_COMMIT", "1") != "0"
