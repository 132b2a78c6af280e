"""The dashboard's starlette application: the access token, the page, the JSON endpoints.

Owns: refusing every request without the dashboard's token (401 when none is given, 403
when a wrong one is: the token arrives once in the URL, is swapped for an HttpOnly
cookie and dropped from the address bar; scripts may send ``Authorization: Bearer``),
the routes (``/`` and its static files; ``/api/experiments``,
``/api/experiments/{id}?page=&per_page=``, ``/api/trials/{id}``), JSON that a browser
parses (NaN and infinities become null) and security headers (a strict
Content-Security-Policy on every response: no inline script, nothing from another
origin).
Must not: write to the store; query it other than through ``dethpc.surfaces.dashboard.data``.
"""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Awaitable, Callable, MutableMapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from dethpc.common.errors import DethpcError, NotFoundError
from dethpc.store import Store
from dethpc.surfaces.dashboard import data

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: static files served from this package's ``static/`` folder, with their media types
STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def cookie_name(port: int) -> str:
    """Cookies are not kept apart by port: two dashboards on one host need two names."""
    return f"dethpc_dashboard_{port}"


class TokenGate:
    """ASGI middleware: a request passes only with the token (query ``token``, the
    cookie, or ``Authorization: Bearer``); a page opened with ``?token=`` is answered
    with the cookie and a redirect to the same address without it."""

    def __init__(self, app: ASGIApp, token: str, cookie: str) -> None:
        self.app, self.token, self.cookie = app, token, cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        query = dict(parse_qsl(request.url.query, keep_blank_values=True))
        given = query.get("token")
        auth = request.headers.get("authorization", "")
        if given is None and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        from_query = "token" in query
        if given is None:
            given = request.cookies.get(self.cookie)
        if given is None:
            response: Response = PlainTextResponse(
                "401: this dashboard needs its access token: open the URL that "
                "`dethpc dashboard` printed (it ends in ?token=...)\n", status_code=401)
        elif not hmac.compare_digest(given.encode(), self.token.encode()):
            response = PlainTextResponse(
                "403: wrong access token for this dashboard: open the URL that "
                "`dethpc dashboard` printed\n", status_code=403)
        elif from_query and request.method == "GET" and not scope["path"].startswith("/api/"):
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            response = RedirectResponse(scope["path"] + (f"?{rest}" if rest else ""), 303)
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict",
                                path="/")
        else:
            await self.app(scope, receive, _with_headers(send))
            return
        await response(scope, receive, _with_headers(send))


def _with_headers(send: Send) -> Send:
    """``send`` adding the security headers to every response (404s included)."""
    extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def wrapped(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            names = {k.lower() for k, _ in message.get("headers", [])}
            message["headers"] = [*message.get("headers", []),
                                  *[(k, v) for k, v in extra if k not in names]]
        await send(message)
    return wrapped


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (``JSON.parse`` accepts neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_response(body: Any, status: int = 200) -> Response:
    text = json.dumps(_finite(body), separators=(",", ":"), default=str, allow_nan=False)
    return Response(text, status_code=status, media_type="application/json")


def _static(name: str) -> bytes:
    return (resources.files("dethpc.surfaces.dashboard") / "static" / name).read_bytes()


def create_app(store: Store, user: str, token: str, port: int) -> ASGIApp:
    """The dashboard for ``user`` over ``store``, behind ``token``."""
    owner = data.visible_owner(store.role, user)
    page = _static("index.html")
    static = {name: _static(name) for name in STATIC}

    def index(request: Request) -> Response:
        return Response(page, media_type="text/html; charset=utf-8")

    def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:
            return PlainTextResponse("404: no such file\n", status_code=404)
        return Response(static[name], media_type=STATIC[name])

    def guarded(read: Callable[[Request], Any]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                return json_response(read(request))
            except NotFoundError as exc:
                return json_response({"error": str(exc)}, 404)
            except DethpcError as exc:
                return json_response({"error": str(exc)}, 400)
        return endpoint

    def experiments(request: Request) -> Any:
        rows = data.experiments(store, owner)
        return {"user": user, "all_users": owner is None, "experiments": rows,
                "untracked": data.untracked(store, user, rows)}

    def experiment(request: Request) -> Any:
        q = request.query_params
        return data.experiment_page(store, request.path_params["exp_id"], owner,
                                    data.Page.parse(q.get("page"), q.get("per_page")))

    def trial(request: Request) -> Any:
        return data.trial_page(store, request.path_params["trial_id"], owner)

    # sync endpoints: starlette runs them in its thread pool (the store is synchronous)
    routes = [
        Route("/", index),
        Route("/static/{name}", static_file),
        Route("/api/experiments", guarded(experiments)),
        Route("/api/experiments/{exp_id:int}", guarded(experiment)),
        Route("/api/trials/{trial_id:int}", guarded(trial)),
    ]
    app = Starlette(routes=routes)
    return TokenGate(app, token, cookie_name(port))
