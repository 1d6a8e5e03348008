#!/usr/bin/env bash
# GPU check of the node agent, for a maintainer on a machine with an NVIDIA
# GPU and driver (CI has none and does not run this; its tests use recorded
# NVML/DCGM outputs and a stub libnvidia-ml, tests/it/agent_nvml.rs).
#
#   tests/gpu/run.sh                  # from the repository root
#   DCGM_EXPORTER_URL=http://127.0.0.1:9400/metrics tests/gpu/run.sh
#
# It builds the agent as the agent image does (glibc, `--features nvml`),
# runs it once in its kubeconfig-less dry mode (`rebound agent --once
# --dry-run`: prints the faults, conditions and what the sources found as
# JSON, writes nothing), and checks:
#   1. identity: NVML loaded the driver and lists the GPUs `nvidia-smi -L` lists;
#   2. health: the faults the agent would report now (none on a healthy GPU);
#   3. DCGM, where `dcgmi` is installed: a short `dcgmi diag -r 1` through the
#      agent's DCGM source (it loads the GPUs for about a minute: not while a
#      job trains);
#   4. dcgm-exporter, where DCGM_EXPORTER_URL is set: the agent reads it.
# The kernel log is read when /dev/kmsg is readable (root), else skipped.
# Exit status: 0 all checks passed, 1 a check failed, 2 not a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

say() { printf '%s\n' "$*" >&2; }
fail=0
check() { # check NAME CONDITION-RESULT(0/1) DETAIL
  if [ "$2" = 0 ]; then say "PASS  $1"; else say "FAIL  $1: $3"; fail=1; fi
}

command -v nvidia-smi >/dev/null || { say "no nvidia-smi: not a GPU machine"; exit 2; }
command -v python3 >/dev/null || { say "python3 is needed to read the JSON report"; exit 2; }
nvidia-smi -L >/dev/null || { say "nvidia-smi -L failed: is the driver loaded?"; exit 2; }

say "== building the agent (cargo build --locked --features nvml)"
cargo build --locked --features nvml --bin rebound >&2
bin=target/debug/rebound

args=(agent --once --dry-run --node-name "$(hostname)")
if [ -r /dev/kmsg ] && head -c0 /dev/kmsg 2>/dev/null; then
  say "== kernel log: /dev/kmsg"
else
  say "== kernel log: /dev/kmsg not readable (run as root to include it); skipped"
  args+=(--kmsg false)
fi
if command -v dcgmi >/dev/null; then
  say "== DCGM: dcgmi found, the agent runs dcgmi diag -r 1 and dcgmi health"
  args+=(--dcgm true --dcgm-level 1 --dcgm-timeout 10m)
  have_dcgm=1
else
  say "== DCGM: no dcgmi; diag skipped"
  args+=(--dcgm false)
  have_dcgm=0
fi
if [ -n "${DCGM_EXPORTER_URL:-}" ]; then
  say "== dcgm-exporter: $DCGM_EXPORTER_URL"
  args+=(--dcgm-exporter-url "$DCGM_EXPORTER_URL")
fi

report=$(mktemp)
trap 'rm -f "$report"' EXIT
say "== running: $bin ${args[*]}"
RUST_LOG=${RUST_LOG:-info} "$bin" "${args[@]}" >"$report"
cat "$report"

# The checks: a failing one is reported and the others still run.
set +e

# 1. identity: NVML is up and names the same GPUs as nvidia-smi.
smi=$(nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader)
python3 - "$report" "$smi" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
want = []
for line in sys.argv[2].strip().splitlines():
    index, name, uuid = [p.strip() for p in line.split(",", 2)]
    want.append(f"GPU {index}: {name} ({uuid})")
found = report.get("found", [])
ok = report.get("sources", {}).get("nvml") is True and [f for f in found if f.startswith("GPU ")] == want
print("identity", "ok" if ok else "mismatch", json.dumps({"nvml": found, "nvidia-smi": want}, indent=1), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
check "identity (NVML sees the GPUs nvidia-smi sees)" $? "see above"

# 2. health: what the agent would report now.
python3 - "$report" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for f in r["faults"]:
    w = f["fault"]
    print(f"  fault: {w['source']}/{w['code']} device={w.get('device')} x{f['count']}: {w.get('message', '')}", file=sys.stderr)
print(f"  {len(r['faults'])} fault(s), {r['parse_errors']} unparsed kernel-log line(s)", file=sys.stderr)
sys.exit(0 if not r["faults"] else 1)
PY
check "health (no fault reported on this node)" $? "the faults above would be reported: check them with nvidia-smi -q"

# 3. DCGM diag through the agent.
if [ "$have_dcgm" = 1 ]; then
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("sources",{}).get("dcgm") is True else 1)' "$report"
  check "DCGM (dcgmi diag -r 1 ran and was understood)" $? "the dcgm source is down: is nv-hostengine running? (diag is also skipped while compute processes run on the GPUs)"
fi
# 4. dcgm-exporter.
if [ -n "${DCGM_EXPORTER_URL:-}" ]; then
  python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("sources",{}).get("dcgm_exporter") is True else 1)' "$report"
  check "dcgm-exporter (scraped)" $? "not reachable at $DCGM_EXPORTER_URL"
fi

exit "$fail"
