//! [`Messages`], the answer of `thread.messages`: a JSON array of
//! [`Message`] on the wire. A client gets the messages. The daemon may
//! instead hand over the page already written as JSON, straight from its
//! rows, so that a 10,000-message thread is not built as values and then
//! serialised a second time.

use std::ops::{Deref, DerefMut};

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::types::Message;

/// A page of messages, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Messages {
    list: Vec<Message>,
    /// The same page as a JSON array, when the daemon wrote it directly;
    /// then `list` is empty.
    json: Option<Box<RawValue>>,
}

impl Messages {
    /// A page already written as a JSON array of messages (daemon side).
    pub fn from_json(json: Box<RawValue>) -> Messages {
        Messages { list: Vec::new(), json: Some(json) }
    }

    /// The messages.
    pub fn into_vec(self) -> Vec<Message> {
        self.list
    }
}

impl From<Vec<Message>> for Messages {
    fn from(list: Vec<Message>) -> Messages {
        Messages { list, json: None }
    }
}

impl From<Messages> for Vec<Message> {
    fn from(m: Messages) -> Vec<Message> {
        m.list
    }
}

impl Deref for Messages {
    type Target = Vec<Message>;
    fn deref(&self) -> &Vec<Message> {
        &self.list
    }
}

impl DerefMut for Messages {
    fn deref_mut(&mut self) -> &mut Vec<Message> {
        &mut self.list
    }
}

impl IntoIterator for Messages {
    type Item = Message;
    type IntoIter = std::vec::IntoIter<Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.into_iter()
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Messages) -> bool {
        self.list == other.list && self.json.as_ref().map(|j| j.get()) == other.json.as_ref().map(|j| j.get())
    }
}

impl PartialEq<Vec<Message>> for Messages {
    fn eq(&self, other: &Vec<Message>) -> bool {
        self.json.is_none() && &self.list == other
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.json {
            Some(json) => json.serialize(s),
            None => self.list.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Messages, D::Error> {
        Vec::<Message>::deserialize(d).map(Messages::from)
    }
}

impl JsonSchema for Messages {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        Vec::<Message>::schema_name()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        Vec::<Message>::json_schema(generator)
    }
    fn inline_schema() -> bool {
        Vec::<Message>::inline_schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_json_reads_back_as_the_messages() {
        let m = vec![Message::new("t1", 1, "king", "Hi?"), Message::new("t1", 2, "claude", "Hello.")];
        let raw = serde_json::value::to_raw_value(&m).unwrap();
        let page = Messages::from_json(raw);
        let wire = serde_json::to_string(&page).unwrap();
        assert_eq!(wire, serde_json::to_string(&m).unwrap());
        let back: Messages = serde_json::from_str(&wire).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.into_vec(), m);
    }
}
