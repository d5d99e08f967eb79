"""The server-rendered pages (Jinja; htmx for the live parts and the rule preview), one router
per area.

Every page needs a login (a session made from an API token); anonymous requests are sent to
the login page. Forms carry the session's CSRF value. The one-click links from notices need no
login (``links``).
"""

from __future__ import annotations

from gpusteward.report.charts import bar_chart, hbar_chart
from gpusteward.report.line_chart import line_chart
from gpusteward.web.pages import browse, consolidation, controls, links, login, rollout, rules, showback
from gpusteward.web.pages.base import message, render

#: In the order they are included; no two share a path and method.
ROUTERS = (
    login.router,
    browse.router,
    controls.router,
    rules.router,
    consolidation.router,
    rollout.router,
    showback.router,
    links.router,
)

__all__ = ["ROUTERS", "bar_chart", "hbar_chart", "line_chart", "message", "render"]
