//! RPC parameter decoding: the first byte picks a method of the API, the
//! rest is its parameters; checked or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;

fuzz_target!(|data: &[u8]| {
    let Some((pick, rest)) = data.split_first() else { return };
    let methods = kd_proto::openrpc::document()["methods"].as_array().cloned().unwrap_or_default();
    let Some(method) = methods.get(*pick as usize % methods.len().max(1)).and_then(|m| m["name"].as_str()) else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    if let Ok(raw) = RawValue::from_string(text.to_string()) {
        let _ = kdd::rpc::params::check(method, Some(&raw));
    }
});
