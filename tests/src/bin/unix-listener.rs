//! A bare Unix-socket listener for the impostor tests: binds the path it
//! is given (creating its directory 0700 first with `--make-dir`), prints
//! `ready`, then `got N` for every connection — the bytes a client sent
//! before closing. It plays another user's process (the tests run it under
//! `setpriv`), so it knows nothing of kd.

use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixListener;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: unix-listener PATH [--make-dir]");
        std::process::exit(2);
    };
    let path = std::path::Path::new(path);
    if args.iter().any(|a| a == "--make-dir")
        && let Some(dir) = path.parent()
    {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    }
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot bind {}: {e}", path.display());
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    for conn in listener.incoming().flatten() {
        let mut conn = conn;
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut got = 0usize;
        let mut buf = [0u8; 65536];
        while let Ok(n) = conn.read(&mut buf) {
            if n == 0 {
                break;
            }
            got += n;
        }
        let _ = writeln!(out, "got {got}");
        let _ = out.flush();
    }
}
