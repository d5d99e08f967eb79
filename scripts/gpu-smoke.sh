#!/usr/bin/env bash
# Smoke test of `source: nvml` and `gpusteward exporter` on a machine with an NVIDIA GPU.
#
# Installs gpusteward with its nvml extra into a throw-away venv (system packages visible,
# so an installed PyTorch or CuPy is used), starts a small real GPU job (compute for
# COMPUTE_S seconds, then idle for IDLE_S seconds holding HOLD_GIB GiB), and checks that:
#   1. during compute the exporter reports the GPU busy and the job's PID on it;
#   2. `gpusteward scan --source nvml` observes the node and its workload;
#   3. `gpusteward run` (dry-run, 5 s ticks, a zombie rule with a 1-minute window) records a
#      zombie finding for the job once it sits idle holding memory.
# Nothing is stopped: the run is a dry-run. Exit code 0 only when every check passed.
#
#   scripts/gpu-smoke.sh            # COMPUTE_S=60 IDLE_S=180 HOLD_GIB=2 PORT=19835
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
COMPUTE_S=${COMPUTE_S:-60}
IDLE_S=${IDLE_S:-180}
HOLD_GIB=${HOLD_GIB:-2}
PORT=${PORT:-19835}
TICK_S=5
NODE=smoke
PY=${PYTHON:-python3}

command -v nvidia-smi >/dev/null || { echo "FAIL: nvidia-smi not found: this is not a GPU machine" >&2; exit 2; }
nvidia-smi -L
nvidia-smi --query-gpu=index,name,driver_version,memory.used,utilization.gpu --format=csv

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs kept in $WORK"
}
trap cleanup EXIT

echo "== installing gpusteward[nvml] into $WORK/venv"
$PY -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --upgrade pip
"$WORK/venv/bin/python" -m pip install --quiet -e "${REPO}[nvml]"
VPY="$WORK/venv/bin/python"
GS="$WORK/venv/bin/gpusteward"

cat > "$WORK/rules.yaml" <<'YAML'
rules:
  - name: zombie
    kind: zombie
    description: the default zombie rule with a 1-minute window, so the smoke test ends in minutes
    action: reclaim
    when: mean(gpu_util_pct, 1m) < 5 and last(mem_used_mib) > 1024
    message: "{gpu} averaged {util}% for {minutes} min while holding {mem_gib} GiB"
YAML
cat > "$WORK/smoke.yaml" <<YAML
tick_seconds: $TICK_S
source:
  name: nvml
  nvml: {node: $NODE}
store:
  url: sqlite:///$WORK/state.db
  window_minutes: 5
rules:
  use_default_pack: false
  files: [rules.yaml]
analysis:
  stale_after_seconds: 30
YAML

FAILED=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILED=1; }

echo "== starting the GPU job (compute ${COMPUTE_S}s, then idle ${IDLE_S}s holding ${HOLD_GIB} GiB)"
"$VPY" scripts/gpu_smoke_job.py --compute "$COMPUTE_S" --idle "$IDLE_S" --hold-gib "$HOLD_GIB" \
  --status "$WORK/job.status" > "$WORK/job.log" 2>&1 &
JOB=$!
PIDS+=("$JOB")
for _ in $(seq 1 120); do grep -q compute "$WORK/job.status" 2>/dev/null && break; sleep 1; done
grep -q compute "$WORK/job.status" || { cat "$WORK/job.log"; fail "the GPU job never started computing"; exit 1; }
echo "job PID $JOB: $(cat "$WORK/job.status")"

"$GS" exporter --port "$PORT" --address 127.0.0.1 --config "$WORK/smoke.yaml" > "$WORK/exporter.log" 2>&1 &
PIDS+=("$!")
"$GS" run --config "$WORK/smoke.yaml" --max-ticks $(( (COMPUTE_S + 100) / TICK_S )) -v > "$WORK/run.log" 2>&1 &
RUN=$!
PIDS+=("$RUN")
sleep 15

echo "== during compute: the exporter"
if "$VPY" - "$PORT" "$JOB" <<'PY'
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
port, job = sys.argv[1], sys.argv[2]
for _ in range(30):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        break
    except OSError:
        time.sleep(1)
else:
    sys.exit("exporter never answered")
m = {}
for f in text_string_to_metric_families(text):
    for s in f.samples:
        m.setdefault(s.name, []).append(s)
util = {s.labels["UUID"]: s.value for s in m.get("gpusteward_gpu_utilization_percent", [])}
held = {s.labels["UUID"]: s.value for s in m.get("gpusteward_process_gpu_memory_used_bytes", []) if s.labels["pid"] == job}
print("utilisation:", util)
print("job holds (bytes):", held)
busy = [u for u in held if util.get(u, 0) >= 50]
if not held:
    sys.exit("the job's PID is not on any GPU")
if not busy:
    sys.exit("no GPU the job holds is at >= 50 % utilisation during compute (a MIG instance has no utilisation in NVML)")
PY
then pass "exporter: GPU busy and the job's PID on it"; else fail "exporter check"; fi

echo "== during compute: gpusteward scan --source nvml"
# A state file of its own: the dry-run loop is writing to the other one.
if GPUSTEWARD_STORE__URL="sqlite:///$WORK/scan.db" "$GS" scan --config "$WORK/smoke.yaml" --json > "$WORK/scan.json"; then
  if "$VPY" - "$WORK/scan.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print({k: r[k] for k in ("source_ok", "gpus", "workloads", "errors")})
assert r["source_ok"] and r["gpus"] >= 1 and r["workloads"] >= 1, r
PY
  then pass "scan observed the node"; else fail "scan check"; fi
else
  fail "gpusteward scan --source nvml exited non-zero"
fi

echo "== waiting for the dry-run loop (the job goes idle at ${COMPUTE_S}s)"
wait "$RUN" || fail "gpusteward run exited non-zero (see $WORK/run.log)"
"$GS" explain "process:$NODE:$JOB" --config "$WORK/smoke.yaml" --json > "$WORK/explain.json" || true
if "$VPY" - "$WORK/explain.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
rules = [f.get("rule") for f in h.get("findings", [])]
print("findings:", rules)
for f in h.get("findings", []):
    print("evidence:", f.get("evidence"))
assert "zombie" in rules, h
PY
then pass "zombie finding recorded for the idle job"; else fail "no zombie finding"; fi

tail -n 5 "$WORK/run.log" || true
if [ "$FAILED" -ne 0 ]; then echo "gpu-smoke: FAILED"; exit 1; fi
echo "gpu-smoke: all checks passed"
