//! Attention (issue 33) in the OpenRPC document: `notify.test`.

use super::Builder;
use crate::error::ErrorCode::*;
use crate::notify::NotifyTest;

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
}
