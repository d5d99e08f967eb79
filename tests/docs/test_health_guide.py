"""The GPU-health guide's Xid table is ``domain.health.XIDS``, row for row."""

from __future__ import annotations

import re
from pathlib import Path

from gpusteward.domain.health import XIDS

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "gpu-health.md"


def test_the_guides_xid_table_matches_the_domain_table() -> None:
    rows = re.findall(r"^\| (\d+) \| (.+?) \| (\w+) \| (.+?) \|$", GUIDE.read_text(), re.MULTILINE)
    documented = {int(code): (meaning, impact, action) for code, meaning, impact, action in rows}
    assert documented == {x.code: (x.meaning, x.impact.value, x.action) for x in XIDS.values()}


def test_the_guide_names_every_health_field() -> None:
    from gpusteward.domain.models import HEALTH_METRICS

    text = GUIDE.read_text()
    assert all(f"| `{m.value}` |" in text for m in HEALTH_METRICS)
