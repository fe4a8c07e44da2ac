//! `thread.messages` and `message.append`: a thread's messages, a page at
//! a time, and appending one.

// Parameter lists are the wire format (see kd_proto::message).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::message::{Fence, MAX_RENDER, Message, MessageApiServer, MessageKind, Messages, Rendered};
use kd_proto::names::{ALL, KING};

use super::error::invalid;
use super::{Rpc, validate};
use crate::db::messages::{NewMessage, Page};

#[async_trait]
impl MessageApiServer for Rpc {
    async fn thread_messages(
        &self,
        thread: String,
        since_seq: Option<u64>,
        limit: Option<u32>,
        before_seq: Option<u64>,
        bodies: Option<bool>,
    ) -> RpcResult<Messages> {
        validate::thread_id(&thread)?;
        validate::position("since_seq", since_seq)?;
        validate::position("before_seq", before_seq)?;
        let page = Page {
            after: since_seq.unwrap_or(0),
            before: before_seq,
            limit,
            from_end: before_seq.is_some() && since_seq.is_none(),
            bodies: bodies.unwrap_or(true),
            budget: self.d.page_bytes,
        };
        Ok(self.d.db.messages_page(thread, page).await?)
    }

    async fn thread_render(&self, thread: String, seqs: Vec<u64>) -> RpcResult<Vec<Rendered>> {
        validate::thread_id(&thread)?;
        if seqs.len() > MAX_RENDER {
            return Err(invalid(format!("seqs: at most {MAX_RENDER} messages at once, got {}", seqs.len())));
        }
        let mut bodies = Vec::with_capacity(seqs.len());
        for seq in seqs {
            validate::position("seqs", Some(seq))?;
            bodies.push((seq, self.d.db.message(thread.clone(), seq).await?.body));
        }
        // Rendering is CPU work (bodies are bounded by the request limit,
        // a batch by MAX_RENDER): off the async workers.
        let out = tokio::task::spawn_blocking(move || {
            bodies.into_iter().map(|(seq, body)| Rendered { seq, html: crate::markdown::render(&body) }).collect()
        })
        .await
        .map_err(|e| kd_proto::ErrorCode::Internal.error(format!("rendering the messages: {e}")))?;
        Ok(out)
    }

    async fn message_append(
        &self,
        thread: String,
        from: String,
        body: String,
        to: Option<Vec<String>>,
        cc: Option<Vec<String>>,
        reply_to: Option<u64>,
        kind: Option<MessageKind>,
        round: Option<u32>,
        correlation_id: Option<String>,
        fence: Option<Fence>,
    ) -> RpcResult<Message> {
        validate::thread_id(&thread)?;
        validate::member(&from).map_err(|e| invalid(format!("from: {}", e.message())))?;
        let to = to.unwrap_or_else(|| vec![ALL.to_string()]);
        if to.is_empty() {
            return Err(invalid("to is empty; omit it or use [\"all\"] to address everyone"));
        }
        let (to, cc) = validate::recipients(to, cc.unwrap_or_default())?;
        validate::label("correlation_id", correlation_id.as_deref())?;
        let kind = kind.unwrap_or(if from == KING { MessageKind::King } else { MessageKind::Agent });
        let m = NewMessage {
            cc,
            reply_to,
            round,
            correlation_id,
            fence,
            ..NewMessage::new(&thread, &from, to, kind, body)
        };
        Ok(self.d.db.append_message(m).await?)
    }
}
