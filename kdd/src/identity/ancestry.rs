//! Process ancestry from `/proc`: a process's parent, and whether walking
//! up from a process reaches kdd — bounded, and never trusting a read that
//! raced with a process's exit.

/// What `/proc/PID/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `Z`, …
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    /// The session it is in (the pid of the session's leader): kept across
    /// a reparenting and a change of group, left only by `setsid`, which
    /// makes a new one — a process cannot join another's.
    pub session: u32,
    /// Clock ticks after boot (field 22).
    pub start: u64,
}

impl Stat {
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// Reads `/proc/PID/stat`; `None` when the process is gone (or the line is
/// not one kd can read).
///
/// Read as the scans of every process call it (a run's end, each
/// `SIGCHLD`): one `open`, one `read` into a buffer on the stack, no
/// allocation — the kernel writes the line whole in one read.
pub fn stat(pid: u32) -> Option<Stat> {
    use std::io::Read;
    let mut path = [0u8; 32];
    let path = proc_path(&mut path, pid)?;
    let mut file = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; STAT_BYTES];
    let mut len = 0;
    // A line longer than the buffer (it never is: the command name is at
    // most 64 bytes) is read to its end and not understood.
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
        if len == buf.len() {
            return None;
        }
    }
    parse(std::str::from_utf8(&buf[..len]).ok()?)
}

/// Room for a `/proc/PID/stat` line: 52 numeric fields and a command name.
const STAT_BYTES: usize = 2048;

/// `/proc/PID/stat`, written into `buf`.
fn proc_path(buf: &mut [u8; 32], pid: u32) -> Option<&str> {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    write!(cursor, "/proc/{pid}/stat").ok()?;
    let len = usize::try_from(cursor.position()).ok()?;
    std::str::from_utf8(&buf[..len]).ok()
}

/// Parses a `/proc/PID/stat` line. The command name is in parentheses and
/// may itself hold spaces and parentheses: the fields start after the last
/// `)`.
pub fn parse(line: &str) -> Option<Stat> {
    let mut fields = line.rsplit_once(')')?.1.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    // Fields 8 to 21 (after the session), then the start time (22).
    let start = fields.nth(15)?.parse().ok()?;
    Some(Stat { state, ppid, pgrp, session, start })
}

/// How far up a walk goes at most. A chain of processes deeper than this is
/// not a user's shell but something built to hide where it comes from.
pub const MAX_DEPTH: usize = 1024;

/// Where walking up from a process led.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// To the top (pid 1, or a parent outside this pid namespace), or to a
    /// process that started before `ancestor`, without meeting it.
    Elsewhere,
    /// To `ancestor`, through its child `child` (the process itself when
    /// `ancestor` is its parent).
    Below { child: u32 },
    /// Nowhere known: a process on the way was gone, or the walk was
    /// deeper than [`MAX_DEPTH`].
    Unknown,
}

/// What a walk reads of a process: its parent, and when it started (clock
/// ticks after boot, as [`Stat::start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Up {
    pub parent: u32,
    pub start: u64,
}

/// Walks up from `pid` through what `up` reads of each process, looking for
/// `ancestor`, which started at `born` (when known). A process that
/// started before the ancestor ends the walk: neither it nor anything above
/// it can descend from the ancestor (a parent never started after its
/// child: an orphan is handed only to a process that started no later than
/// it — another thread of its parent, a subreaper above it, or its pid
/// namespace's init), so a client run from a shell older than kdd costs two
/// reads, not one for every process up to pid 1.
pub fn walk(pid: u32, ancestor: u32, born: Option<u64>, up: impl Fn(u32) -> Option<Up>) -> Walk {
    let mut current = pid;
    for _ in 0..MAX_DEPTH {
        if current == ancestor {
            // The walk started at the ancestor itself.
            return Walk::Elsewhere;
        }
        let Some(Up { parent, start }) = up(current) else { return Walk::Unknown };
        if parent == ancestor {
            return Walk::Below { child: current };
        }
        // Strictly before: a child started in the same clock tick as its
        // parent has the same start.
        if parent <= 1 || born.is_some_and(|born| start < born) {
            return Walk::Elsewhere;
        }
        current = parent;
    }
    Walk::Unknown
}

/// [`walk`] over `/proc`, again when a process on the way was gone (its
/// children were reparented meanwhile, so a second walk sees where they
/// went), at most three times.
pub fn walk_proc(pid: u32, ancestor: u32) -> Walk {
    let born = started(ancestor);
    let mut last = Walk::Unknown;
    for _ in 0..3 {
        last = walk(pid, ancestor, born, |p| stat(p).map(|s| Up { parent: s.ppid, start: s.start }));
        if last != Walk::Unknown || stat(pid).is_none() {
            break;
        }
    }
    last
}

/// [`walk_proc`] with at most `reads` reads of `/proc` and no second try:
/// `None` when that does not end it (a longer chain, a process gone on the
/// way), for [`walk_proc`] to finish. A client run from a shell older than
/// kdd takes two.
pub fn walk_proc_within(pid: u32, ancestor: u32, reads: usize) -> Option<Walk> {
    let born = started(ancestor);
    let left = std::cell::Cell::new(reads);
    let walked = walk(pid, ancestor, born, |p| {
        let n = left.get().checked_sub(1)?;
        left.set(n);
        stat(p).map(|s| Up { parent: s.ppid, start: s.start })
    });
    (walked != Walk::Unknown).then_some(walked)
}

/// When process `pid` started: kdd's own by [`own_start`].
fn started(pid: u32) -> Option<u64> {
    if pid == std::process::id() { own_start() } else { stat(pid).map(|s| s.start) }
}

/// When this process (kdd) started, in clock ticks after boot: read once,
/// kept (a read that failed — no descriptor left, say — is tried again
/// next time).
pub fn own_start() -> Option<u64> {
    static OWN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    if let Some(start) = OWN.get() {
        return Some(*start);
    }
    let start = stat(std::process::id())?.start;
    Some(*OWN.get_or_init(|| start))
}

/// The children of process `pid` — of every thread of it, since a child
/// is its forking thread's, and an orphan is given to any thread of its
/// subreaper — from `/proc/PID/task/TID/children`. `None` when they cannot
/// be read: the process is gone, or the kernel keeps no such files
/// (`CONFIG_PROC_CHILDREN`).
pub fn children_of(pid: u32) -> Option<Vec<u32>> {
    // Two ways a child is missed, each guarded by reading again:
    // - A thread that ends hands its children to another of its
    //   process's: read while the threads change, one already read may get
    //   them after its file was read. So the threads are listed again
    //   after (a thread pool's threads come and go: CI found a child missed
    //   so, 1 run in 25 under load).
    // - A children file is read a child at a time, the next found by its
    //   place in the list: a child that exits (is reaped) meanwhile moves
    //   the ones after it up, and one of them is skipped (fs/proc/array.c
    //   says so). It happened when a run's end looked for what its agent
    //   left while the previous run's leftovers were being reaped (e2e
    //   process_tree, 3 runs in 42 with three suites side by side). So the
    //   files are read until two reads agree, and every pid read is kept.
    children_of_threads(pid, || threads_of(pid))
}

/// The children of the threads `threads` lists (again after each read),
/// read until two reads agree, every pid read kept ([`children_of`]).
fn children_of_threads(pid: u32, threads: impl Fn() -> Option<Vec<u32>>) -> Option<Vec<u32>> {
    let mut listed = threads()?;
    let mut seen = std::collections::BTreeSet::new();
    let mut last: Option<Vec<u32>> = None;
    for _ in 0..6 {
        let mut out = Vec::new();
        let mut read_any = false;
        for tid in &listed {
            // A thread that ended meanwhile has no children left to give.
            let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) else { continue };
            read_any = true;
            out.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        if !read_any {
            return None;
        }
        out.sort_unstable();
        seen.extend(out.iter().copied());
        let after = threads()?;
        let settled = after == listed && last.as_ref() == Some(&out);
        listed = after;
        last = Some(out);
        if settled {
            return Some(seen.into_iter().collect());
        }
    }
    None
}

/// The orphans process `pid` took in as their child subreaper, and all
/// below them (as [`descendants`]): the kernel gives an orphan to the
/// first live thread of its subreaper — the main one, whose id is the
/// process's — so one children file is read instead of every thread's.
/// What a process that exited and was reaped left is there. `None` when
/// the main thread is not alive (it ended, or is ending: orphans then go to
/// another thread), the kernel gives orphans elsewhere
/// ([`orphans_go_to_the_main_thread`]), or the file cannot be read.
pub fn orphans(pid: u32, pruned: impl Fn(u32) -> bool) -> Option<Vec<u32>> {
    if !orphans_go_to_the_main_thread() {
        return None;
    }
    let main_alive = || {
        // This process's main thread ends only with the process: no read
        // (a run's end looks twice, issue 31, item 17).
        if pid == std::process::id() {
            return Some(vec![pid]);
        }
        let line = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).ok()?;
        parse(&line).filter(|s| !matches!(s.state, 'Z' | 'X' | 'x')).map(|_| vec![pid])
    };
    let found = children_of_threads(pid, main_alive)?;
    below(found.into_iter().filter(|p| !pruned(*p)).collect(), pruned)
}

/// Whether this kernel gives an orphan to the first live thread of its
/// subreaper, the main one: Linux 3.19 on (before, to the thread that had
/// forked its parent — one of kdd's spawning threads).
pub fn orphans_go_to_the_main_thread() -> bool {
    static KNOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KNOWN.get_or_init(|| release_at_least(&rustix::system::uname().release().to_string_lossy(), (3, 19)))
}

/// Whether a kernel release (`6.1.0-13-amd64`) is `major.minor` or later.
fn release_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().unwrap_or(0));
    let found = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    found >= (major, minor)
}

/// The ids of `pid`'s threads, sorted.
fn threads_of(pid: u32) -> Option<Vec<u32>> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .filter_map(|t| t.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect();
    tids.sort_unstable();
    Some(tids)
}

/// Most processes a walk of descendants visits: past it the walk is cut
/// short and the caller falls back to scanning every process.
pub const MAX_DESCENDANTS: usize = 100_000;

/// Every descendant of `root` (not `root` itself): its children, theirs,
/// and so on — the processes kdd, as its agents' child subreaper, can have
/// started, however they moved (an orphan is reparented to kdd, and stays
/// below it). `None` when the children files cannot be read at `root` or
/// the walk passes [`MAX_DESCENDANTS`]; a process that ends during the walk
/// leaves its own descendants out of this one (its orphans are then kdd's
/// children, seen by the next walk). A process `pruned` says is not
/// wanted is left out with all below it (not looked into).
pub fn descendants(root: u32, pruned: impl Fn(u32) -> bool) -> Option<Vec<u32>> {
    let found: Vec<u32> = children_of(root)?.into_iter().filter(|pid| !pruned(*pid)).collect();
    below(found, pruned)
}

/// `found` and every descendant of theirs that `pruned` does not leave out
/// ([`descendants`]).
fn below(mut found: Vec<u32>, pruned: impl Fn(u32) -> bool) -> Option<Vec<u32>> {
    let mut next = 0;
    while next < found.len() {
        if found.len() > MAX_DESCENDANTS {
            return None;
        }
        let pid = found[next];
        next += 1;
        if let Some(children) = children_of(pid) {
            found.extend(children.into_iter().filter(|pid| !pruned(*pid)));
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (a (b) c) S 17 4242 4000 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let s = parse(line).unwrap();
        assert_eq!((s.state, s.ppid, s.pgrp, s.session, s.start), ('S', 17, 4242, 4000, 987654));
        assert!(parse("4242 (cut").is_none() && parse("").is_none() && parse("1 (x) Z").is_none());
        assert!(parse("1 (x) Z 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").is_some_and(|s| s.is_zombie()));
    }

    #[test]
    fn a_kernel_release_is_compared_by_its_major_and_minor() {
        for (release, at_least) in [("6.18.0-13-amd64", true), ("3.19", true), ("3.18.140", false), ("4.4.0", true)] {
            assert_eq!(release_at_least(release, (3, 19)), at_least, "{release}");
        }
        assert!(!release_at_least("", (3, 19)) && !release_at_least("x", (3, 19)));
    }

    /// The kernel gives a child whose parent thread ends to the first live
    /// thread of its process, as it gives an orphan to its subreaper's: the
    /// main thread, whose file [`orphans`] reads.
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn a_child_whose_thread_ended_is_found_below_the_main_thread() {
        let spawned = std::thread::spawn(|| std::process::Command::new("sleep").arg("30").spawn().unwrap());
        let mut child = spawned.join().unwrap();
        let pid = child.id();
        let me = std::process::id();
        let found = orphans(me, |_| false);
        let pruned = orphans(me, |p| p == pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.is_some_and(|f| f.contains(&pid)), "{pid} not below the main thread");
        assert!(pruned.is_some_and(|f| !f.contains(&pid)), "pruned");
    }

    #[test]
    fn a_walk_finds_the_child_of_the_ancestor_it_passes_through() {
        // 1 ← 10 (kdd) ← 20 (agent) ← 30 (shell) ← 40 (kd); 1 ← 50 (a user's shell) ← 60.
        let tree = |p: u32| {
            let parent = match p {
                10 | 50 => 1,
                20 => 10,
                30 => 20,
                40 => 30,
                60 => 50,
                _ => return None,
            };
            Some(Up { parent, start: u64::from(p) })
        };
        assert_eq!(walk(40, 10, None, tree), Walk::Below { child: 20 });
        assert_eq!(walk(20, 10, None, tree), Walk::Below { child: 20 }, "the agent itself");
        assert_eq!(walk(60, 10, None, tree), Walk::Elsewhere);
        assert_eq!(walk(10, 10, None, tree), Walk::Elsewhere, "kdd is not below itself");
        assert_eq!(walk(99, 10, None, tree), Walk::Unknown, "a process gone");
        // Knowing when kdd started changes none of it.
        assert_eq!(walk(40, 10, Some(10), tree), Walk::Below { child: 20 });
        assert_eq!(walk(60, 10, Some(10), tree), Walk::Elsewhere);
    }

    #[test]
    fn a_walk_ends_at_a_process_older_than_the_ancestor_without_reading_above_it() {
        // kdd (10) started at tick 100. A user's shell (70, tick 5) runs kd
        // (71, tick 300); above the shell nothing can be read — the walk
        // must not need it. A process of the same tick as kdd is walked on.
        let tree = |p: u32| match p {
            71 => Some(Up { parent: 70, start: 300 }),
            70 => Some(Up { parent: 69, start: 5 }),
            80 => Some(Up { parent: 81, start: 100 }),
            81 => Some(Up { parent: 10, start: 100 }),
            _ => None,
        };
        assert_eq!(walk(71, 10, Some(100), tree), Walk::Elsewhere);
        assert_eq!(walk(70, 10, Some(100), tree), Walk::Elsewhere, "the old process itself");
        assert_eq!(walk(80, 10, Some(100), tree), Walk::Below { child: 81 }, "started in kdd's tick");
        // Without kdd's start the walk goes up, and a parent gone is unknown.
        assert_eq!(walk(71, 10, None, tree), Walk::Unknown);
    }

    #[test]
    fn a_walk_deeper_than_its_bound_is_unknown_not_elsewhere() {
        let deep = |p: u32| Some(Up { parent: p + 1, start: 1 });
        assert_eq!(walk(2, 1_000_000, None, deep), Walk::Unknown);
        let cycle = |p: u32| Some(Up { parent: if p == 5 { 6 } else { 5 }, start: 1 });
        assert_eq!(walk(5, 1_000_000, None, cycle), Walk::Unknown, "a cycle (a pid reused mid-walk) ends");
    }

    #[test]
    // No reaper runs in unit tests: a child spawned directly is safe here.
    #[allow(clippy::disallowed_methods)]
    fn this_process_is_below_its_parent_and_not_below_a_child() {
        let me = std::process::id();
        let parent = stat(me).unwrap().ppid;
        assert_eq!(walk_proc(me, parent), Walk::Below { child: me });
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        assert_eq!(walk_proc(me, child.id()), Walk::Elsewhere);
        assert_eq!(walk_proc(child.id(), me), Walk::Below { child: child.id() });
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// `sh`, and a `sleep` it starts in the background (its grandchild):
    /// the shell and the sleep's pid.
    // No reaper runs in unit tests: a child spawned directly is safe here.
    #[allow(clippy::disallowed_methods)]
    fn sh_with_a_sleep() -> (std::process::Child, u32) {
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(sh.stdout.take().unwrap()), &mut line).unwrap();
        (sh, line.trim().parse().unwrap())
    }

    fn kill(pid: u32) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
    }

    /// What a connection is placed by where it is accepted: a walk of a few
    /// reads, or none (`server::connection` then walks on a thread).
    #[test]
    fn a_walk_within_its_reads_ends_as_the_whole_walk_and_a_longer_one_is_left_to_it() {
        let me = std::process::id();
        // sh, and a sleep it starts in the background: two reads up to here.
        let (mut sh, sleep) = sh_with_a_sleep();
        let within = |reads| walk_proc_within(sleep, me, reads);
        let (short, enough, whole) = (within(1), within(2), walk_proc(sleep, me));
        // Up from this process, which the sleep does not precede: ended at
        // its parent (older than the sleep) in two reads, as the whole walk.
        let elsewhere = (walk_proc_within(me, sleep, 2), walk_proc(me, sleep));
        kill(sleep);
        sh.wait().unwrap();
        assert_eq!(short, None, "one read does not reach this process");
        assert_eq!(enough, Some(Walk::Below { child: sh.id() }));
        assert_eq!(enough, Some(whole), "as the whole walk ends");
        assert_eq!(elsewhere, (Some(Walk::Elsewhere), Walk::Elsewhere));
        assert_eq!(walk_proc_within(u32::MAX, me, 8), None, "a process gone is left to the whole walk");
    }

    #[test]
    fn the_descendants_are_the_children_and_theirs() {
        let me = std::process::id();
        // sh, and a sleep it starts in the background (its grandchild).
        let (mut sh, sleep) = sh_with_a_sleep();
        assert!(children_of(me).unwrap().contains(&sh.id()), "a child of this process");
        assert!(!children_of(me).unwrap().contains(&sleep), "the grandchild is not a child");
        let all = descendants(me, |_| false).unwrap();
        assert!(all.contains(&sh.id()) && all.contains(&sleep), "{all:?}");
        assert!(!all.contains(&me), "not itself");
        assert!(descendants(sleep, |_| false).unwrap().is_empty(), "a leaf has none");
        let pruned = descendants(me, |pid| pid == sh.id()).unwrap();
        assert!(!pruned.contains(&sh.id()) && !pruned.contains(&sleep), "nor what is below it: {pruned:?}");
        kill(sleep);
        sh.wait().unwrap();
        assert_eq!(children_of(u32::MAX), None, "no such process");
    }
}
