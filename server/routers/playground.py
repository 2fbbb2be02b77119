"""GET /playground: a browser page to try the API (chat, speech, transcription, embeddings).

Plain HTML, CSS and JavaScript modules shipped in the package (server/playground/), no build step and nothing
fetched from elsewhere. The page and its assets need no API key (server.middleware opens them); the page's own
API calls send the key the user types in. The files are read once: they change only with the package.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from server.errors import NotFound

router = APIRouter(tags=["playground"], include_in_schema=False)

# Browsers revalidate on every load (the names carry no content hash) and get a 304 while the ETag holds.
_CACHE_CONTROL = "no-cache"
# The page reaches only this server; audio it makes plays from blob: URLs.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self' blob:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
_MEDIA_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8",
                "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}
ASSETS = ("index.html", "api.js", "app.js", "style.css", "icon.svg")


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


@cache
def asset(name: str) -> Asset:
    """One of the page's files from the package, with its media type and a strong ETag of its bytes."""
    body = (resources.files("server") / "playground" / name).read_bytes()
    return Asset(body, _MEDIA_TYPES[name.rsplit(".", 1)[-1]], '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def _serve(name: str, request: Request) -> Response:
    file = asset(name)
    headers = {"Cache-Control": _CACHE_CONTROL, "ETag": file.etag, "X-Content-Type-Options": "nosniff"}
    if name.endswith(".html"):
        headers |= {"Content-Security-Policy": _CSP, "Referrer-Policy": "no-referrer"}
    if file.etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    return Response(file.body, media_type=file.media_type, headers=headers)


@router.get("/playground")
async def playground(request: Request) -> Response:
    """The playground page."""
    return _serve("index.html", request)


@router.get("/playground/")
async def playground_slash() -> RedirectResponse:
    """The page lives without the slash, so its relative asset paths resolve under /playground/."""
    return RedirectResponse("/playground", status_code=308)


@router.get("/playground/{name}")
async def playground_asset(name: str, request: Request) -> Response:
    """The page's scripts, style sheet and icon; nothing else under the folder is served."""
    if name not in ASSETS or name == "index.html":
        raise NotFound(f"No playground file named {name!r}.")
    return _serve(name, request)
