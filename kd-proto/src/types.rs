//! Every wire type by one path: the params, results and subscription items
//! of the domains' methods, each defined beside its domain's trait
//! ([`crate::daemon`], [`crate::thread`], [`crate::message`],
//! [`crate::subscribe`], [`crate::council`], [`crate::registry`],
//! [`crate::library`], [`crate::coord`], [`crate::exchange`]) and
//! re-exported here. Times are Unix milliseconds (`*_ms`), durations are
//! milliseconds, ids are short strings of `[a-z0-9-]`.

pub use crate::approval::*;
pub use crate::coord::*;
pub use crate::council::*;
pub use crate::daemon::*;
pub use crate::exchange::*;
pub use crate::library::*;
pub use crate::message::*;
pub use crate::order::display_order;
pub use crate::registry::*;
pub use crate::subscribe::*;
pub use crate::thread::*;
