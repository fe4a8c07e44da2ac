#!/usr/bin/env python3
"""Loopback model stubs for a kd trial with the real Claude Code and Codex CLIs.

Two HTTP servers on 127.0.0.1:
  --anthropic PORT   Anthropic Messages API (POST /v1/messages, streaming SSE or JSON), as `claude -p` uses it
  --openai PORT      OpenAI Responses API (POST /v1/responses, streaming SSE), as codex uses it

The "model": in the latest user turn, the last marker `MCP_SEND<<TO|BODY>>` whose TO is not the stub's own
member (--anthropic-name, --openai-name) makes it call kd's `send` tool with {"to": [TO], "body": BODY}:
claude: tool `mcp__kd__send`; codex: function `send` of namespace `mcp__kd` when listed in `tools`, else first
`tool_search` (query "kd send") when codex offers that. Given the tool result it answers `Tool said: <result>`.
Without a kd tool to call it answers `NO_KD_MCP_TOOL <what it saw>`. `SHELL_RUN<<CMD>>` makes it run CMD with
the CLI's own shell tool (claude `Bash`, codex `exec_command`) and answer `Tool said: <output>`. Anything else
(claude's side requests with a JSON schema get `{"title": "Stub session"}`): a plain answer
`Hello from NAME stub (request N).`

Every request is logged as one JSON line to --log (method, path, a summary, the body).
"""
import argparse
import itertools
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARKER = re.compile(r"MCP_SEND<<([^|<>]+)\|(.*?)>>", re.S)
SHELL = re.compile(r"SHELL_RUN<<(.*?)>>", re.S)
COUNTER = itertools.count(1)
LOG_LOCK = threading.Lock()
LOG_FILE = None


def log(entry):
    entry["t"] = round(time.time(), 3)
    line = json.dumps(entry)
    with LOG_LOCK:
        if LOG_FILE:
            LOG_FILE.write(line + "\n")
            LOG_FILE.flush()


def last_marker(texts, own):
    """The last marker in texts: (to, body) of `MCP_SEND<<TO|BODY>>` (None when TO is the stub's own
    member), or ("$shell", CMD) of `SHELL_RUN<<CMD>>`."""
    found = None
    for text in texts:
        marks = [(m.start(), (m.group(1).strip(), m.group(2))) for m in MARKER.finditer(text)]
        marks += [(m.start(), ("$shell", m.group(1))) for m in SHELL.finditer(text)]
        if marks:
            found = max(marks)[1]
    if found and found[0] == own:
        return None
    return found


class Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    name = "stub"

    def log_message(self, *args):
        pass

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self, extra=()):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.close_connection = True

    def event(self, name, obj):
        self.wfile.write(f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode())
        self.wfile.flush()

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        log({"stub": self.name, "method": "GET", "path": self.path})
        self.send_json(404, {"error": {"type": "not_found", "message": "stub: no " + self.path}})


def words(text):
    return re.findall(r"\S+\s*", text) or [text]


# ---------------------------------------------------------------- Anthropic


def content_texts(content):
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        if block.get("type") == "text":
            out.append(block.get("text", ""))
    return out


def tool_result_text(block):
    c = block.get("content")
    if isinstance(c, str):
        return c
    return "".join(b.get("text", "") for b in c or [] if b.get("type") == "text")


class Anthropic(Base):
    name = "claude"

    def do_POST(self):
        body = self.read_body()
        n = next(COUNTER)
        path = self.path.split("?")[0]
        if path.endswith("/count_tokens"):
            log({"stub": self.name, "n": n, "method": "POST", "path": self.path, "what": "count_tokens"})
            return self.send_json(200, {"input_tokens": 10})
        if not path.endswith("/messages"):
            log({"stub": self.name, "n": n, "method": "POST", "path": self.path, "what": "unknown"})
            return self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "stub"}})
        tools = [t.get("name") for t in body.get("tools") or []]
        messages = body.get("messages") or []
        # claude 2.1.197 puts a role "system" message after the user's: take the latest user message
        last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        blocks = [] if isinstance(last.get("content"), str) else (last.get("content") or [])
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        kd_send = next((t for t in tools if t and t.endswith("__kd__send")), None)
        fmt = (body.get("output_config") or {}).get("format") or {}
        if fmt.get("type") == "json_schema":
            # a side request of claude's (the session's title): JSON as asked
            plan = ("text", json.dumps({"title": "Stub session"}))
        elif results:
            r = results[-1]
            plan = ("text", "Tool said: " + tool_result_text(r) + (" (is_error)" if r.get("is_error") else ""))
        else:
            marker = last_marker(content_texts(last.get("content")), self.name)
            if marker and marker[0] == "$shell":
                plan = ("tool", "Bash", {"command": marker[1], "description": "run what the King asked"})
            elif marker and kd_send:
                plan = ("tool", kd_send, {"to": [marker[0]], "body": marker[1]})
            elif marker:
                plan = ("text", "NO_KD_MCP_TOOL tools: " + ",".join(t for t in tools if t and t.startswith("mcp__")))
            else:
                plan = ("text", f"Hello from {self.name} stub (request {n}).")
        log({"stub": self.name, "n": n, "method": "POST", "path": self.path, "model": body.get("model"),
             "stream": body.get("stream"), "tools_count": len(tools),
             "mcp_tools": [t for t in tools if t and t.startswith("mcp__")],
             "plan": plan, "body": body})
        mid = f"msg_stub{n:04d}"
        model = body.get("model") or "claude-stub"
        usage = {"input_tokens": 25, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if plan[0] == "text":
            content = [{"type": "text", "text": plan[1]}]
            stop = "end_turn"
        else:
            content = [{"type": "tool_use", "id": f"toolu_stub{n:04d}", "name": plan[1], "input": plan[2]}]
            stop = "tool_use"
        if not body.get("stream"):
            return self.send_json(200, {"id": mid, "type": "message", "role": "assistant", "model": model,
                                        "content": content, "stop_reason": stop, "stop_sequence": None,
                                        "usage": usage})
        self.start_sse([("request-id", f"req_stub{n:04d}")])
        self.event("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage}})
        if plan[0] == "text":
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}})
            for w in words(plan[1]):
                self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": w}})
        else:
            self.event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": content[0]["id"], "name": plan[1], "input": {}}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(plan[2])}})
        self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 5}})
        self.event("message_stop", {"type": "message_stop"})


# ---------------------------------------------------------------- OpenAI Responses


def item_texts(item):
    c = item.get("content")
    if isinstance(c, str):
        return [c]
    return [p.get("text", "") for p in c or [] if isinstance(p, dict) and p.get("type") in ("input_text", "text")]


def output_text(out):
    if isinstance(out, str):
        return out
    if isinstance(out, dict):
        return output_text(out.get("content") or out.get("output") or "")
    texts = [p.get("text", "") for p in out or [] if isinstance(p, dict)]
    # codex prefixes "Wall time: … seconds\nOutput:" as its own part: keep the tool's text
    texts = [t for t in texts if not t.startswith("Wall time:")] or texts
    return "\n".join(texts)


def kd_namespace(tools):
    for t in tools or []:
        if t.get("type") == "namespace" and t.get("name") == "mcp__kd":
            if any(f.get("name") == "send" for f in t.get("tools") or []):
                return t
    return None


class OpenAI(Base):
    name = "codex"

    def do_POST(self):
        body = self.read_body()
        n = next(COUNTER)
        path = self.path.split("?")[0]
        if not path.endswith("/responses"):
            log({"stub": self.name, "n": n, "method": "POST", "path": self.path, "what": "unknown"})
            return self.send_json(404, {"error": {"type": "not_found", "message": "stub"}})
        inp = body.get("input") or []
        tools = body.get("tools") or []
        last = inp[-1] if inp else {}
        user = [i for i in inp if i.get("type") == "message" and i.get("role") == "user"]
        # the marker is taken from the latest user message (a resumed thread carries earlier turns)
        marker = last_marker(item_texts(user[-1]) if user else [], self.name)
        # the marker of this turn: the latest user message came after every tool exchange of this turn
        if last.get("type") == "function_call_output" or last.get("type") == "custom_tool_call_output":
            plan = ("text", "Tool said: " + output_text(last.get("output")))
        elif last.get("type") == "tool_search_output":
            found = kd_namespace(last.get("tools"))
            if marker and found:
                plan = ("call", {"to": [marker[0]], "body": marker[1]})
            else:
                plan = ("text", "NO_KD_MCP_TOOL tool_search found: " +
                        ",".join(t.get("name", "?") for t in last.get("tools") or []))
        elif marker and marker[0] == "$shell":
            plan = ("exec", {"cmd": marker[1], "yield_time_ms": 10000})
        elif marker and kd_namespace(tools):
            plan = ("call", {"to": [marker[0]], "body": marker[1]})
        elif marker and any(t.get("type") == "tool_search" for t in tools):
            plan = ("search", {"query": "kd send", "limit": 8})
        elif marker:
            plan = ("text", "NO_KD_MCP_TOOL tools: " + ",".join(t.get("name") or t.get("type") for t in tools))
        else:
            plan = ("text", f"Hello from {self.name} stub (request {n}).")
        log({"stub": self.name, "n": n, "method": "POST", "path": self.path, "model": body.get("model"),
             "stream": body.get("stream"), "tools": [t.get("name") or t.get("type") for t in tools],
             "last_input_type": last.get("type"), "plan": plan, "body": body})
        rid = f"resp_stub{n:04d}"
        self.start_sse([("x-request-id", f"req_stub{n:04d}")])
        self.event("response.created", {"type": "response.created", "response": {
            "id": rid, "object": "response", "status": "in_progress", "model": body.get("model"), "output": []}})
        if plan[0] == "text":
            iid = f"msg_stub{n:04d}"
            self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": {
                "type": "message", "id": iid, "role": "assistant", "status": "in_progress", "content": []}})
            for w in words(plan[1]):
                self.event("response.output_text.delta", {"type": "response.output_text.delta", "item_id": iid,
                                                          "output_index": 0, "content_index": 0, "delta": w})
            item = {"type": "message", "id": iid, "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": plan[1], "annotations": []}]}
        elif plan[0] == "search":
            item = {"type": "tool_search_call", "id": f"tsc_stub{n:04d}", "call_id": f"call_stub{n:04d}",
                    "status": "completed", "execution": "client", "arguments": plan[1]}
            self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                      "item": item})
        elif plan[0] == "exec":
            item = {"type": "function_call", "id": f"fc_stub{n:04d}", "call_id": f"call_stub{n:04d}",
                    "name": "exec_command", "arguments": json.dumps(plan[1]), "status": "completed"}
            self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                      "item": item})
        else:
            item = {"type": "function_call", "id": f"fc_stub{n:04d}", "call_id": f"call_stub{n:04d}",
                    "name": "send", "namespace": "mcp__kd", "arguments": json.dumps(plan[1]), "status": "completed"}
            self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                      "item": item})
        self.event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
        self.event("response.completed", {"type": "response.completed", "response": {
            "id": rid, "object": "response", "status": "completed", "model": body.get("model"), "output": [item],
            "usage": {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 35}}})


def serve(handler, port):
    srv = ThreadingHTTPServer(("127.0.0.1", port), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    global LOG_FILE
    ap = argparse.ArgumentParser()
    ap.add_argument("--anthropic", type=int, default=8765)
    ap.add_argument("--openai", type=int, default=8766)
    ap.add_argument("--anthropic-name", default="claude", help="the member the Anthropic stub answers for")
    ap.add_argument("--openai-name", default="codex", help="the member the OpenAI stub answers for")
    ap.add_argument("--log", default=None)
    ap.add_argument("--ports-file", default=None, help="write 'ANTHROPIC_PORT OPENAI_PORT' here once listening "
                                                       "(ports 0 pick free ones)")
    a = ap.parse_args()
    if a.log:
        LOG_FILE = open(a.log, "a")
    Anthropic.name = a.anthropic_name
    OpenAI.name = a.openai_name
    pa = serve(Anthropic, a.anthropic).server_address[1]
    po = serve(OpenAI, a.openai).server_address[1]
    if a.ports_file:
        with open(a.ports_file + ".tmp", "w") as f:
            f.write(f"{pa} {po}\n")
        import os
        os.replace(a.ports_file + ".tmp", a.ports_file)
    print(f"stubs: anthropic 127.0.0.1:{pa} openai 127.0.0.1:{po}", flush=True)
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
