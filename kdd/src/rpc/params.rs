//! The check (run by [`super::check::CheckLayer`]) that refuses parameters
//! a method does not take.
//!
//! jsonrpsee decodes named parameters leniently (unknown keys are ignored),
//! so a typo such as `sinceseq` would silently do the wrong thing. This
//! checks every call's parameter names against the method's entry in
//! [`kd_proto::openrpc`] and answers -32602 naming the unknown key and the
//! accepted ones. It also keeps the OpenRPC document honest: a parameter
//! missing from it cannot be used.

use std::borrow::Cow;
use std::collections::BTreeMap;

use jsonrpsee::types::{ErrorCode, ErrorObject, ErrorObjectOwned, Request};
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// The check for [`super::check::CheckLayer`]: a call's parameters are all
/// ones its method takes.
pub fn check_request(request: &Request<'_>) -> Result<(), ErrorObject<'static>> {
    check(&request.method, request.params.as_deref())
}

/// Ok when every named parameter is one the method takes, and a positional
/// list is no longer than its parameter list. Unknown methods pass through
/// (they get -32601 from the router).
pub fn check(method: &str, params: Option<&RawValue>) -> Result<(), ErrorObject<'static>> {
    let Some(doc) = kd_proto::openrpc::method(method) else { return Ok(()) };
    let Some(params) = params else { return Ok(()) };
    let text = params.get().trim_start();
    if text.starts_with('{') {
        // Keys only: the values are skipped, not built.
        let keys: BTreeMap<Cow<'_, str>, IgnoredAny> =
            serde_json::from_str(text).map_err(|e| invalid_params(format!("params: {e}")))?;
        if let Some(unknown) = keys.keys().find(|k| !doc.takes(k)) {
            return Err(invalid_params(format!(
                "{method} takes no parameter {unknown:?}; it takes: {}",
                describe(&doc.param_names())
            )));
        }
    } else if text.starts_with('[') {
        let list: Vec<IgnoredAny> = serde_json::from_str(text).map_err(|e| invalid_params(format!("params: {e}")))?;
        if list.len() > doc.params.len() {
            return Err(invalid_params(format!(
                "{method} takes {} parameters ({}), got {}",
                doc.params.len(),
                describe(&doc.param_names()),
                list.len()
            )));
        }
    }
    Ok(())
}

fn describe(names: &[&str]) -> String {
    if names.is_empty() { "none".to_string() } else { names.join(", ") }
}

fn invalid_params(msg: String) -> ErrorObject<'static> {
    ErrorObjectOwned::owned::<()>(ErrorCode::InvalidParams.code(), Cow::Owned(msg), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_string()).unwrap()
    }

    #[test]
    fn unknown_named_parameter_is_refused_with_the_accepted_ones() {
        let e = check("thread.messages", Some(&raw(r#"{"thread":"a","sinceseq":3}"#))).err();
        let msg = e.map(|e| e.message().to_string()).unwrap_or_default();
        assert!(msg.contains("\"sinceseq\""), "{msg}");
        assert!(msg.contains("thread, since_seq, limit"), "{msg}");
    }

    #[test]
    fn known_parameters_and_unknown_methods_pass() {
        assert!(check("thread.messages", Some(&raw(r#"{"thread":"a","since_seq":3}"#))).is_ok());
        assert!(check("thread.messages", Some(&raw(r#"["a",3]"#))).is_ok());
        assert!(check("daemon.status", None).is_ok());
        assert!(check("no.such", Some(&raw(r#"{"x":1}"#))).is_ok());
    }

    #[test]
    fn too_many_positional_parameters_are_refused() {
        let e = check("daemon.status", Some(&raw("[1]"))).err();
        assert!(e.is_some_and(|e| e.code() == ErrorCode::InvalidParams.code()));
    }
}
