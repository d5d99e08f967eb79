"""The web admin: server-rendered pages, the JSON API under /api/v1, tokens and signed links."""

from gpusteward.web.app import create_web_app

__all__ = ["create_web_app"]
