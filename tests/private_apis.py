"""The private Django, Channels, uvicorn (and WhiteNoise) names we lean on: one list.

tests/lobbies/test_fastlane_private_apis.py checks each against the installed libraries (so an
upgrade fails there, by name) and that lobbies/fastlane/README.md's table is this list's rendering
(`python -m tests.private_apis` prints it).

`kind` says what is checked:
- "method": the owner has it, callable, with exactly `params` (inspect.signature, `self` out);
- "assigned": the owner's own source (or its bases') sets `self.<name>` (an instance attribute);
- "attribute": the owner has it (a class attribute, property or module-level value);
- "stub": django-stubs' file for the owner module defines it (used only in annotations);
- "ours": an attribute of our own set on the owner's objects: the owner must NOT have it.
"""

from __future__ import annotations

from dataclasses import dataclass

SQLITE = "django.db.backends.sqlite3.base.DatabaseWrapper"
BASE = "django.db.backends.base.base.BaseDatabaseWrapper"
HTTPTOOLS = "uvicorn.protocols.http.httptools_impl.HttpToolsProtocol"
CYCLE = "uvicorn.protocols.http.httptools_impl.RequestResponseCycle"
LAYER = "channels.layers.InMemoryChannelLayer"

STORE = "lobbies/fastlane/store.py"
BACKEND = "lobbies/fastlane/sqlite/base.py"
SERVER = "lobbies/fastlane/server.py"
LAYER_FILE = "lobbies/fastlane/channel_layer.py"
LANE = "lobbies/fastlane/lane.py"

NO_RECORD_OF_TRANSACTION = (
    "our write lock or savepoint stack is never released or cleared: every later write "
    "waits 30 s and fails `database is locked`"
)


@dataclass(frozen=True)
class PrivateName:
    owner: str  # dotted path of the third-party module or class
    name: str
    kind: str  # "method", "assigned", "attribute" or "stub"
    used_in: str
    why: str
    breaks: str
    params: tuple[str, ...] = ()  # for "method": the parameters we pass or receive

    @property
    def qualified(self) -> str:
        return f"{self.owner}.{self.name}"


PRIVATE_NAMES: tuple[PrivateName, ...] = (
    # ---------------------------------------------------------------- lobbies/fastlane/store.py
    PrivateName(
        "django.db.backends.sqlite3.base",
        "FORMAT_QMARK_REGEX",
        "attribute",
        STORE,
        "`_qmark` turns `%s` into SQLite's `?` exactly as Django's SQLite cursor does, so a "
        "statement can go straight to the driver",
        "ImportError at startup; or, if Django's placeholder rule changes, the store's SQL "
        "and Django's differ (the test compares `_qmark` with `convert_query`)",
    ),
    PrivateName(
        "django.db.backends.sqlite3.base.SQLiteCursorWrapper",
        "convert_query",
        "method",
        "tests/lobbies/test_fastlane_private_apis.py",
        "the rule `lobbies/fastlane/store.py`'s `_qmark` copies; the test holds the two equal",
        "nothing at run time; the equality test can no longer compare",
        ("query", "param_names"),
    ),
    PrivateName(
        "django.db.models.base",
        "ModelState",
        "attribute",
        STORE,
        "`_instance` builds a model instance with `__new__` and a hand-set `_state` "
        "(adding=False, db=alias) instead of `Model.__init__` (much cheaper per row)",
        "instances miss state Django's `from_db` sets (the test compares the two): saves "
        "INSERT instead of UPDATE, or related lookups fail",
    ),
    PrivateName(
        "django.db.models.base.ModelState",
        "adding",
        "attribute",
        STORE,
        "set False on each row built by `_instance`, as `from_db` does",
        "`save()` of a row read by the store would try an INSERT",
    ),
    PrivateName(
        "django.db.models.base.ModelState",
        "db",
        "attribute",
        STORE,
        "set to the connection's alias by `_instance`, as `from_db` does",
        "related lookups and saves of such rows go to the wrong database or fail",
    ),
    PrivateName(
        "django.dispatch.dispatcher.Signal",
        "receivers",
        "assigned",
        STORE,
        "`_instance` takes the fast path only while pre_init/post_init have no receivers",
        "AttributeError on every read of the send path",
    ),
    PrivateName(
        "django.db.models.fields.Field",
        "get_col",
        "method",
        STORE,
        "`_reader` builds the column expression the ORM's converters take",
        "the store cannot build its column readers: every hand-written SELECT fails",
        ("alias", "output_field"),
    ),
    PrivateName(
        "django.db.models.expressions.Col",
        "get_db_converters",
        "method",
        STORE,
        "`_reader` applies the same per-column converters the ORM would (JSON, datetimes)",
        "rows read by the store are not converted as the ORM's are",
        ("connection",),
    ),
    PrivateName(
        "django.db.backends.base.operations.BaseDatabaseOperations",
        "get_db_converters",
        "method",
        STORE,
        "the backend's half of the converters above",
        "rows read by the store are not converted as the ORM's are",
        ("expression",),
    ),
    PrivateName(
        "django.db.backends.base.operations.BaseDatabaseOperations",
        "adapt_datetimefield_value",
        "method",
        STORE,
        "`_db_time`/`as_db_time` adapt datetimes for hand-written SQL as the ORM stores them",
        "datetimes written by the store differ from the ORM's (wrong comparisons, order)",
        ("value",),
    ),
    PrivateName(
        "django.db.backends.sqlite3.operations.DatabaseOperations",
        "convert_datetimefield_value",
        "method",
        STORE,
        "`time_reader` reads SQLite's datetimes in a time zone other than UTC as the ORM does",
        "pages read with a non-UTC connection time zone fail",
        ("value", "expression", "connection"),
    ),
    PrivateName(
        BASE,
        "timezone",
        "attribute",
        STORE,
        "`_convert`, `_db_time`, `time_reader` skip Django's converter when it is UTC",
        "AttributeError on every read and write of the send path",
    ),
    PrivateName(
        BASE,
        "validate_thread_sharing",
        "method",
        STORE,
        "`_run` makes Django's checks before running a statement on the driver directly",
        "the direct path fails, or runs without the thread check",
    ),
    PrivateName(
        BASE,
        "validate_no_broken_transaction",
        "method",
        STORE,
        "as above: a statement in a broken atomic block raises as through Django's cursor",
        "the direct path fails, or runs in a broken transaction",
    ),
    PrivateName(
        BASE,
        "wrap_database_errors",
        "attribute",
        STORE,
        "driver errors on the direct path become Django's (IntegrityError, OperationalError)",
        "callers catching Django's errors see sqlite3's instead",
    ),
    PrivateName(
        BASE,
        "execute_wrappers",
        "assigned",
        STORE,
        "the direct path is taken only when no execute wrapper is installed",
        "AttributeError on every statement of the store",
    ),
    PrivateName(
        BASE,
        "queries_logged",
        "attribute",
        f"{STORE}, {BACKEND}",
        "the direct path is taken only when Django logs no queries (DEBUG, "
        "CaptureQueriesContext); the backend overrides it to read DEBUG once",
        "queries are hidden from DEBUG logging and tests' query counts, or the override "
        "stops being consulted",
    ),
    PrivateName(
        BASE,
        "force_debug_cursor",
        "assigned",
        BACKEND,
        "read by our `queries_logged` as Django's is",
        "AttributeError on every statement",
    ),
    PrivateName(
        "django.db.backends.utils",
        "_SQLType",
        "stub",
        STORE,
        "django-stubs' own type of one SQL parameter: the store's `Params`",
        "mypy fails (types only; nothing at run time)",
    ),
    # ---------------------------------------------------------------- lobbies/fastlane/sqlite/
    PrivateName(
        SQLITE,
        "_start_transaction_under_autocommit",
        "method",
        BACKEND,
        "takes the process's write lock before `BEGIN IMMEDIATE`, and runs BEGIN on the driver",
        "no lock: concurrent sends wait in SQLite's busy handler again (slow, then `database "
        "is locked`)",
    ),
    PrivateName(
        BASE,
        "_commit",
        "method",
        BACKEND,
        "releases the write lock and forgets our savepoints after a commit",
        NO_RECORD_OF_TRANSACTION,
    ),
    PrivateName(
        BASE,
        "_rollback",
        "method",
        BACKEND,
        "as `_commit`, after a rollback",
        NO_RECORD_OF_TRANSACTION,
    ),
    PrivateName(
        BASE,
        "_close",
        "method",
        BACKEND,
        "as `_commit`, when the connection closes mid-transaction",
        NO_RECORD_OF_TRANSACTION,
    ),
    PrivateName(
        BASE,
        "_savepoint",
        "method",
        BACKEND,
        "savepoints named by depth (the driver's statement cache keeps them) and merged into "
        "the enclosing one when nothing was written (a shared commit's requests)",
        "savepoints are Django's again: more SQL a send, and our stack goes out of step",
        ("sid",),
    ),
    PrivateName(
        BASE,
        "_savepoint_commit",
        "method",
        BACKEND,
        "RELEASE of our depth-named savepoint",
        "RELEASE of a savepoint name that does not exist: the send fails",
        ("sid",),
    ),
    PrivateName(
        BASE,
        "_savepoint_rollback",
        "method",
        BACKEND,
        "ROLLBACK TO our depth-named savepoint",
        "a failing request of a shared commit cannot be rolled back alone",
        ("sid",),
    ),
    PrivateName(
        SQLITE,
        "_savepoint_allowed",
        "method",
        BACKEND,
        "an optimistic shared commit (`optimistic_commit`) opens no savepoints",
        "every request of a shared commit pays its savepoint again (9% of a send)",
    ),
    PrivateName(
        BASE,
        "needs_rollback",
        "assigned",
        BACKEND,
        "a property here: Django setting it inside an optimistic shared commit abandons the "
        "batch (`SharedCommitAbandoned`), to be served again in savepoints",
        "a failed request's atomic block goes unnoticed and its partial writes are committed "
        "with the batch",
    ),
    PrivateName(
        SQLITE,
        "transaction_mode",
        "assigned",
        BACKEND,
        "the configured `BEGIN IMMEDIATE`, run on the driver by our BEGIN",
        "BEGIN without IMMEDIATE: deadlocks between readers that turn writers",
    ),
    # ---------------------------------------------------------------- lobbies/fastlane/server.py
    PrivateName(
        HTTPTOOLS,
        "connection_made",
        "method",
        SERVER,
        "`HeaderDeadline` wraps the transport (`OneWritePerTurn`) and arms the header timer",
        "no header deadline (a half request holds a connection forever) and two writes an answer",
        ("transport",),
    ),
    PrivateName(
        HTTPTOOLS,
        "data_received",
        "method",
        SERVER,
        "counts header bytes to answer 431 past `POCOLOBBY_HEADER_BYTES`",
        "headers of any size are buffered",
        ("data",),
    ),
    PrivateName(
        HTTPTOOLS,
        "connection_lost",
        "method",
        SERVER,
        "disarms the timer",
        "a timer fires on a closed connection",
        ("exc",),
    ),
    PrivateName(
        HTTPTOOLS,
        "send_400_response",
        "method",
        SERVER,
        "answers 431 (the API's error shape) instead of 400 when headers are too large",
        "too-large headers get uvicorn's plain 400",
        ("msg",),
    ),
    PrivateName(
        HTTPTOOLS,
        "handle_websocket_upgrade",
        "method",
        SERVER,
        "flushes and unwraps the transport before the socket's protocol takes it",
        "a WebSocket's frames are written behind unflushed bytes, or through the wrapper",
    ),
    PrivateName(
        HTTPTOOLS,
        "on_message_begin",
        "method",
        SERVER,
        "starts the header deadline of the next request on a kept-alive connection",
        "a second request's headers have no deadline",
    ),
    PrivateName(
        HTTPTOOLS,
        "on_headers_complete",
        "method",
        SERVER,
        "measures the headers (431) and starts the body's stall timer",
        "no header bound, no body deadline (408)",
    ),
    PrivateName(
        HTTPTOOLS,
        "on_body",
        "method",
        SERVER,
        "notes when a piece of the body last arrived",
        "a slow but moving upload is cut as stalled",
        ("body",),
    ),
    PrivateName(
        HTTPTOOLS,
        "on_message_complete",
        "method",
        SERVER,
        "stops the body timer",
        "a finished request is answered 408",
    ),
    PrivateName(
        HTTPTOOLS,
        "loop",
        "assigned",
        SERVER,
        "the timers are armed on the protocol's loop",
        "AttributeError on the first connection",
    ),
    PrivateName(
        HTTPTOOLS,
        "transport",
        "assigned",
        SERVER,
        "replaced by `OneWritePerTurn`; closed on a deadline; written for 408/431",
        "AttributeError on the first connection",
    ),
    PrivateName(
        HTTPTOOLS,
        "flow",
        "assigned",
        SERVER,
        "`flow.read_paused`: uvicorn's flow control paused reading, which is not a stall",
        "a body uvicorn paused is answered 408",
    ),
    PrivateName(
        "uvicorn.protocols.http.flow_control.FlowControl",
        "read_paused",
        "assigned",
        SERVER,
        "as above",
        "a body uvicorn paused is answered 408",
    ),
    PrivateName(
        HTTPTOOLS,
        "cycle",
        "assigned",
        SERVER,
        "the request in progress, told it was disconnected when its body timed out",
        "a timed-out upload keeps waiting for its body",
    ),
    PrivateName(
        HTTPTOOLS,
        "url",
        "assigned",
        SERVER,
        "its length counts toward the header bound",
        "AttributeError: every request is refused",
    ),
    PrivateName(
        HTTPTOOLS,
        "headers",
        "assigned",
        SERVER,
        "their length counts toward the header bound",
        "AttributeError: every request is refused",
    ),
    PrivateName(
        CYCLE,
        "response_started",
        "assigned",
        SERVER,
        "408 is written only when nothing was answered yet",
        "a second status line is written into an answer",
    ),
    PrivateName(
        CYCLE,
        "disconnected",
        "assigned",
        SERVER,
        "set on a body timeout, so the application reads a disconnect and answers nothing",
        "the application waits for a body that never comes",
    ),
    PrivateName(
        CYCLE,
        "message_event",
        "assigned",
        SERVER,
        "set on a body timeout, to wake the application's receive()",
        "the application waits for a body that never comes",
    ),
    PrivateName(
        "uvicorn.Server",
        "startup",
        "method",
        SERVER,
        "`BrokerServer` starts the dispatcher once the sockets listen (not ASGI lifespan)",
        "the dispatcher never starts: no retries, schedules or retention",
        ("sockets",),
    ),
    # ------------------------------------------------------- lobbies/fastlane/channel_layer.py
    PrivateName(
        LAYER,
        "_clean_expired",
        "method",
        LAYER_FILE,
        "our subclass sweeps expired messages and memberships at most once a second",
        "every receive and group_send walks every channel again (1,000 sockets: slow wakes)",
    ),
    PrivateName(
        LAYER,
        "groups",
        "assigned",
        LAYER_FILE,
        "our `group_send` reads the group's members (group -> channel -> joined at)",
        "every wake of an agent fails",
    ),
    PrivateName(
        LAYER,
        "group_send",
        "method",
        LAYER_FILE,
        "overridden: members sent to in turn, without a task per member",
        "our override drifts from the stock layer's semantics (its checks, full channels)",
        ("group", "message"),
    ),
    PrivateName(
        "channels.consumer.AsyncConsumer",
        "dispatch",
        "method",
        "lobbies/push/consumers.py",
        "overridden without channels' `aclose_old_connections()` hop before every handler",
        "if channels moves work into dispatch, the stream's consumer silently skips it",
        ("message",),
    ),
    PrivateName(
        "channels.consumer",
        "get_handler_name",
        "attribute",
        "lobbies/push/consumers.py",
        "our `dispatch` finds the handler as channels' does",
        "ImportError at startup",
    ),
    # ---------------------------------------------------------------- the /v1 lane
    PrivateName(
        "django.core.handlers.asgi.ASGIRequest",
        "__init__",
        "method",
        f"{LANE}, tests/fast_lane.py",
        "the /v1 lane builds Django's request from the ASGI scope itself and calls the view "
        "beside Django's handler (no middleware, no request signals: `in_worker_thread` "
        "closes stale connections instead)",
        "every /v1 request fails",
        ("scope", "body_file"),
    ),
    PrivateName(
        "django.http.HttpRequest",
        "_pocolobby_upload",
        "ours",
        "lobbies/api/views.py",
        "our own attribute on Django's request (an upload's body read once); it must NOT "
        "exist on Django's class",
        "a Django attribute of that name would be overwritten",
    ),
    # ---------------------------------------------------------------- static files
    PrivateName(
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "find_file",
        "method",
        "pocolobby/middleware.py",
        "`StaticFiles` (async-capable) finds a static file as WhiteNoise's middleware does "
        "when it refreshes (development)",
        "static files 404 with autorefresh on",
        ("url",),
    ),
    PrivateName(
        "whitenoise.base.WhiteNoise",
        "files",
        "assigned",
        "pocolobby/middleware.py",
        "the table of static files WhiteNoise built at startup, read without its middleware",
        "every static file 404s (styles, htmx)",
    ),
    PrivateName(
        "whitenoise.base.WhiteNoise",
        "autorefresh",
        "assigned",
        "pocolobby/middleware.py",
        "chooses between the two lookups above",
        "AttributeError on every page",
    ),
    PrivateName(
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "serve",
        "method",
        "pocolobby/middleware.py",
        "answers the found file as WhiteNoise does (headers, ranges, compressed variants)",
        "every static file fails",
        ("static_file", "request"),
    ),
    # ---------------------------------------------------------------- schema checks
    PrivateName(
        "django.db.backends.base.schema.BaseDatabaseSchemaEditor",
        "_create_index_name",
        "method",
        "lobbies/storage/discipline.py, lobbies/migrations/0018_fewer_indexes_per_send.py",
        "the store's shape check (and migration 0018) names indexes as migrations do",
        "`pocolobby doctor`/startup report a healthy store as the wrong shape",
        ("table_name", "column_names", "suffix"),
    ),
)

# Names a subclass of ours adds to a third-party class: none may be one of the base's own
# (else ours silently replaces Django's, uvicorn's or channels' attribute).
OUR_SUBCLASSES: tuple[tuple[str, str], ...] = (
    ("lobbies.fastlane.sqlite.base.DatabaseWrapper", SQLITE),
    ("lobbies.fastlane.server.HeaderDeadline", HTTPTOOLS),
    ("lobbies.fastlane.channel_layer.InMemoryChannelLayer", LAYER),
)


def render() -> str:
    """The table lobbies/fastlane/README.md holds, from PRIVATE_NAMES."""
    lines = ["| private name | used in | why | what breaks if it changes |", "|---|---|---|---|"]
    for entry in PRIVATE_NAMES:
        shape = f"({', '.join(entry.params)})" if entry.kind == "method" else ""
        lines.append(
            f"| `{entry.qualified}{shape}` | {entry.used_in} | {entry.why} | {entry.breaks} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
