//! Who is calling: the identity of a client connection, shared by the
//! server (which assigns it), the RPC handlers and the runs they start.

/// Identifies the connection a call arrived on (a request extension):
/// "the runs started by the calling client" are the runs of this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId(pub u64);
