//! The server driven in-process, line by line, as a CLI drives it.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};

use super::*;

/// A server on one end of an in-memory pipe; the test is the CLI.
struct Cli {
    to: DuplexStream,
    from: Lines<BufReader<DuplexStream>>,
    served: tokio::task::JoinHandle<Result<(), ServerInitializeError>>,
}

/// The next answer (a line left unanswered fails the test, never hangs it).
async fn next_answer(from: &mut Lines<BufReader<DuplexStream>>) -> Value {
    let next = tokio::time::timeout(std::time::Duration::from_secs(20), from.next_line());
    let line = next.await.expect("an answer within 20 s").unwrap().expect("an answer");
    serde_json::from_str(&line).unwrap()
}

impl Cli {
    fn start(token: Option<&str>) -> Cli {
        // A socket that cannot exist: nothing is ever reached there.
        let socket = PathBuf::from("/nonexistent/kd-mcp-test/kdd.sock");
        let server = Server::new(socket, token.map(String::from));
        let (to, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, from) = tokio::io::duplex(1 << 16);
        let served = tokio::spawn(serve(server, server_in, server_out));
        Cli { to, from: BufReader::new(from).lines(), served }
    }

    async fn send(&mut self, line: &str) {
        self.to.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }

    async fn answer(&mut self) -> Value {
        next_answer(&mut self.from).await
    }

    /// Claude's handshake, as recorded (shared/captures/mcp/claude.mcp.jsonl).
    async fn handshake(&mut self) -> Value {
        self.send(r#"{"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{},"elicitation":{}},"clientInfo":{"name":"claude-code","title":"Claude Code","version":"2.1.197"}},"jsonrpc":"2.0","id":0}"#).await;
        let init = self.answer().await;
        self.send(r#"{"method":"notifications/initialized","jsonrpc":"2.0"}"#).await;
        init
    }

    async fn call(&mut self, id: u64, name: &str, arguments: Value) -> Value {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
        self.send(&call.to_string()).await;
        let answer = self.answer().await;
        assert_eq!(answer["id"], id, "{answer}");
        assert!(answer.get("error").is_none(), "a tool's failure is a result, never a JSON-RPC error: {answer}");
        answer["result"].clone()
    }
}

#[tokio::test]
async fn initialize_echoes_the_clients_protocol_version_and_says_what_kd_is() {
    let mut cli = Cli::start(None);
    let init = cli.handshake().await;
    assert_eq!(init["id"], 0);
    let r = &init["result"];
    assert_eq!(r["protocolVersion"], "2025-11-25");
    assert_eq!(r["capabilities"], json!({"tools": {"listChanged": false}}));
    assert_eq!(r["serverInfo"], json!({"name": "kd", "version": kd_proto::VERSION}));
    assert_eq!(r["instructions"], tools::INSTRUCTIONS);

    // Codex asks for 2025-06-18 and gets it.
    let mut codex = Cli::start(None);
    codex.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"codex/auth-change":{}},"elicitation":{"form":{},"url":{}}},"clientInfo":{"name":"codex-mcp-client","title":"Codex","version":"0.169.0"}}}"#).await;
    assert_eq!(codex.answer().await["result"]["protocolVersion"], "2025-06-18");

    // A version kd does not know is answered with kd's newest.
    let mut future = Cli::start(None);
    future.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2031-01-01","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#).await;
    assert_eq!(future.answer().await["result"]["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn tools_list_is_the_six_tools() {
    let mut cli = Cli::start(None);
    cli.handshake().await;
    cli.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":0}}}"#).await;
    let list = cli.answer().await;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, tools::NAMES);
    assert_eq!(list["result"]["tools"][0], serde_json::to_value(tools::tool("send").unwrap()).unwrap());
    assert!(list["result"].get("nextCursor").is_none(), "{list}");
}

#[tokio::test]
async fn failures_are_tool_results_with_the_reason() {
    let mut no_token = Cli::start(None);
    no_token.handshake().await;
    let r = no_token.call(2, "send", json!({"to": ["codex"], "body": "hi"})).await;
    assert_eq!(r, json!({"content": [{"type": "text", "text": text::NO_TOKEN}], "isError": true}));

    let mut cli = Cli::start(Some("kdcap_forged"));
    cli.handshake().await;
    let unreachable = cli.call(2, "send", json!({"to": ["codex"], "body": "hi"})).await;
    assert_eq!(unreachable["isError"], true);
    let why = unreachable["content"][0]["text"].as_str().unwrap();
    assert!(why.starts_with("cannot reach kdd at /nonexistent/kd-mcp-test/kdd.sock"), "{why}");

    let bad = cli.call(3, "send", json!({"to": ["codex"]})).await;
    assert_eq!(bad["isError"], true);
    assert!(bad["content"][0]["text"].as_str().unwrap().contains("missing field `body`"), "{bad}");

    let unknown = cli.call(4, "delete_everything", json!({})).await;
    assert_eq!(unknown["isError"], true);
    assert!(unknown["content"][0]["text"].as_str().unwrap().starts_with("kd has no tool named"), "{unknown}");
}

#[tokio::test]
async fn the_server_ends_when_the_client_closes_its_end() {
    let mut cli = Cli::start(None);
    cli.handshake().await;
    drop(cli.to);
    assert!(cli.served.await.unwrap().is_ok());

    // Also before any handshake: a client that left is no failure.
    let cli = Cli::start(None);
    drop(cli.to);
    assert!(cli.served.await.unwrap().is_ok());
}

#[tokio::test]
async fn a_line_over_the_bound_is_answered_invalid_and_the_next_answered() {
    let mut cli = Cli::start(None);
    cli.handshake().await;
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"send","arguments":{{"to":["codex"],"body":"{}"}}}}}}"#,
        "x".repeat(MAX_LINE)
    );
    // Written while the server reads: the pipe holds less than the line.
    let writer = async {
        cli.to.write_all(huge.as_bytes()).await.unwrap();
        cli.to.write_all(b"\n").await.unwrap();
        cli.to.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/list\"}\n").await.unwrap();
    };
    let (_, first) = tokio::join!(writer, next_answer(&mut cli.from));
    let answers = [first, cli.answer().await];
    // The oversized line is not kept, so its id is unknown.
    assert_eq!((&answers[0]["id"], &answers[0]["error"]["code"]), (&Value::Null, &json!(-32600)), "{answers:?}");
    assert_eq!(answers[1]["id"], 8, "the next line is answered: {answers:?}");
}

impl Cli {
    async fn send_bytes(&mut self, line: &[u8]) {
        self.to.write_all(line).await.unwrap();
        self.to.write_all(b"\n").await.unwrap();
    }

    /// The answers up to the one with id `last`, as (id, error code).
    async fn answers_until(&mut self, last: i64) -> Vec<(Value, Value)> {
        let mut seen = Vec::new();
        loop {
            let a = self.answer().await;
            let done = a["id"] == last;
            seen.push((a["id"].clone(), a.pointer("/error/code").cloned().unwrap_or(Value::Null)));
            if done {
                return seen;
            }
        }
    }
}

#[tokio::test]
async fn lines_that_are_not_requests_it_can_hold_are_answered_as_json_rpc_says() {
    let mut cli = Cli::start(None);
    cli.handshake().await;
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{{"name":"send","arguments":{}{}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let lines: Vec<(&[u8], Value, i64)> = vec![
        (b"this is not json", Value::Null, -32700),
        (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"", Value::Null, -32700),
        (b"\xff\xfe{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}", Value::Null, -32700),
        (br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, json!(1.5), -32600),
        (
            br#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#,
            json!(18446744073709551616u128 as f64),
            -32600,
        ),
        (br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, Value::Null, -32600),
        (br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, Value::Null, -32600),
        (br#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, Value::Null, -32600),
        (br#"[{"jsonrpc":"2.0","id":3,"method":"ping"}]"#, Value::Null, -32600),
        (b"[]", Value::Null, -32600),
        (b"42", Value::Null, -32600),
        (br#"{"foo":"boo"}"#, Value::Null, -32600),
        (br#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#, json!(4), -32600),
        (br#"{"jsonrpc":"2.0","id":5}"#, json!(5), -32600),
        (br#"{"jsonrpc":"2.0","id":6,"method":7}"#, json!(6), -32600),
        (br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}"#, json!(7), -32602),
        (br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":null}"#, json!(8), -32602),
        (br#"{"jsonrpc":"2.0","id":9,"method":"\ud800"}"#, json!(9), -32600),
        (br#"{"jsonrpc":"2.0","id":"\ud800","method":"ping"}"#, Value::Null, -32600),
        (deep.as_bytes(), json!("deep"), -32602),
    ];
    for (line, _, _) in &lines {
        cli.send_bytes(line).await;
    }
    // Never answered: notifications (good or bad), blank lines, responses.
    cli.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#).await;
    cli.send("   ").await;
    cli.send(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#).await;
    cli.send(r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#).await;
    cli.send(r#"{"jsonrpc":"2.0","id":99,"method":"ping"}"#).await;
    let answers = cli.answers_until(99).await;
    let mut expected: Vec<(Value, Value)> = lines.iter().map(|(_, id, code)| (id.clone(), json!(code))).collect();
    expected.push((json!(99), Value::Null));
    assert_eq!(answers.len(), expected.len(), "{answers:?}");
    for (i, (got, want)) in answers.iter().zip(&expected).enumerate() {
        assert_eq!(
            got,
            want,
            "line {i}: {:?}",
            String::from_utf8_lossy(lines.get(i).map_or(b"ping".as_slice(), |l| l.0))
        );
    }
    // An id rmcp cannot hold is given back as it was written.
    cli.send(r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#).await;
    let line = cli.from.next_line().await.unwrap().unwrap();
    assert!(line.contains(r#""id":1e400"#) && line.contains("-32600"), "{line}");
    // And the server still serves.
    let r = cli.call(100, "send", json!({"to": ["codex"], "body": "hi"})).await;
    assert_eq!(r["isError"], true);
}
