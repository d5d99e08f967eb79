#!/usr/bin/env bash
# Build the wheel and sdist, check them, install the wheel (not editable) into a fresh virtualenv
# and run it from outside the checkout: a data file the wheel lacks (templates, rule packs and
# presets, migrations, message templates, static files) fails here, not on a user's machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

rm -rf dist
"$PY" -m build --outdir dist . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
"$PY" -m twine check --strict dist/*
wheel="$(ls dist/*.whl)"

# What must be inside: one of each kind of package data.
"$PY" - "$wheel" <<'PYCHECK'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = [
    "gpusteward/analysis/rules/default.yaml",
    "gpusteward/analysis/rules/presets/naive.rules.yaml",
    "gpusteward/store/migrations/env.py",
    "gpusteward/store/migrations/script.py.mako",
    "gpusteward/notify/messages/en/owner.text.j2",
    "gpusteward/notify/messages/zh/owner.text.j2",
    "gpusteward/web/static/htmx.min.js",
    "gpusteward/web/static/style.css",
    "gpusteward/web/templates/base.html.j2",
    "gpusteward/report/templates/report.html.j2",
]
missing = [n for n in need if n not in names]
migrations = [n for n in names if n.startswith("gpusteward/store/migrations/versions/") and n.endswith(".py")]
if missing or not migrations:
    sys.exit(f"wheel lacks: {missing or 'store/migrations/versions/*.py'}")
print(f"wheel: {len(names)} files, {len(migrations)} migration(s)")
PYCHECK

python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --upgrade pip
"$WORK/venv/bin/python" -m pip install --quiet "$wheel"
# From an empty folder with its own state: nothing of the checkout can be picked up.
cd "$WORK"
export XDG_STATE_HOME="$WORK/state"
bin="$WORK/venv/bin"
"$bin/gpusteward" --version
"$bin/python" -c 'import gpusteward, sys; sys.exit("editable install?" if "site-packages" not in gpusteward.__file__ else 0)'
"$bin/gpusteward" demo --hours 2 --json >"$WORK/demo.json"
"$bin/python" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d, d' "$WORK/demo.json"
pack="$("$bin/python" -c 'import gpusteward.analysis as a, pathlib; print(pathlib.Path(a.__file__).parent / "rules")')"
for f in "$pack"/default.yaml "$pack"/presets/*.rules.yaml; do "$bin/gpusteward" rules check "$f"; done
"$bin/gpusteward" db upgrade  # the Alembic migrations, from the wheel
"$bin/gpusteward" report --out "$WORK/report" --period day >/dev/null  # the report template
test -s "$WORK/report/index.html"
echo "package OK: $(basename "$wheel")"
