//! The member surface's methods (F-B6) in the OpenRPC document: what an
//! agent does as itself, by its run's capability.

use super::Builder;
use crate::coord::{Ack, InboxItem, RaceCheck, RouteType, Routed};
use crate::error::ErrorCode::*;
use crate::member::{ClaimMode, Grant};
use crate::types::SearchHit;

const TOKEN: &str = "the capability kd gave the run (KD_RUN_TOKEN); it names the member and the thread";

pub(super) fn methods(b: &mut Builder) {
    b.method::<Grant>("member.whoami", "grant", "Who a run's capability stands for: the member, its thread and run.");
    b.param::<String>("token", true, TOKEN).errors(&[Forbidden]);
    b.method::<Routed>(
        "member.send",
        "routed",
        "A message from the member, on its thread, to other members: routed as message.route routes it (delivery \
         modes, inboxes, events). It is a hand-off of the exchange the member's run belongs to: past \
         council.max_hops hand-offs it is not delivered (limit_exceeded; a routing.hop_limit event and a notice to \
         the King). Refused with forbidden for a token that is unknown or whose run has ended, and with \
         invalid_argument when it names the member itself, king or a non-member.",
    );
    b.param::<String>("token", true, TOKEN)
        .param::<Vec<String>>("to", true, "members, or [\"all\"] for every other member")
        .param::<String>("body", true, "the text, verbatim")
        .param::<Vec<String>>("cc", false, "members copied")
        .param::<RouteType>("type", false, "point_to_point, multicast, broadcast or reply (default: derived)")
        .errors(&[Forbidden, InvalidArgument, LimitExceeded]);
    b.method::<Vec<InboxItem>>("member.inbox", "items", "The member's inbox on its thread, oldest first.");
    b.param::<String>("token", true, TOKEN)
        .param::<bool>("unread", false, "only entries not read yet (default true); false: those read too")
        .param::<Vec<RouteType>>("types", false, "only these types")
        .param::<u32>("limit", false, "at most this many (default 10, at most 1000)")
        .param::<bool>("mark_read", false, "mark the entries returned read")
        .errors(&[Forbidden, InvalidArgument]);
    b.method::<Vec<Ack>>("member.ack", "acks", "Acknowledge the emergency broadcasts the member owes on its thread.");
    b.param::<String>("token", true, TOKEN)
        .param::<String>("broadcast", false, "only this broadcast")
        .errors(&[Forbidden]);
    b.method::<RaceCheck>(
        "member.claim",
        "check",
        "Declare a write (or a read) of a shared resource, as resource.write and resource.read do, for the member.",
    );
    b.param::<String>("token", true, TOKEN)
        .param::<String>("resource", true, "what is written or read, e.g. a file path")
        .param::<ClaimMode>("mode", false, "write (default) or read")
        .errors(&[Forbidden, InvalidArgument]);
    b.method::<String>("member.thread", "history", "The thread's recent messages, as the history format shows them.");
    b.param::<String>("token", true, TOKEN)
        .param::<u32>("last", false, "the last this many messages (default 20, at most 200)")
        .errors(&[Forbidden, InvalidArgument]);
    b.method::<Vec<SearchHit>>("member.search", "hits", "Full-text search over the threads of the member's workspace.");
    b.param::<String>("token", true, TOKEN)
        .param::<String>("query", true, "words, \"a phrase\", prefix*, body:/title:/summary: filters")
        .param::<u32>("limit", false, "at most this many hits (default 10; more than 50 is taken as 50)")
        .errors(&[Forbidden, InvalidArgument]);
    b.method::<crate::approval::PermissionAnswer>(
        "member.permission",
        "answer",
        "The member's CLI asks permission to use a tool (claude's --permission-prompt-tool, relayed by kd's MCP \
         server): decided by the workspace's approvals policy, else by the King when a client of his follows the \
         thread or the approvals (bounded by approvals.timeout), else denied as before. The answer is what claude's \
         permission tool takes: allow with the input to run, or deny with a message for the model. A member may \
         ask, never list or decide.",
    );
    b.param::<String>("token", true, TOKEN)
        .param::<String>("tool_name", true, "the CLI's name of the tool: Bash, Write, Edit, WebFetch, mcp__S__T…")
        .param::<serde_json::Value>("input", true, "the tool's input as the model gave it (a JSON object)")
        .param::<String>("tool_use_id", false, "the CLI's id of the call")
        .errors(&[Forbidden, InvalidArgument]);
}
