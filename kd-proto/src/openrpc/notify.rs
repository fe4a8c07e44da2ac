//! Attention (issue 33) in the OpenRPC document: `notify.test` and
//! `notify.subscribe`.

use super::Builder;
use crate::error::ErrorCode::*;
use crate::notify::{NotifyEvent, NotifyTest};

pub(super) fn methods(b: &mut Builder) {
    b.method::<NotifyTest>(
        "notify.test",
        "test",
        "Send one test notification to each sink the workspace's configuration names (notify.webhook, \
         notify.command, notify.desktop: the user's configuration with the workspace's added to it) and say what \
         each answered: an HTTP status, an exit status, a desktop notification's id, or why it failed. Each sink is \
         called at once and bounded by its timeout; none configured: an empty list. Also the notifier's counts since \
         kdd started (sent, failed, dropped).",
    );
    b.param::<String>("workspace", true, "the workspace whose configuration names the sinks (absolute)")
        .errors(&[InvalidArgument]);
    b.method::<NotifyEvent>(
        "notify.subscribe",
        "event",
        "kd's notifications on this daemon, live, whether or not a sink is configured (kd web's attention view): \
         first the kept ones (the newest 100) numbered after since, oldest first (notified), then each as it is \
         sent; lagged when the subscriber fell behind. Numbers grow and are larger after a restart. Notifications \
         are notify.event; cancel with notify.unsubscribe. Refused to an agent's processes.",
    );
    b.param::<u64>("since", false, "only the kept notifications numbered after this one (default: every kept one)")
        .errors(&[Forbidden]);
    if let Some(m) = b.methods.last_mut() {
        m.subscription = Some(("notify.event", "notify.unsubscribe"));
    }
}
