//! The council: what agents are told ([`history`]) and sending a King
//! message to the members ([`send`]).

pub mod history;
pub mod send;
