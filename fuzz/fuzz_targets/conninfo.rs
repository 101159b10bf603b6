//! Connection strings and JSON configuration: `conninfo::parse`, `parse_pairs`,
//! `ConnectionConfig::parse`, `SourceConfig::new`, `TableRef::parse` on the input as UTF-8
//! (lossy), and `SourceConfig::from_json` both on the input itself and on a JSON document
//! whose `uri` is the input. Must never panic; error messages must format.

#![no_main]

use cdc_postgres::conn::config::TableRef;
use cdc_postgres::conn::{ConnectionConfig, SourceConfig, conninfo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let input = String::from_utf8_lossy(data);
    let input: &str = &input;

    if let Err(e) = conninfo::parse(input) {
        let _ = e.to_string();
    }
    if let Err(e) = conninfo::parse_pairs(input) {
        let _ = e.to_string();
    }
    match ConnectionConfig::parse(input) {
        Ok(config) => {
            let _ = format!("{config:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    if let Err(e) = SourceConfig::new(input, "pub") {
        let _ = e.to_string();
    }
    if let Err(e) = TableRef::parse(input) {
        let _ = e.to_string();
    }
    if let Err(e) = SourceConfig::from_json(input) {
        let _ = e.to_string();
    }
    // The input as the connection string of an otherwise valid configuration.
    let mut json = String::from(r#"{"publication":"pub","tables":["public.t"],"uri":"#);
    json.push_str(&serde_json::Value::from(input).to_string());
    json.push('}');
    if let Err(e) = SourceConfig::from_json(&json) {
        let _ = e.to_string();
    }
});
