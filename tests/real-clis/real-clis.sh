#!/usr/bin/env bash
# real-clis.sh — kd with the REAL Claude Code and Codex CLIs as members, offline against loopback model
# stubs (stubs.py beside this script): claude sends to codex and codex to claude through kd's MCP
# server (`kd mcp`), and each message must be stored from its sender, never from the King.
#
# Usage: real-clis.sh [CLI_DIR] [KD_BIN_DIR]
#   CLI_DIR     where `claude` and `codex` are: a directory holding them, or an npm prefix
#               (npm install --prefix DIR @anthropic-ai/claude-code @openai/codex) — $KD_TRIAL_CLI_DIR
#   KD_BIN_DIR  the directory of `kd` and `kdd` — $KD_TRIAL_KD_DIR (default: kd on PATH)
# Environment:
#   KD_TRIAL_TIMEOUT=120    seconds each `kd ask` may take
#   KD_TRIAL_SHELL_CHECK=1  also ask each member to run `kd send` from its own shell (informational:
#                           codex's read-only sandbox refuses the socket, claude -p refuses the Bash call)
#   KD_TRIAL_KEEP=1         keep the temporary directory (it is always kept when a check fails)
#   KD_TRIAL_TMPDIR         where the temporary directory goes (default ${TMPDIR:-/tmp})
# Needs bash, python3, git, node (for codex's launcher). Exit status: 0 all checks passed, 1 a check
# failed, 2 the trial could not be set up.
# Nothing of the caller's environment reaches kdd or the CLIs but what is set below: a throwaway HOME
# (so no user config, no permission flags), the stub URLs and a dummy key.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cli_dir=${1:-${KD_TRIAL_CLI_DIR:-}}
kd_dir=${2:-${KD_TRIAL_KD_DIR:-}}
ask_timeout=${KD_TRIAL_TIMEOUT:-120}
shell_check=${KD_TRIAL_SHELL_CHECK:-1}

die() { echo "real-clis: $*" >&2; exit 2; }
say() { echo "real-clis: $*"; }

[ -n "$cli_dir" ] || die "usage: $0 CLI_DIR [KD_BIN_DIR] (or KD_TRIAL_CLI_DIR, KD_TRIAL_KD_DIR)"
if [ -x "$cli_dir/node_modules/.bin/claude" ]; then cli_dir=$cli_dir/node_modules/.bin; fi
cli_dir=$(cd "$cli_dir" 2>/dev/null && pwd) || die "no directory $cli_dir"
[ -x "$cli_dir/claude" ] || die "no claude in $cli_dir"
[ -x "$cli_dir/codex" ] || die "no codex in $cli_dir"
if [ -z "$kd_dir" ]; then kd_dir=$(dirname "$(command -v kd 2>/dev/null)") || die "no kd on PATH; give KD_BIN_DIR"; fi
kd_dir=$(cd "$kd_dir" 2>/dev/null && pwd) || die "no directory $kd_dir"
[ -x "$kd_dir/kd" ] && [ -x "$kd_dir/kdd" ] || die "no kd and kdd in $kd_dir"
for p in python3 git node; do command -v $p >/dev/null || die "$p not found"; done
[ -f "$here/stubs.py" ] || die "stubs.py is not beside $0"
node_dir=$(dirname "$(command -v node)")

tmp=$(mktemp -d "${KD_TRIAL_TMPDIR:-${TMPDIR:-/tmp}}/kd-real-clis.XXXXXX") || die "mktemp failed"
stubs_pid='' kdd_pid='' failed=0

# The environment of kdd, the CLIs and every kd command: nothing of the caller's.
E=(env -i "HOME=$tmp/home" "LANG=C.UTF-8" "PATH=$cli_dir:$kd_dir:$node_dir:/usr/local/bin:/usr/bin:/bin"
   "XDG_RUNTIME_DIR=$tmp/run" "XDG_DATA_HOME=$tmp/home/.local/share" "XDG_CONFIG_HOME=$tmp/home/.config"
   "KD_SOCKET=$tmp/run/kdd.sock" "KD_DB=$tmp/kd.sqlite3" "NO_COLOR=1")

cleanup() {
    if [ -n "$kdd_pid" ] && kill -0 "$kdd_pid" 2>/dev/null; then
        (cd "$tmp/ws" && "${E[@]}" KD_NO_AUTOSTART=1 "$kd_dir/kd" daemon stop >/dev/null 2>&1)
        for _ in $(seq 50); do kill -0 "$kdd_pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$kdd_pid" 2>/dev/null && kill -TERM "$kdd_pid" 2>/dev/null
    fi
    [ -n "$stubs_pid" ] && kill -TERM "$stubs_pid" 2>/dev/null && wait "$stubs_pid" 2>/dev/null
    if [ "$failed" != 0 ] || [ "${KD_TRIAL_KEEP:-0}" = 1 ]; then
        echo "real-clis: kept $tmp (kdd.log, stub.log, ask-*.out, show.json, home/)"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$tmp/home/.codex" "$tmp/run" "$tmp/ws/.kd" && chmod 700 "$tmp/run"

# 1. the model stubs, on free loopback ports
python3 "$here/stubs.py" --anthropic 0 --openai 0 --ports-file "$tmp/ports" --log "$tmp/stub.log" \
    >"$tmp/stubs.out" 2>&1 &
stubs_pid=$!
for _ in $(seq 100); do [ -s "$tmp/ports" ] && break; sleep 0.05; done
[ -s "$tmp/ports" ] || { failed=1; die "the stubs did not start: $(cat "$tmp/stubs.out")"; }
read -r anthropic_port openai_port <"$tmp/ports"
E+=("ANTHROPIC_BASE_URL=http://127.0.0.1:$anthropic_port" "ANTHROPIC_API_KEY=sk-stub-not-a-real-key"
    "RUST_LOG=${RUST_LOG:-info,kdd=debug}")

# codex's user config: only where the model is (no approval or sandbox settings)
cat >"$tmp/home/.codex/config.toml" <<EOF
model = "gpt-5.5"
model_provider = "stub"

[model_providers.stub]
name = "stub"
base_url = "http://127.0.0.1:$openai_port/v1"
wire_api = "responses"
EOF

# 2. a workspace whose council is the two members, nothing else configured
(cd "$tmp/ws" && git init -q . && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m init) \
    || { failed=1; die "git init failed"; }
echo '{ "council": { "members": ["claude", "codex"] } }' >"$tmp/ws/.kd/config.json"

kd() { (cd "$tmp/ws" && "${E[@]}" KD_NO_AUTOSTART=1 "$kd_dir/kd" "$@"); }

say "kd $("$kd_dir/kd" --version | cut -d' ' -f2-), $("${E[@]}" "$cli_dir/claude" --version 2>/dev/null), $("${E[@]}" "$cli_dir/codex" --version 2>/dev/null | tail -1)"
say "stubs: anthropic 127.0.0.1:$anthropic_port, openai 127.0.0.1:$openai_port; work dir $tmp"

# 3. kdd
(cd "$tmp/ws" && exec setsid "${E[@]}" "$kd_dir/kdd" --log-file "$tmp/kdd.log") >"$tmp/kdd.out" 2>&1 &
kdd_pid=$!
for _ in $(seq 100); do kd daemon status >/dev/null 2>&1 && break; sleep 0.1; done
kd daemon status >/dev/null 2>&1 || { failed=1; die "kdd did not start: $(tail -5 "$tmp/kdd.out" "$tmp/kdd.log" 2>/dev/null)"; }
kd doctor >"$tmp/doctor.out" 2>&1 || { cat "$tmp/doctor.out"; failed=1; die "kd doctor failed"; }
sed 's/^/  /' "$tmp/doctor.out"

now_ms() { date +%s%3N; }
ask() { # NAME ARGS…: kd ask, timed, its output in ask-NAME.out
    local name=$1; shift
    local t0 t1 rc
    t0=$(now_ms)
    kd ask "$@" >"$tmp/ask-$name.out" 2>&1 </dev/null
    rc=$?
    t1=$(now_ms)
    echo "$t0 $t1 $rc" >"$tmp/ask-$name.time"
    say "ask $name: exit $rc in $((t1 - t0)) ms"
    sed 's/^/  | /' "$tmp/ask-$name.out"
}

# 4. the two asks, in one thread (history mode, kd's default)
ask claude-to-codex --timeout "$ask_timeout" --to claude "MCP_SEND<<codex|hello codex from claude>>"
ask codex-to-claude --timeout "$ask_timeout" --to codex "MCP_SEND<<claude|hello claude from codex>>"
kd show --json >"$tmp/show.json" 2>"$tmp/show.err" || { failed=1; cat "$tmp/show.err"; exit 1; }

# 5. the checks: each sent message stored from its sender, to the other, answered by a run of the other
python3 - "$tmp" <<'PY' || failed=1
import json, os, re, sys, glob
tmp = sys.argv[1]
show = json.load(open(os.path.join(tmp, "show.json")))
msgs = show["messages"]
print("real-clis: thread %s, messages (seq from -> to, re, kind: body):" % show["thread"]["id"])
for m in msgs:
    print("  #%d %s -> %s%s %s: %r" % (m["seq"], m["from"], ",".join(m["to"]),
          " re #%d" % m["reply_to"] if m["reply_to"] else "", m["kind"], m["body"][:120]))
ok = True
def check(cond, what):
    global ok
    print("real-clis: %s %s" % ("ok  " if cond else "FAIL", what))
    ok = ok and cond
for sender, to, body, ask in [("claude", "codex", "hello codex from claude", "claude-to-codex"),
                              ("codex", "claude", "hello claude from codex", "codex-to-claude")]:
    t0, t1, rc = map(int, open(os.path.join(tmp, "ask-%s.time" % ask)).read().split())
    check(rc == 0, "%s: kd ask exited 0" % ask)
    sent = [m for m in msgs if m["body"] == body]
    check(len(sent) == 1, "%s: the message %r is stored once (found %d)" % (ask, body, len(sent)))
    if not sent:
        continue
    m = sent[0]
    check(m["from"] == sender, "%s: it is from %s (stored from %r)" % (ask, sender, m["from"]))
    check(m["to"] == [to], "%s: it is addressed to %s (to %r)" % (ask, to, m["to"]))
    check(m["kind"] == "agent" and m.get("route") == "point_to_point",
          "%s: kind agent, route point_to_point (%s, %s)" % (ask, m["kind"], m.get("route")))
    king = [k for k in msgs if k["kind"] == "king" and k["to"] == [sender] and ("|%s>>" % body) in k["body"]]
    check(len(king) == 1, "%s: the King's question is there" % ask)
    mine = [a for a in msgs if king and a["reply_to"] == king[0]["seq"] and a["from"] == sender]
    check(bool(mine) and mine[0]["kind"] == "agent" and ("sent #%d to %s" % (m["seq"], to)) in mine[0]["body"],
          "%s: %s's answer says the tool sent it (%r)" % (ask, sender, mine[0]["body"] if mine else None))
    answer = [a for a in msgs if a["reply_to"] == m["seq"]]
    check(len(answer) == 1 and answer[0]["from"] == to and answer[0]["kind"] == "agent"
          and (answer[0].get("run") or {}).get("backend") == to,
          "%s: %s answered it in a run of its own (%s)" % (ask, to, [(a["from"], a["kind"], a["body"][:60]) for a in answer]))
    if answer and mine:
        print("real-clis: time %s: ask -> message stored %d ms, -> %s's answer stored %d ms, -> %s's answer %d ms, "
              "kd ask returned after %d ms; runs: %s %s ms, %s %s ms" % (
              ask, m["created_at_ms"] - t0, sender, mine[0]["created_at_ms"] - t0, to,
              answer[0]["created_at_ms"] - t0, t1 - t0, sender, mine[0]["run"].get("duration_ms"), to,
              answer[0]["run"].get("duration_ms")))
# nothing of either body stored from the King or kd
check(not [m for m in msgs if m["from"] in ("king", "kd") and m["body"] in
           ("hello codex from claude", "hello claude from codex")], "no sent message is stored from king or kd")
check(not [m for m in msgs if m["kind"] in ("error", "interrupted")], "no run ended in error")

# whether the MCP servers were up when the model was asked
logs = sorted(glob.glob(os.path.join(tmp, "home/.cache/claude-cli-nodejs/*/mcp-logs-kd/*.jsonl")))
conn = []
for f in logs:
    for line in open(f):
        d = json.loads(line).get("debug", "")
        mm = re.search(r"Successfully connected \(transport: stdio\) in (\d+)ms", d)
        if mm:
            conn.append(int(mm.group(1)))
print("real-clis: claude's kd server connected in %s ms (claude waits about 2000 ms)" % conn)
check(bool(conn) and max(conn) < 2000, "claude: kd's server connected before claude's deadline")
reqs = [json.loads(l) for l in open(os.path.join(tmp, "stub.log"))]
# claude's main requests (not its side requests, such as the session's title, which carry no tools)
claude_main = [r for r in reqs if r["stub"] == "claude" and r.get("plan") and r.get("tools_count")]
check(bool(claude_main) and all("mcp__kd__send" in r["mcp_tools"] for r in claude_main),
      "claude: every main model request listed mcp__kd__send (%d of %d)"
      % (len([r for r in claude_main if "mcp__kd__send" in r["mcp_tools"]]), len(claude_main)))
codex_reqs = [r for r in reqs if r["stub"] == "codex" and r.get("method") == "POST"]
found = [r for r in codex_reqs if r.get("last_input_type") == "tool_search_output" and r["plan"][0] == "call"]
direct = [r for r in codex_reqs if "mcp__kd" in (r.get("tools") or [])]
check(bool(found or direct), "codex: kd's tools were found (through tool_search: %d, listed directly: %d)"
      % (len(found), len(direct)))
# codex's own log (CODEX_HOME/logs_2.sqlite): thread/start or thread/resume -> kd's server initialized
import sqlite3
db = os.path.join(tmp, "home/.codex/logs_2.sqlite")
def server_waits():
    waits = []
    if not os.path.exists(db):
        return waits
    c = sqlite3.connect(db)
    start = None
    for ts, ns, target, body in c.execute("select ts, ts_nanos, target, feedback_log_body from logs order by id"):
        t = ts * 1000 + (ns or 0) // 1000000
        body = body or ""
        if re.search(r"app-server request: thread/(start|resume)", body):
            start = t
        elif target == "rmcp::service" and "Service initialized as client" in body and 'name: "kd"' in body \
                and start is not None:
            waits.append(t - start)
            start = None
    c.close()
    return waits
# codex writes its log database in batches: wait for both codex runs' lines (at most 15 s)
import time
deadline = time.time() + 15
waits = server_waits()
while len(waits) < 2 and time.time() < deadline:
    time.sleep(0.5)
    waits = server_waits()
print("real-clis: codex's kd server initialized %s ms after thread/start (codex lets a turn wait about 1000 ms)"
      % (waits or "(not found in codex's log)"))
check(all(w < 1000 for w in waits), "codex: kd's server initialized before codex's deadline")

# the members ran as kd runs them by default: codex read-only and never asking, claude in its default mode
ctx = []
for f in glob.glob(os.path.join(tmp, "home/.codex/sessions/*/*/*/rollout-*.jsonl")):
    for line in open(f):
        d = json.loads(line)
        if d.get("type") == "turn_context":
            p = d["payload"]
            ctx.append((p.get("approval_policy"), (p.get("sandbox_policy") or {}).get("type")))
print("real-clis: codex turns (approval, sandbox): %s" % sorted(set(ctx)))
check(bool(ctx) and set(ctx) == {("never", "read-only")}, "codex: every turn ran with approval never, sandbox read-only")
modes = set()
for f in glob.glob(os.path.join(tmp, "home/.claude/projects/*/*.jsonl")):
    modes |= set(re.findall(r'"permissionMode":"([A-Za-z]+)"', open(f).read()))
print("real-clis: claude sessions' permissionMode: %s" % sorted(modes))
check(modes == {"default"}, "claude: every session in permission mode default")
sys.exit(0 if ok else 1)
PY

# 6. informational: the members' own shells, in a thread of their own
if [ "$shell_check" = 1 ]; then
    ask codex-shell --new --timeout "$ask_timeout" --to codex \
        "SHELL_RUN<<$kd_dir/kd send --to claude 'codex shell send'; echo kd-exit=\$?; touch sandbox-probe; echo touch-exit=\$?>>"
    ask claude-shell --timeout "$ask_timeout" --to claude "SHELL_RUN<<$kd_dir/kd send --to codex 'claude shell send'>>"
    kd show --json >"$tmp/show-shell.json" 2>/dev/null
    python3 - "$tmp/show-shell.json" <<'PY'
import json, sys
msgs = json.load(open(sys.argv[1]))["messages"]
stored = [m for m in msgs if m["body"] in ("codex shell send", "claude shell send")]
print("real-clis: shell sends stored: %s" % ([(m["from"], m["to"], m["body"]) for m in stored] or "none"))
PY
fi

if [ "$failed" = 0 ]; then say "PASS"; exit 0; else say "FAIL"; exit 1; fi
