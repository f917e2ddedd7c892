#!/bin/sh
# Usage: bench/decflood/run.sh PORTCULLIS_BINARY [SECONDS] [RATE] [KINDS]
# Runs a real gateway (SQLite, default decision limits: 100/s, burst 2000)
# and a real proxy, floods the proxy with RATE cheap denials a second for
# SECONDS (plus an allowed call a second and one chosen denial of another
# kind), waits for shipping and summaries, then counts what
# `portcullis logs -o json` and the proxy's decisions.jsonl (rotated at
# 256 KiB, one old file kept) hold.
set -eu
BIN=$1; SECS=${2:-10}; RATE=${3:-600}; KINDS=${4:-1}
D=$(mktemp -d /tmp/decflood-run.XXXXXX)
export PORTCULLIS_BOOTSTRAP_TOKEN=pcs_decflood-bench-token-0123456789abcdef
export PORTCULLIS_TOKEN=$PORTCULLIS_BOOTSTRAP_TOKEN PORTCULLIS_GATEWAY=http://127.0.0.1:17070
"$BIN" gateway --listen 127.0.0.1:17070 --data-dir "$D/gw" --dev-allow-loopback >"$D/gw.log" 2>&1 &
GW=$!
trap 'kill $PX $GW 2>/dev/null; wait 2>/dev/null' EXIT
PX=
until "$BIN" sandbox list >/dev/null 2>&1; do sleep 0.2; done
cat >"$D/policy.yaml" <<'YAML'
version: 1
network_policies:
  up:
    endpoints:
      - { host: 127.0.0.1, port: 18099, protocol: rest, enforcement: enforce, access: read-only }
    binaries: []
YAML
"$BIN" sandbox create flood -f "$D/policy.yaml" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' >"$D/token"
chmod 600 "$D/token"
"$BIN" proxy --sandbox flood --token-file "$D/token" --listen 127.0.0.1:13128 --data-dir "$D/px" --dev-allow-loopback \
  --decision-log-max-size 262144 --decision-log-keep 1 >"$D/px.log" 2>&1 &
PX=$!
until curl -s -o /dev/null -x http://127.0.0.1:13128 http://127.0.0.1:18095/ready; do sleep 0.2; done
SENT=$(/tmp/decflood/load -proxy http://127.0.0.1:13128 -duration "${SECS}s" -rate "$RATE" -kinds "$KINDS")
echo "sent: $SENT"
sleep 25 # the proxy's and the gateway's summary windows (10 s), and shipping
"$BIN" logs flood --decision allow --limit 1000 -o json >"$D/allow.json"
"$BIN" logs flood --decision deny --limit 1000 -o json >"$D/deny.json"
CHOSEN=$(echo "$SENT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["chosen_denial_id"])')
"$BIN" logs flood --denial-id "$CHOSEN" -o json >"$D/chosen.json"
curl -s -H "Authorization: Bearer $PORTCULLIS_TOKEN" http://127.0.0.1:17070/metrics | grep -E '^portcullis_decisions_(stored|rate_limited)_total' || true
"$BIN" logs flood --limit 3 || true
python3 - "$D" "$SENT" <<'PY'
import json, sys, glob
d, sent = sys.argv[1], json.loads(sys.argv[2])
def recs(name):
    return [x["record"] for x in json.load(open(f"{d}/{name}.json")).get("decisions", [])]
allow = [r for r in recs("allow") if "/allowed/" in r.get("path", "")]
deny = recs("deny")
one = [r for r in deny if not r.get("summaryCount") and not r.get("summary_count")]
summ = sum(int(r.get("summaryCount", r.get("summary_count", 0))) for r in deny)
chosen = recs("chosen")
local_allowed = 0; local_lines = 0; local_sum = 0; local_one = 0
for f in glob.glob(f"{d}/px/decisions.jsonl*"):
    for line in open(f):
        r = json.loads(line); local_lines += 1
        if r["decision"] == "allow" and "/allowed/" in r.get("path", ""): local_allowed += 1
        elif r.get("summary"): local_sum += r["summary"]["count"]
        elif r["decision"] == "deny": local_one += 1
print(f"gateway (portcullis logs): allowed {len(allow)}/{sent['allowed_sent']}, denials one by one {len(one)} (of at most 1000 listed), "
      f"summarised {summ}, chosen denial listed: {bool(chosen)}")
print(f"proxy decisions.jsonl(+.1): allowed {local_allowed}/{sent['allowed_sent']}, denials one by one {local_one}, summarised {local_sum}, lines {local_lines}")
PY
# Then one request with a 60 KiB path: the size of its record in the
# proxy's file, and whether the gateway lists it.
LONG=$(python3 -c 'print("x" * 61440)')
curl -s -o /dev/null -x http://127.0.0.1:13128 "http://127.0.0.1:18096/$LONG"
sleep 3
python3 - "$D" <<'PY'
import glob, json, sys
n = max((len(l) for f in glob.glob(sys.argv[1] + "/px/decisions.jsonl*") for l in open(f) if "18096" in l), default=0)
print(f"60 KiB path: its record in decisions.jsonl is {n} bytes")
PY
"$BIN" logs flood --limit 1000 -o json | python3 -c 'import json,sys; r=[d["record"] for d in json.load(sys.stdin)["decisions"] if d["record"].get("port")==18096]; print("60 KiB path: gateway lists it:", bool(r), "cuts:", r[0].get("cuts") if r else None)'
echo "dir: $D"
