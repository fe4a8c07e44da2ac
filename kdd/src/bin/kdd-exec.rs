//! `kdd-exec 1 PARENT UMASK PATH ARGV0 [ARG…]`: how kdd starts an agent
//! without forking itself (issue 31, item 17).
//!
//! An agent must lead a session of its own, get the user's umask and die
//! with kdd (`PR_SET_PDEATHSIG`). Done in the child of a `fork` of kdd,
//! that costs kdd a copy of its page tables, copy-on-write faults after
//! each spawn and the copy's teardown at the agent's exec — the largest
//! part of kdd's own CPU in an ask. `posix_spawn` (which the standard
//! library uses when nothing runs between fork and exec) shares kdd's
//! memory until the exec, but can set neither the umask nor the death
//! signal. So kdd `posix_spawn`s this small program, which sets all three
//! and execs the agent in its place: the same pid, the same session, and
//! the death signal kept across the exec (`prctl(2)`).
//!
//! `1` is the version of these arguments: a `kdd-exec` of another kd
//! refuses them. `PARENT` is kdd's pid: if kdd died before the death
//! signal was set, the agent is not started. (The signal follows the kdd
//! thread that is the parent when it is set: the spawning thread, which
//! lives as long as kdd.) `UMASK` is octal. `PATH` is the program kdd
//! found; it is run with `ARGV0 ARG…` (its name as kd was told it) and the
//! environment given. If it cannot be run, this says why on standard error
//! and exits 127.
//!
//! No `main` of the standard library's: nothing runs before this (the
//! standard library's start would ignore SIGPIPE, which an exec keeps).

#![no_main]
#![allow(unsafe_code)]

#[cfg(target_os = "linux")]
use std::ffi::{CStr, c_char, c_int};

/// Exit status when the agent cannot be started (as a shell's "not found").
#[cfg(target_os = "linux")]
const CANNOT: c_int = 127;

/// The version of the arguments this takes (kdd's `TRAMPOLINE_VERSION`).
#[cfg(target_os = "linux")]
const VERSION: &str = "1";

#[cfg(target_os = "linux")]
#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    if argc < 6 || argv.is_null() {
        say("usage: kdd-exec 1 PARENT UMASK PATH ARGV0 [ARG...] (kdd runs this to start an agent)");
        return CANNOT;
    }
    // SAFETY: the kernel gives `argc` valid NUL-terminated strings in
    // `argv`, followed by a null pointer.
    let arg = |i: usize| unsafe { CStr::from_ptr(*argv.add(i)) }.to_bytes();
    if arg(1) != VERSION.as_bytes() {
        say(&format!(
            "kdd asked for version {} of kdd-exec, this is version {VERSION}: install kdd and kdd-exec together",
            String::from_utf8_lossy(arg(1))
        ));
        return CANNOT;
    }
    let (Some(parent), Some(umask)) = (number(arg(2), 10), number(arg(3), 8)) else {
        say("PARENT must be a pid and UMASK an octal mask");
        return CANNOT;
    };
    // SAFETY: plain system calls on this process; `argv[3..]` is a
    // null-terminated array of C strings, as execv wants it.
    unsafe {
        libc::umask((umask & 0o777) as libc::mode_t);
        if libc::setsid() < 0 {
            return failed("cannot lead a session of its own");
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) < 0 {
            return failed("cannot set the parent-death signal");
        }
        // kdd may have died before the death signal was set.
        if i64::from(libc::getppid()) != parent {
            return CANNOT;
        }
        libc::execv(*argv.add(4), argv.add(5));
    }
    failed_to_run(arg(4))
}

/// `digits` in `radix`, if that is all they are.
#[cfg(target_os = "linux")]
fn number(digits: &[u8], radix: u32) -> Option<i64> {
    std::str::from_utf8(digits).ok().and_then(|s| i64::from_str_radix(s, radix).ok())
}

/// Says on standard error that `program` cannot be run, and why.
#[cfg(target_os = "linux")]
fn failed_to_run(program: &[u8]) -> c_int {
    let why = std::io::Error::last_os_error();
    say(&format!("cannot run {}: {why}", String::from_utf8_lossy(program)));
    CANNOT
}

/// Says on standard error that `what` failed, and why.
#[cfg(target_os = "linux")]
fn failed(what: &str) -> c_int {
    let why = std::io::Error::last_os_error();
    say(&format!("{what}: {why}"));
    CANNOT
}

#[cfg(target_os = "linux")]
fn say(what: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "kdd-exec: {what}");
}

#[cfg(not(target_os = "linux"))]
#[unsafe(no_mangle)]
extern "C" fn main() -> i32 {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "kdd-exec: only for Linux (kdd starts agents without it elsewhere)");
    127
}
