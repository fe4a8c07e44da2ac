//! The end-to-end suite, one test binary: each module is one area of kd,
//! driven as its users drive it — a real `kdd` on a temporary socket and
//! database, the real `kd`, fake agents speaking each backend's format.
//! One binary links the harness once (the suite was 46 binaries).

mod acp;
mod activation;
mod agent_env;
mod approval_adapters;
mod approvals;
mod approvals_inline;
mod appserver;
mod ask;
mod bad_input;
mod big_threads;
mod build;
mod busy;
mod chat;
mod cli;
mod cli_council;
mod cluster;
mod confinement;
mod coordination;
mod cost;
mod council;
mod daemon;
mod docs;
mod durable;
mod durations;
mod handshake;
mod hardening;
mod impostor;
mod inbox;
mod kingdom;
mod lifecycle;
mod locks;
mod mcp;
mod mcp_wiring;
mod member;
mod notify;
mod outage;
mod private_data;
mod process_tree;
mod read_only;
mod reconnect;
mod registry;
mod runs;
mod search;
mod service;
mod streaming_cost;
mod subscribe;
mod subscriptions;
mod terminal;
mod work;
mod work_comments;
mod work_run;
mod work_tamper;
