//! The Kafka Connect schemas Debezium's JSON converter puts beside each key and value with
//! `schemas.enable=true`: the key's struct, and the envelope's (`before`/`after` as the
//! table's `Value` struct, `source`, `transaction`, `op`, the processing times).

use cdc_core::{ColumnSchema, TableSchema, TypeDefinition};

use super::value::numeric_scale;
use super::{BinaryMode, DecimalMode, HstoreMode, IntervalMode, Modes, TimePrecision, hstore};
use crate::json::{write_int, write_str};

/// Type OIDs the schema names.
mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const OID: u32 = 26;
    pub const JSON: u32 = 114;
    pub const XML: u32 = 142;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const TIMETZ: u32 = 1266;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;
    pub const POINT: u32 = 600;
    pub const MONEY: u32 = 790;
    pub const BIT: u32 = 1560;
    pub const VARBIT: u32 = 1562;
    pub const TSVECTOR: u32 = 3614;
}

/// Element type OID of the built-in array types the schema describes.
fn array_element(type_oid: u32) -> Option<u32> {
    Some(match type_oid {
        1000 => oid::BOOL,
        1001 => oid::BYTEA,
        1005 => oid::INT2,
        1007 => oid::INT4,
        1016 => oid::INT8,
        1009 | 1015 | 1014 => 25,
        1021 => oid::FLOAT4,
        1022 => oid::FLOAT8,
        1231 => oid::NUMERIC,
        1182 => oid::DATE,
        1183 => oid::TIME,
        1115 => oid::TIMESTAMP,
        1185 => oid::TIMESTAMPTZ,
        1187 => oid::INTERVAL,
        2951 => oid::UUID,
        199 => oid::JSON,
        3807 => oid::JSONB,
        1561 => oid::BIT,
        1563 => oid::VARBIT,
        _ => return None,
    })
}

/// Whether a column of a type `array_element` does not know is an array (its elements
/// are written as their text), by its type's name: `inet[]` as the catalog formats it,
/// `pg_catalog._inet` as the stream's type registry names it.
fn is_other_array(column: &ColumnSchema) -> bool {
    column.column_type.name.as_deref().is_some_and(|name| {
        name.ends_with("[]") || name.rsplit('.').next().is_some_and(|n| n.starts_with('_'))
    })
}

/// A Connect type: its primitive type, logical name and version, and parameters.
struct Connect {
    kind: &'static str,
    name: Option<&'static str>,
    parameters: Vec<(&'static str, String)>,
    /// A struct's fields and doc, for the two structs Debezium writes.
    fields: StructFields,
}

/// The fields of the Connect structs a value can be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StructFields {
    None,
    /// `io.debezium.data.VariableScaleDecimal`: `scale`, `value`.
    VariableScale,
    /// `io.debezium.data.geometry.Point`: `x`, `y`, `wkb`, `srid`.
    Point,
    /// A map of strings (hstore): `keys`, `values`.
    StringMap,
}

impl Connect {
    fn plain(kind: &'static str) -> Self {
        Connect {
            kind,
            name: None,
            parameters: Vec::new(),
            fields: StructFields::None,
        }
    }

    fn named(kind: &'static str, name: &'static str) -> Self {
        Connect {
            name: Some(name),
            ..Connect::plain(kind)
        }
    }
}

fn precision(column: &ColumnSchema) -> i32 {
    let modifier = column.column_type.modifier;
    if modifier < 0 { 6 } else { modifier }
}

fn connect_type(type_oid: u32, column: &ColumnSchema, modes: Modes) -> Connect {
    match type_oid {
        oid::BOOL => Connect::plain("boolean"),
        oid::INT2 => Connect::plain("int16"),
        oid::INT4 => Connect::plain("int32"),
        oid::INT8 | oid::OID => Connect::plain("int64"),
        oid::FLOAT4 => Connect::plain("float"),
        oid::FLOAT8 => Connect::plain("double"),
        oid::BYTEA if modes.binary == BinaryMode::Bytes => Connect::plain("bytes"),
        oid::BYTEA => Connect::plain("string"),
        oid::NUMERIC => match (modes.decimals, numeric_scale(column)) {
            (DecimalMode::String, _) => Connect::plain("string"),
            (DecimalMode::Double, _) => Connect::plain("double"),
            (DecimalMode::Precise, Some(scale)) => {
                let precision = (column.column_type.modifier - 4) >> 16;
                Connect {
                    parameters: vec![
                        ("scale", scale.to_string()),
                        ("connect.decimal.precision", precision.to_string()),
                    ],
                    ..Connect::named("bytes", "org.apache.kafka.connect.data.Decimal")
                }
            }
            (DecimalMode::Precise, None) => Connect {
                fields: StructFields::VariableScale,
                ..Connect::named("struct", "io.debezium.data.VariableScaleDecimal")
            },
        },
        oid::DATE if modes.time == TimePrecision::Connect => {
            Connect::named("int32", "org.apache.kafka.connect.data.Date")
        }
        oid::DATE => Connect::named("int32", "io.debezium.time.Date"),
        oid::TIME if modes.time == TimePrecision::Connect => {
            Connect::named("int32", "org.apache.kafka.connect.data.Time")
        }
        oid::TIME if modes.time == TimePrecision::Adaptive && precision(column) <= 3 => {
            Connect::named("int32", "io.debezium.time.Time")
        }
        oid::TIME => Connect::named("int64", "io.debezium.time.MicroTime"),
        oid::TIMETZ => Connect::named("string", "io.debezium.time.ZonedTime"),
        oid::TIMESTAMP if modes.time == TimePrecision::Connect => {
            Connect::named("int64", "org.apache.kafka.connect.data.Timestamp")
        }
        oid::TIMESTAMP if precision(column) <= 3 => {
            Connect::named("int64", "io.debezium.time.Timestamp")
        }
        oid::TIMESTAMP => Connect::named("int64", "io.debezium.time.MicroTimestamp"),
        oid::TIMESTAMPTZ => Connect::named("string", "io.debezium.time.ZonedTimestamp"),
        oid::INTERVAL if modes.interval == IntervalMode::String => {
            Connect::named("string", "io.debezium.time.Interval")
        }
        oid::INTERVAL => Connect::named("int64", "io.debezium.time.MicroDuration"),
        oid::UUID => Connect::named("string", "io.debezium.data.Uuid"),
        oid::JSON | oid::JSONB => Connect::named("string", "io.debezium.data.Json"),
        oid::XML => Connect::named("string", "io.debezium.data.Xml"),
        oid::TSVECTOR => Connect::named("string", "io.debezium.data.Tsvector"),
        oid::BIT if column.column_type.modifier == 1 && column.column_type.oid == oid::BIT => {
            Connect::plain("boolean")
        }
        oid::BIT | oid::VARBIT => {
            let length = match column.column_type.modifier {
                m if m > 0 => m,
                _ => i32::MAX,
            };
            Connect {
                parameters: vec![("length", length.to_string())],
                ..Connect::named("bytes", "io.debezium.data.Bits")
            }
        }
        oid::MONEY => match modes.decimals {
            DecimalMode::String => Connect::plain("string"),
            DecimalMode::Double => Connect::plain("double"),
            DecimalMode::Precise => Connect {
                parameters: vec![("scale", "2".to_string())],
                ..Connect::named("bytes", "org.apache.kafka.connect.data.Decimal")
            },
        },
        oid::POINT => Connect {
            fields: StructFields::Point,
            ..Connect::named("struct", "io.debezium.data.geometry.Point")
        },
        _ if hstore::is_hstore(column.column_type.name.as_deref()) => match modes.hstore {
            HstoreMode::Json => Connect::named("string", "io.debezium.data.Json"),
            HstoreMode::Map => Connect {
                fields: StructFields::StringMap,
                ..Connect::plain("map")
            },
        },
        _ => Connect::plain("string"),
    }
}

/// Appends the body of a Connect type (`"type":…` and what goes with it), without the
/// braces, `optional` or `field`.
fn write_type(out: &mut Vec<u8>, connect: &Connect) {
    out.extend_from_slice(b"\"type\":");
    write_str(out, connect.kind);
    match connect.fields {
        StructFields::None => {}
        StructFields::VariableScale => out.extend_from_slice(
            b",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"scale\"},\
              {\"type\":\"bytes\",\"optional\":false,\"field\":\"value\"}]",
        ),
        StructFields::StringMap => out.extend_from_slice(
            b",\"keys\":{\"type\":\"string\",\"optional\":false},\
              \"values\":{\"type\":\"string\",\"optional\":true}",
        ),
        StructFields::Point => out.extend_from_slice(
            b",\"fields\":[{\"type\":\"double\",\"optional\":false,\"field\":\"x\"},\
              {\"type\":\"double\",\"optional\":false,\"field\":\"y\"},\
              {\"type\":\"bytes\",\"optional\":true,\"field\":\"wkb\"},\
              {\"type\":\"int32\",\"optional\":true,\"field\":\"srid\"}]",
        ),
    }
}

fn write_names(out: &mut Vec<u8>, connect: &Connect) {
    if let Some(name) = connect.name {
        out.extend_from_slice(b",\"name\":");
        write_str(out, name);
        out.extend_from_slice(b",\"version\":1");
        match connect.fields {
            StructFields::None | StructFields::StringMap => {}
            StructFields::VariableScale => {
                out.extend_from_slice(b",\"doc\":\"Variable scaled decimal\"");
            }
            StructFields::Point => out.extend_from_slice(b",\"doc\":\"Geometry (POINT)\""),
        }
    }
    if !connect.parameters.is_empty() {
        out.extend_from_slice(b",\"parameters\":{");
        for (i, (key, value)) in connect.parameters.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(out, key);
            out.push(b':');
            write_str(out, value);
        }
        out.push(b'}');
    }
}

/// One column's field schema.
fn write_column(out: &mut Vec<u8>, column: &ColumnSchema, optional: bool, modes: Modes) {
    let type_oid = column.column_type.oid;
    out.push(b'{');
    let element = array_element(type_oid).or_else(|| is_other_array(column).then_some(0));
    let scalar = match element {
        Some(element) => {
            let items = connect_type(element, column, modes);
            out.extend_from_slice(b"\"type\":\"array\",\"items\":{");
            write_type(out, &items);
            out.extend_from_slice(b",\"optional\":true");
            write_names(out, &items);
            out.push(b'}');
            None
        }
        None => {
            let connect = match &column.column_type.definition {
                TypeDefinition::Domain { base } => connect_type(*base, column, modes),
                TypeDefinition::Enum { labels } => Connect {
                    parameters: vec![("allowed", labels.join(","))],
                    ..Connect::named("string", "io.debezium.data.Enum")
                },
                // Plain, or a kind of definition a later cdc-core knows: the type's own.
                _ => connect_type(type_oid, column, modes),
            };
            write_type(out, &connect);
            Some(connect)
        }
    };
    out.extend_from_slice(if optional {
        b",\"optional\":true"
    } else {
        b",\"optional\":false"
    });
    if let Some(connect) = &scalar {
        write_names(out, connect);
    }
    out.extend_from_slice(b",\"field\":");
    write_str(out, &column.name);
    out.push(b'}');
}

/// The key's schema: a struct of the primary key's columns, `<prefix>.<schema>.<table>.Key`.
pub(super) fn key_schema(prefix: &str, table: &TableSchema, modes: Modes) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"{\"type\":\"struct\",\"fields\":[");
    let mut first = true;
    for name in &table.primary_key {
        let Some(column) = table.columns.iter().find(|c| &c.name == name) else {
            continue;
        };
        if !first {
            out.push(b',');
        }
        first = false;
        write_column(&mut out, column, false, modes);
    }
    out.extend_from_slice(b"],\"optional\":false,\"name\":");
    write_str(
        &mut out,
        &format!("{prefix}.{}.{}.Key", table.name.schema, table.name.name),
    );
    out.push(b'}');
    out
}

const SOURCE_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"},{"type":"int64","optional":true,"field":"xmin"},{"type":"string","optional":true,"field":"origin"},{"type":"int64","optional":true,"field":"origin_lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}"#;

const TAIL_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"},{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"}"#;

/// The envelope's schema, `<prefix>.<schema>.<table>.Envelope` (version 2).
pub(super) fn value_schema(prefix: &str, table: &TableSchema, modes: Modes) -> Vec<u8> {
    let qualified = format!("{prefix}.{}.{}", table.name.schema, table.name.name);
    let mut row = Vec::new();
    row.extend_from_slice(b"{\"type\":\"struct\",\"fields\":[");
    for (i, column) in table.columns.iter().enumerate() {
        if i > 0 {
            row.push(b',');
        }
        write_column(&mut row, column, column.nullable, modes);
    }
    row.extend_from_slice(b"],\"optional\":true,\"name\":");
    write_str(&mut row, &format!("{qualified}.Value"));
    let mut out = Vec::new();
    out.extend_from_slice(b"{\"type\":\"struct\",\"fields\":[");
    for field in ["before", "after"] {
        out.extend_from_slice(&row);
        out.extend_from_slice(b",\"field\":");
        write_str(&mut out, field);
        out.extend_from_slice(b"},");
    }
    out.extend_from_slice(SOURCE_SCHEMA.as_bytes());
    out.push(b',');
    out.extend_from_slice(TAIL_SCHEMA.as_bytes());
    out.extend_from_slice(b"],\"optional\":false,\"name\":");
    write_str(&mut out, &format!("{qualified}.Envelope"));
    out.extend_from_slice(b",\"version\":");
    write_int(&mut out, 2);
    out.push(b'}');
    out
}
