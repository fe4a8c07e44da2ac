//! `kd`: the command-line client of the kd daemon.

// `deny`, not `forbid`: the one `unsafe extern` block below declares
// nothing; it names a library to link.
#![deny(unsafe_code)]

#[macro_use]
mod out;
mod approval_text;
mod chat;
mod cmd;
mod fmt;
#[cfg(test)]
mod testkit;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kd_client::ClientError;

// The unwinder linked into kd (libgcc's `libgcc_eh.a`, as a static build
// has it), not loaded with `libgcc_s.so.1` at each start: a library fewer
// for the loader, and no CPU probe by its constructor (issue 31, item 17:
// ~0.1 ms of each `kd` on a machine where that probe traps; see
// docs/performance.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[link(name = "gcc_eh", kind = "static", modifiers = "-bundle")]
#[allow(unsafe_code)]
unsafe extern "C" {}

/// Run a council of AI coding agents from the terminal.
#[derive(Debug, Parser)]
#[command(name = "kd", version = kd_proto::LONG_VERSION, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

/// The options of every command.
#[derive(Debug, clap::Args)]
struct Globals {
    /// Daemon socket [default: $KD_SOCKET, $XDG_RUNTIME_DIR/kd/kdd.sock, /tmp/kd-$UID/kdd.sock]
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// When to use colour and styles
    #[arg(long, global = true, value_enum, default_value_t = cmd::Color::Auto)]
    color: cmd::Color,
}

/// `kd ask` alone: the command kd is started for at every question, read
/// by a parser of that command only — making the arguments of every
/// command took a third of kd's start (issue 31, item 17). What it does
/// not read as a question (help, the version, a mistake) is read by
/// [`Cli`], which answers it as always.
#[derive(Debug, Parser)]
#[command(name = "kd", version = kd_proto::LONG_VERSION, propagate_version = true)]
struct AskCli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: AskOnly,
}

#[derive(Debug, Subcommand)]
enum AskOnly {
    Ask(cmd::ask::AskArgs),
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Ask the council; answers stream in as they are written
    Ask(cmd::ask::AskArgs),
    /// Chat with the council in a full-screen terminal UI
    Chat(chat::ChatArgs),
    /// List agent runs in flight, with their pids
    Runs(cmd::runs::RunsArgs),
    /// Stop a thread's runs and pending auto-turns (or one member's run)
    Cancel(cmd::runs::CancelArgs),
    /// Give a task to members, each in a git worktree of its own; --list lists the worktrees
    Work(cmd::work::WorkArgs),
    /// Show each member's work as a diff from where it started
    Diff(cmd::work::DiffArgs),
    /// Have the council review a member's work: approve or request changes
    Review(cmd::work::ReviewArgs),
    /// Comment on lines of a member's diff (pending until kd review --send); --resolve ID
    Comment(cmd::comment::CommentArgs),
    /// List the line comments on members' work (pending, sent, resolved)
    Comments(cmd::comment::CommentsArgs),
    /// Merge a member's work into your current branch (refused on a dirty tree or a conflict)
    Accept(cmd::work::AcceptArgs),
    /// Turn a member's work down
    Reject(cmd::work::RejectArgs),
    /// Run the check (work.check) again in a member's worktree, or in each member's
    Check(cmd::check::CheckArgs),
    /// Bring a member's work up to date: merge your HEAD into its branch; it resolves any conflict
    Rebase(cmd::ship::RebaseArgs),
    /// Push a member's branch and open a pull request (gh), or print the host's page to open one
    Pr(cmd::ship::PrArgs),
    /// What members' CLIs ask permission for (pending; --all, --follow)
    Approvals(cmd::approvals::ApprovalsArgs),
    /// Allow what a member's CLI asks (--run, --thread for more)
    Approve(cmd::approvals::ApproveArgs),
    /// Refuse what a member's CLI asks; --message tells it why
    Deny(cmd::approvals::DenyArgs),
    /// Ask again the members whose last answer failed
    Retry(cmd::runs::RetryArgs),
    /// Follow a thread live, whoever asks in it, until Ctrl+C
    Watch(cmd::watch::WatchArgs),
    /// Send a message to members (inside an agent's shell: as that member)
    Send(cmd::coord::SendArgs),
    /// A member's inbox: messages addressed or copied to it
    Inbox(cmd::inbox::InboxArgs),
    /// Send to every member; --emergency bypasses queues and needs acknowledgements
    Broadcast(cmd::coord::BroadcastArgs),
    /// Acknowledge the emergency broadcasts a member owes
    Ack(cmd::coord::AckArgs),
    /// List the acknowledgements emergency broadcasts are still owed
    Acks(cmd::coord::AcksArgs),
    /// Declare a write (or --read) of a shared resource; refused while another member writes it
    Claim(cmd::coord::ClaimArgs),
    /// Start, stop or inspect the daemon
    #[command(subcommand)]
    Daemon(cmd::daemon::DaemonCommand),
    /// Check the daemon, its database, the configuration and each member's CLI
    Doctor,
    /// List threads, most recently active first
    Threads(cmd::threads::ThreadsArgs),
    /// Print a thread's messages
    Show(cmd::inspect::ShowArgs),
    /// Branch a thread: a new thread with the workspace's context bundle, made current
    Fork(cmd::lifecycle::ForkArgs),
    /// Name a thread
    Title(cmd::lifecycle::TitleArgs),
    /// Archive a thread: its sessions end, a summary is kept, messages are refused
    Archive(cmd::lifecycle::ThreadArg),
    /// Open an archived thread again
    Unarchive(cmd::lifecycle::ThreadArg),
    /// Write a thread's summary now (by lifecycle.summarizer, or extractive)
    Summarize(cmd::lifecycle::ThreadArg),
    /// Delete a thread with its messages, runs, sessions and events
    Delete(cmd::lifecycle::DeleteArgs),
    /// What the members' answers cost, by member, thread, day or exchange
    Cost(cmd::cost::CostArgs),
    /// Find words in every thread: messages, titles and summaries
    Search(cmd::search::SearchArgs),
    /// List agent sessions
    Sessions(cmd::inspect::SessionsArgs),
    /// List conversation locks currently held
    Locks(cmd::inspect::LocksArgs),
    /// Print the event log
    Events(cmd::inspect::EventsArgs),
    /// Write a thread as Kingdom thread files (NNNN-sender.md, thread.json)
    Export(cmd::transfer::ExportArgs),
    /// Read a directory of Kingdom thread files into a new thread
    Import(cmd::transfer::ImportArgs),
    /// Show or check the council configuration of this workspace
    #[command(subcommand)]
    Config(cmd::config::ConfigCommand),
    /// Test the notification sinks of this workspace (notify.*)
    #[command(subcommand)]
    Notify(cmd::notify::NotifyCommand),
    /// Serve the web client and print a one-time pairing URL (kd web --stop, sessions, revoke)
    Web(cmd::web::WebArgs),
    /// Serve kd's tools to an agent over MCP on stdin/stdout (kd starts it for each agent run)
    Mcp,
    /// Print shell completions
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the RPC reference in Markdown (used to keep docs/api.md current)
    #[command(hide = true)]
    RpcReference,
    /// Kingdom's council verbs, run as kd's own commands (`--help` is the
    /// verb's: kd's command answers it)
    #[command(hide = true, disable_help_flag = true, disable_version_flag = true)]
    Council(cmd::kingdom::CouncilArgs),
}

/// The command line, Kingdom's `kd council VERB …` read as kd's command
/// (with a notice on stderr).
fn parse() -> Result<Cli, ExitCode> {
    let cli = parse_from(std::env::args_os());
    let Command::Council(council) = cli.command else {
        return Ok(cli);
    };
    let args = match cmd::kingdom::translate(council) {
        Ok((args, notice)) => {
            errln!("kd: {notice}");
            args
        }
        Err(why) => {
            errln!("kd: {why}");
            return Err(ExitCode::from(2));
        }
    };
    let mut argv: Vec<std::ffi::OsString> = vec![std::env::args_os().next().unwrap_or_else(|| "kd".into())];
    if let Some(socket) = cli.globals.socket {
        argv.extend(["--socket".into(), socket.into_os_string()]);
    }
    if cli.globals.color != cmd::Color::Auto
        && let Some(color) = clap::ValueEnum::to_possible_value(&cli.globals.color)
    {
        argv.extend(["--color".into(), color.get_name().into()]);
    }
    argv.extend(args);
    Ok(Cli::parse_from(argv))
}

/// The command line `argv`: a question by [`AskCli`], anything else (or
/// what it refuses) by [`Cli`].
fn parse_from(argv: impl IntoIterator<Item = std::ffi::OsString>) -> Cli {
    let argv: Vec<std::ffi::OsString> = argv.into_iter().collect();
    if argv.iter().any(|a| a == "ask")
        && let Ok(AskCli { globals, command: AskOnly::Ask(ask) }) = AskCli::try_parse_from(&argv)
    {
        return Cli { globals, command: Command::Ask(ask) };
    }
    Cli::try_parse_from(&argv).unwrap_or_else(|e| match first_command(&argv) {
        Some(first) => with_near_commands(e, first).exit(),
        None => e.exit(),
    })
}

/// The first word of `argv` that is not an option of kd's own (`--socket
/// S`, `--color C`): the command as typed.
fn first_command(argv: &[std::ffi::OsString]) -> Option<&str> {
    let mut words = argv.iter().skip(1).filter_map(|a| a.to_str());
    while let Some(w) = words.next() {
        match w {
            "--socket" | "--color" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            w => return Some(w),
        }
    }
    None
}

/// `e`, an unknown subcommand's, suggesting the commands a typo away from
/// it besides clap's own: clap's measure (Jaro) takes `kd aks` for `kd
/// acks` and does not offer `kd ask`, which two letters swapped make.
fn with_near_commands(mut e: clap::Error, first: &str) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    // A command's own subcommand mistyped (`kd config dif`) is clap's alone.
    let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidSubcommand) else { return e };
    if typed != first {
        return e;
    }
    let typed = typed.clone();
    let mut near: Vec<(usize, usize, String)> = <Cli as clap::CommandFactory>::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .map(|name| (strsim::damerau_levenshtein(&typed, &name), typed.len().abs_diff(name.len()), name))
        .filter(|(d, _, _)| *d == 1)
        .collect();
    if near.is_empty() {
        return e;
    }
    near.sort();
    let mut names: Vec<String> = near.into_iter().map(|(_, _, name)| name).collect();
    if let Some(ContextValue::Strings(clap_s)) = e.get(ContextKind::SuggestedSubcommand) {
        names.extend(clap_s.iter().filter(|s| !names.contains(s)).cloned().collect::<Vec<_>>());
    }
    e.insert(ContextKind::SuggestedSubcommand, ContextValue::Strings(names));
    e
}

/// Exit status when the daemon cannot be reached, refuses, or speaks
/// another protocol.
const EXIT_DAEMON: u8 = 3;

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("kd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Command::Completions { shell } = cli.command {
        use clap::CommandFactory;
        // Into a buffer first: clap_complete panics when a write fails.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "kd", &mut script);
        use std::io::Write as _;
        let _ = std::io::stdout().lock().write_all(&script);
        return ExitCode::SUCCESS;
    }
    let ctx = cmd::Ctx::new(cli.globals.socket, cli.globals.color);
    if let Command::Mcp = cli.command {
        let result = runtime.block_on(cmd::mcp::run(ctx.socket));
        // A read of a stdin that is no pipe (a socket, as node gives its
        // children) blocks a thread no one can cancel: do not wait for it.
        runtime.shutdown_background();
        return match result {
            Ok(code) => code,
            Err(e) => {
                errln!("kd: {}", fmt::one_line(&format!("{e:#}")));
                ExitCode::FAILURE
            }
        };
    }
    // A question, what kd is started for most, is its own future: not one
    // the size of every command's, whose code an ask then runs through
    // (issue 31, item 17).
    let result = match cli.command {
        Command::Ask(a) => runtime.block_on(cmd::ask::run(&ctx, a)),
        command => runtime.block_on(run(&ctx, command)),
    };
    match result {
        Ok(code) => code,
        // The reader of our output went away (`kd … | head`): nothing to say.
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("kd: {}", fmt::one_line(&format!("{e:#}")));
            match e.downcast_ref::<ClientError>() {
                Some(c) if c.is_connection() => ExitCode::from(EXIT_DAEMON),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// Runs `command`. `main` runs a question itself (its future, not this
/// one, whose size is every command's); its arm keeps the match whole.
async fn run(ctx: &cmd::Ctx, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Ask(a) => cmd::ask::run(ctx, a).await,
        Command::Chat(a) => chat::run(ctx, a).await,
        Command::Runs(a) => cmd::runs::list(ctx, a).await,
        Command::Cancel(a) => cmd::runs::cancel(ctx, a).await,
        Command::Retry(a) => cmd::runs::retry(ctx, a).await,
        Command::Work(a) => cmd::work::run(ctx, a).await,
        Command::Diff(a) => cmd::work::diff(ctx, a).await,
        Command::Review(a) => cmd::work::review(ctx, a).await,
        Command::Comment(a) => cmd::comment::comment(ctx, a).await,
        Command::Comments(a) => cmd::comment::comments(ctx, a).await,
        Command::Accept(a) => cmd::work::accept(ctx, a).await,
        Command::Reject(a) => cmd::work::reject(ctx, a).await,
        Command::Check(a) => cmd::check::run(ctx, a).await,
        Command::Rebase(a) => cmd::ship::rebase(ctx, a).await,
        Command::Pr(a) => cmd::ship::pr(ctx, a).await,
        Command::Approvals(a) => cmd::approvals::list(ctx, a).await,
        Command::Approve(a) => cmd::approvals::approve(ctx, a).await,
        Command::Deny(a) => cmd::approvals::deny(ctx, a).await,
        Command::Watch(a) => cmd::watch::run(ctx, a).await,
        Command::Send(a) => cmd::coord::send(ctx, a).await,
        Command::Inbox(a) => cmd::inbox::run(ctx, a).await,
        Command::Broadcast(a) => cmd::coord::broadcast(ctx, a).await,
        Command::Ack(a) => cmd::coord::ack(ctx, a).await,
        Command::Acks(a) => cmd::coord::acks(ctx, a).await,
        Command::Claim(a) => cmd::coord::claim(ctx, a).await,
        Command::Export(a) => cmd::transfer::export(ctx, a).await,
        Command::Import(a) => cmd::transfer::import(ctx, a).await,
        Command::Config(c) => cmd::config::run(ctx, c).await,
        Command::Notify(c) => cmd::notify::run(ctx, c).await,
        Command::Web(a) => cmd::web::run(ctx, a).await,
        // Served above, on a runtime of its own shutdown.
        Command::Mcp => Ok(ExitCode::SUCCESS),
        Command::Completions { .. } => Ok(ExitCode::SUCCESS),
        Command::Daemon(c) => cmd::daemon::run(ctx, c).await,
        Command::Doctor => cmd::doctor::run(ctx).await,
        Command::Threads(a) => cmd::threads::run(ctx, a).await,
        Command::Show(a) => cmd::inspect::show(ctx, a).await,
        Command::Fork(a) => cmd::lifecycle::fork(ctx, a).await,
        Command::Title(a) => cmd::lifecycle::title(ctx, a).await,
        Command::Archive(a) => cmd::lifecycle::archive(ctx, a).await,
        Command::Unarchive(a) => cmd::lifecycle::unarchive(ctx, a).await,
        Command::Summarize(a) => cmd::lifecycle::summarize(ctx, a).await,
        Command::Delete(a) => cmd::lifecycle::delete(ctx, a).await,
        Command::Cost(a) => cmd::cost::run(ctx, a).await,
        Command::Search(a) => cmd::search::run(ctx, a).await,
        Command::Sessions(a) => cmd::inspect::sessions(ctx, a).await,
        Command::Locks(a) => cmd::inspect::locks(ctx, a).await,
        Command::Events(a) => cmd::inspect::events(ctx, a).await,
        // Read as kd's own command by `parse`.
        Command::Council(_) => Ok(ExitCode::from(2)),
        Command::RpcReference => {
            out!("{}", kd_proto::openrpc::markdown_reference())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("kd").chain(args.iter().copied()).map(Into::into).collect()
    }

    /// A mistyped command is offered the commands a typo away from it:
    /// two letters swapped (`aks`) as well as what clap finds (`acks`).
    #[test]
    fn a_mistyped_command_is_offered_the_commands_a_typo_away() {
        let told = |args: &[&str]| {
            let argv = argv(args);
            let e = Cli::try_parse_from(&argv).unwrap_err();
            with_near_commands(e, first_command(&argv).unwrap()).render().to_string()
        };
        let said = told(&["--socket", "/s", "aks", "hi"]);
        assert!(said.contains("'aks'") && said.contains("'ask', 'acks'"), "{said}");
        assert!(told(&["shwo"]).contains("'show'"), "{}", told(&["shwo"]));
        assert!(!told(&["zzzzzz"]).contains("similar"), "{}", told(&["zzzzzz"]));
        let nested = told(&["config", "dif"]);
        assert!(!nested.contains("'diff'"), "a command's own are clap's alone: {nested}");
    }

    /// A question is read by the parser of `kd ask` alone exactly as the
    /// whole command line reads it; anything else is read by the whole.
    #[test]
    fn a_question_is_read_by_the_parser_of_ask_alone_as_the_whole_reads_it() {
        let asks: &[&[&str]] = &[
            &["ask", "hi"],
            &["ask", "--rounds", "0", "Quick?"],
            &["--socket", "/s", "ask", "--to", "a,b", "--mute", "c", "hello", "there"],
            &["ask", "--color", "never", "--json", "--timeout", "5", "-"],
            &["--color=always", "ask", "--new", "--context", "resume", "--title", "T", "ask"],
            &["ask", "--thread", "t1", "--vote", "--synthesize", "claude", "which?"],
        ];
        for args in asks {
            let fast = AskCli::try_parse_from(argv(args)).expect("read by the parser of ask");
            let whole = Cli::try_parse_from(argv(args)).expect("read by the whole");
            let fast = Cli {
                globals: fast.globals,
                command: match fast.command {
                    AskOnly::Ask(a) => Command::Ask(a),
                },
            };
            assert_eq!(format!("{fast:?}"), format!("{whole:?}"), "{args:?}");
            assert_eq!(format!("{:?}", parse_from(argv(args))), format!("{whole:?}"), "{args:?}");
        }
        // Not a question: the whole parser reads it.
        let runs = parse_from(argv(&["--socket", "/s", "runs"]));
        assert!(matches!(runs.command, Command::Runs(_)) && runs.globals.socket.is_some());
        assert!(matches!(parse_from(argv(&["send", "--to", "codex", "ask"])).command, Command::Send(_)));
        for refused in [&["ask", "--help"][..], &["ask", "--bogus", "x"], &["help", "ask"], &["ask"]] {
            assert!(AskCli::try_parse_from(argv(refused)).is_err(), "{refused:?}");
        }
    }
}
