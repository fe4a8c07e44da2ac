//! Thread lifecycle writes (SPEC §8, F-L2): a thread goes idle (its sessions
//! suspended), is archived (its sessions archived, a summary kept), is
//! revived by a message or unarchived when asked, and is deleted with all it
//! holds. Every transition is an event and a `status` notice to the
//! thread's subscribers. When to age a thread is [`crate::lifecycle`]'s
//! call; this module only checks, in the writer, that nothing changed
//! since that call.

/// A summary and who wrote it (a member, or `kd` for the extractive one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub text: String,
    pub by: String,
}

/// What an extractive summary is made of: the King's first questions and
/// each member's last answer, in the order members last spoke.
pub struct Material {
    pub questions: Vec<String>,
    pub last_answers: Vec<(String, String)>,
}
