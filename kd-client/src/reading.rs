//! Reading a thread of any length in its display order ([`display_order`]),
//! a page at a time: first its outline — every message without its text,
//! which is all the order needs — then the texts, a page of them at a time.
//! Memory holds the outline and one page, however long the thread.

use std::collections::HashMap;

use kd_proto::api::prelude::*;
use kd_proto::types::{Message, display_order};

use crate::{Client, ClientError};

/// A thread's messages, in the order they are shown.
pub struct InOrder<'c> {
    client: &'c Client,
    thread: String,
    outline: Vec<Message>,
    /// Seqs of the messages to show, in order.
    order: Vec<u64>,
    at: usize,
    /// The page read last, by seq.
    page: HashMap<u64, Message>,
}

impl<'c> InOrder<'c> {
    /// Reads the outline of `thread` and fixes the order.
    pub async fn open(client: &'c Client, thread: &str) -> Result<InOrder<'c>, ClientError> {
        let mut outline: Vec<Message> = Vec::new();
        loop {
            let after = outline.last().map(|m| m.seq);
            let page = client.thread_messages(thread.to_string(), after, None, None, Some(false)).await?;
            if page.is_empty() {
                break;
            }
            outline.extend(page);
        }
        let order = display_order(&outline).iter().map(|m| m.seq).collect();
        Ok(InOrder { client, thread: thread.to_string(), outline, order, at: 0, page: HashMap::new() })
    }

    /// Every message of the thread, without its text, in seq order.
    pub fn outline(&self) -> &[Message] {
        &self.outline
    }

    /// The next message to show, text and all.
    pub async fn next(&mut self) -> Result<Option<Message>, ClientError> {
        while let Some(&seq) = self.order.get(self.at) {
            self.at += 1;
            if let Some(m) = self.page.remove(&seq) {
                return Ok(Some(m));
            }
            // Read on from it: what follows in the order mostly follows in seq.
            let page = self.client.thread_messages(self.thread.clone(), Some(seq - 1), None, None, None).await?;
            self.page = page.into_iter().map(|m| (m.seq, m)).collect();
            if let Some(m) = self.page.remove(&seq) {
                return Ok(Some(m));
            }
        }
        Ok(None)
    }
}
