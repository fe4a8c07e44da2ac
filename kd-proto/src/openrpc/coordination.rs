//! The coordination layer's methods (SPEC §7) in the OpenRPC document.

use super::Builder;
use crate::error::ErrorCode::*;
use crate::types::*;

pub(super) fn methods(b: &mut Builder) {
    b.method::<Routed>("message.route", "routed", "Route a message (F-X1) from the King or a member to members: stored in the thread with its routing, then delivered to each addressee by its delivery mode — immediate: a run answering it starts now, or right after the member's run in flight (status after_run); queued: kept in its inbox until its next turn or a queue.read (a full inbox drops its oldest entry or refuses the new one, as agents.NAME.delivery.overflow says; refusals are reported per member). cc members keep it in their inbox and see it in their next prompt, without a run. The type is derived when not given: all → broadcast (every member but the sender), reply_to → reply (to that message's sender when to is empty), one addressee → point_to_point, several → multicast. Every decision is an event: routing.TYPE, delivery.immediate|queued|copied|rejected, queue.dropped.");
    b.param::<String>("thread", true, "thread id (the conversation)")
        .param::<String>("from", true, "king or a member")
        .param::<String>("body", true, "the text, verbatim")
        .param::<Vec<String>>("to", false, "members, or [\"all\"]; each name is kept once")
        .param::<Vec<String>>("cc", false, "members copied; a name also in to is dropped from cc")
        .param::<u64>("reply_to", false, "seq of the message answered")
        .param::<RouteType>("type", false, "point_to_point, multicast, broadcast or reply (default: derived)")
        .param::<String>("correlation_id", false, "names the routing's events (default generated)")
        .path_param()
        .errors(&[InvalidArgument, NotFound]);
    b.method::<Vec<InboxItem>>("queue.read", "items", "A member's inbox, oldest first, with each message's body. An entry is processed once the member's prompt gave it the message.");
    b.param::<String>("member", true, "whose inbox")
        .param::<String>("thread", false, "only this thread")
        .param::<Vec<RouteType>>("types", false, "only these types")
        .param::<InboxStatus>("status", false, "pending (default), read, processed, dismissed, deferred or dropped")
        .param::<u32>("limit", false, "at most this many (default 10, at most 1000)")
        .param::<bool>("mark_read", false, "mark the entries returned read")
        .errors(&[InvalidArgument]);
    b.method::<Processed>("queue.process", "processed", "Set the status of a member's inbox entries.");
    b.param::<String>("member", true, "whose inbox")
        .param::<Vec<u64>>("ids", true, "the entries")
        .param::<InboxStatus>("action", false, "processed (default), dismissed, deferred, read or pending")
        .errors(&[InvalidArgument]);
    b.method::<DeliveryPrefs>("queue.subscribe", "prefs", "A member takes messages of these types immediately or queued (over agents.NAME.delivery), in the thread's workspace. Returns the preferences in effect.");
    b.param::<String>("thread", true, "a thread of the workspace")
        .param::<String>("member", true, "the member")
        .param::<Vec<RouteType>>("types", true, "message types")
        .param::<DeliveryMode>("mode", true, "immediate or queued")
        .errors(&[InvalidArgument, NotFound]);
    b.method::<Completion>("completion.agents", "completion", "One prompt to several members in parallel (F-X2), each its own run answering the same King message. wait all: every member up to timeout_s (late ones are cancelled and reported timeout); first: the first good answer, the other runs cancelled. aggregation none; merge (one message, each answer under its member's name); vote (each member ranks the others' answers shown anonymised as Response A, B, …, the labels drawn afresh for each vote; Borda tally, winner, label → member mapping, stored as a message; a tie on points goes to more first places, then to the chair's ballot when there is a chair, else it is left to the King: no winner, and tally.tie says who tied and what broke it); synthesize (the chair writes the final answer from all answers, after a vote when vote is true). Answers the whole outcome with a summary once everything has run.");
    b.param::<String>("thread", true, "thread id")
        .param::<String>("body", true, "the prompt (stored as the King's message)")
        .param::<Vec<String>>("agents", false, "the members asked (default every member)")
        .param::<Wait>("wait", false, "all (default) or first")
        .param::<u64>("timeout_s", false, "wait at most this long for the answers")
        .param::<Aggregation>("aggregation", false, "none (default), merge, vote or synthesize")
        .param::<bool>("vote", false, "with synthesize: vote first, and give the chair the tally")
        .param::<String>("chair", false, "the member who synthesizes")
        .param::<String>("id", false, "a correlation id the client chose (c- and up to 64 of A-Z a-z 0-9 _ -), so it can ask again for the same completion after a reconnect")
        .path_param()
        .errors(&[InvalidArgument, NotFound]);
    b.method::<Emergency>("emergency.broadcast", "emergency", "An emergency to every member (F-X4): bypasses queues and delivery modes and starts a run for each (after its run in flight, which is told — an event — and stopped only with stop). Each member owes an acknowledgement: its next answer given the broadcast, or emergency.ack. Subscribers get an emergency event with who still owes one, again at every acknowledgement.");
    b.param::<String>("thread", true, "thread id")
        .param::<String>("body", true, "the message")
        .param::<String>("from", false, "king (default) or a member")
        .param::<bool>("stop", false, "cancel the members' runs in flight")
        .path_param()
        .errors(&[InvalidArgument, NotFound]);
    b.method::<Vec<Ack>>(
        "emergency.ack",
        "acked",
        "A member acknowledges the emergencies it owes on a thread (one broadcast when given).",
    );
    b.param::<String>("thread", true, "thread id")
        .param::<String>("member", true, "who acknowledges")
        .param::<String>("broadcast", false, "only this broadcast")
        .errors(&[InvalidArgument]);
    b.method::<Vec<Ack>>("emergency.pending", "acks", "Acknowledgements still owed (all of them with all).");
    b.param::<String>("thread", false, "only this thread").param::<bool>("all", false, "acknowledged ones too");
    b.method::<RaceCheck>("resource.write", "check", "Declare a write of a shared resource (F-X5): held for window_ms unless another agent holds it, in which case it is rejected with the holders and backoff_ms after which to retry (event race.write_write).");
    b.param::<String>("resource", true, "what is written, e.g. a path or a branch")
        .param::<String>("agent", true, "who writes")
        .param::<String>("thread", false, "the thread it is done for (for the event log)")
        .param::<u64>("window_ms", false, "how long the write holds it (default 5000, at most 3600000)")
        .errors(&[InvalidArgument]);
    b.method::<RaceCheck>("resource.read", "check", "Declare a read of a shared resource: allowed, with status warning and the writers when another agent holds a write (event race.read_write).");
    b.param::<String>("resource", true, "what is read")
        .param::<String>("agent", true, "who reads")
        .param::<String>("thread", false, "the thread it is done for")
        .errors(&[InvalidArgument]);
}
