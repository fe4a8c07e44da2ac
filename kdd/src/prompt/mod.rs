//! What an agent is told and what it says back, below both the council
//! (who is asked) and the agent runner (how it is asked):
//!
//! - [`history`]: the thread as a multi-party conversation (F-A5), the
//!   messages a resumed session has not seen, and the prompt around them
//!   (F-A6);
//! - [`label`]: stripping the `name: ` label an agent echoes back;
//! - [`mentions`]: `@member` in a King's message, and the members an
//!   answer hands off to;
//! - [`resumed`]: what a member asked again after a restart is told.

pub mod history;
pub mod label;
pub mod mentions;
pub mod resumed;

pub use history::{
    as_of, assemble, format_conversation, format_new_messages, format_thread_history, is_history, unseen,
};
pub use label::{LabelStripper, strip_label};
