//! Builders for schemas, events and batches, and proptest strategies for [`Value`]s, for
//! tests of these sinks and of crates that use them (feature `testing`).

use std::sync::Arc;

use cdc_core::value::{
    Date, Interval, POSTGRES_EPOCH_JDATE, Time, TimeTz, Timestamp, TimestampTz, USECS_PER_DAY,
    ymd_to_julian,
};
use cdc_core::{
    Array, ArrayDim, BatchId, ChangeBatch, ChangeEvent, ColumnSchema, ColumnType, EventKind, Lsn,
    Numeric, OldRow, OldRowKind, OtherRepr, OtherValue, Position, ReplicaIdentity, Row, SchemaRef,
    SinkBatch, SourceIdentity, TableName, Text, TxBegin, TxCommit, Value,
};
use proptest::prelude::*;

/// A schema `public.<name>` with `columns` as `(name, type oid)`, the columns named in
/// `key` forming the primary key (replica identity DEFAULT), or, with an empty `key`,
/// no key and the given replica identity.
pub fn table(
    name: &str,
    columns: &[(&str, u32)],
    key: &[&str],
    identity: ReplicaIdentity,
) -> SchemaRef {
    Arc::new(cdc_core::TableSchema {
        name: TableName::new("public", name),
        relation_id: name.bytes().fold(16_384u32, |h, b| {
            h.wrapping_mul(31).wrapping_add(u32::from(b))
        }),
        columns: columns
            .iter()
            .map(|(n, oid)| ColumnSchema {
                name: (*n).to_owned(),
                column_type: ColumnType {
                    oid: *oid,
                    modifier: -1,
                    name: None,
                    definition: Default::default(),
                },
                nullable: !key.contains(n),
                part_of_key: key.contains(n) || identity == ReplicaIdentity::Full,
                generated: false,
            })
            .collect(),
        replica_identity: identity,
        primary_key: key.iter().map(|k| (*k).to_owned()).collect(),
    })
}

/// A position.
pub fn pos(lsn: u64, ordinal: u64) -> Position {
    Position::new(Lsn(lsn), ordinal)
}

/// A resume token at `position` for a fixed test source.
pub fn token(position: Option<Position>) -> cdc_core::ResumeToken {
    cdc_core::ResumeToken::new(
        SourceIdentity {
            system_identifier: "7000000000000000001".into(),
            timeline: 1,
            database: "test".into(),
            slot: "pgcdc_test".into(),
        },
        position,
    )
}

/// An insert event.
pub fn insert(position: Position, table: &SchemaRef, new: Row) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position,
        kind: EventKind::Insert {
            table: table.clone(),
            new,
        },
    }
}

/// An update event.
pub fn update(position: Position, table: &SchemaRef, old: Option<OldRow>, new: Row) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position,
        kind: EventKind::Update {
            table: table.clone(),
            old,
            new,
        },
    }
}

/// A delete event.
pub fn delete(position: Position, table: &SchemaRef, old: Option<OldRow>) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position,
        kind: EventKind::Delete {
            table: table.clone(),
            old,
        },
    }
}

/// An old row holding only the key columns (others NULL placeholders).
pub fn old_key(values: Row) -> Option<OldRow> {
    Some(OldRow {
        kind: OldRowKind::Key,
        values,
    })
}

/// A full old row.
pub fn old_full(values: Row) -> Option<OldRow> {
    Some(OldRow {
        kind: OldRowKind::Full,
        values,
    })
}

/// `Begin` of a transaction committing at `lsn`, at ordinal 0.
pub fn begin(lsn: u64) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: pos(lsn, 0),
        kind: EventKind::Begin(TxBegin {
            final_lsn: Lsn(lsn),
            commit_time_micros: 0,
            xid: 1,
        }),
    }
}

/// `Commit` of a transaction committing at `lsn`, at `ordinal`.
pub fn commit(lsn: u64, ordinal: u64) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: pos(lsn, ordinal),
        kind: EventKind::Commit(TxCommit {
            commit_lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 8),
            commit_time_micros: 0,
        }),
    }
}

/// A batch of `events` with id `id` and the token resuming after its last event.
pub fn batch(id: u64, events: Vec<ChangeEvent>) -> SinkBatch {
    let mut b = ChangeBatch::new();
    for e in events {
        b.push(e);
    }
    let last = b.last_position();
    SinkBatch {
        id: BatchId(id),
        batch: b,
        resume_token: token(last),
    }
}

/// Text value.
pub fn text(s: &str) -> Value {
    Value::Text(Text::from(s))
}

fn days_of(year: i64, month: u32, day: u32) -> i64 {
    ymd_to_julian(year, month, day) - POSTGRES_EPOCH_JDATE
}

/// Days since 2000-01-01 covering 0001-01-01 ..= 9999-12-31.
pub fn feldera_days() -> std::ops::RangeInclusive<i32> {
    days_of(1, 1, 1) as i32..=days_of(9999, 12, 31) as i32
}

/// Scalar values (no arrays, no `Unchanged`). With `feldera_range`, only values the
/// default (erroring) policies accept: finite floats and numerics, dates and timestamps
/// in 0001..=9999, times before 24:00, text-form `Other` values.
pub fn arb_scalar(feldera_range: bool) -> BoxedStrategy<Value> {
    let days = feldera_days();
    let micros =
        (i64::from(*days.start()) * USECS_PER_DAY)..(i64::from(*days.end()) + 1) * USECS_PER_DAY;
    let f4 = if feldera_range {
        any::<f32>()
            .prop_filter("finite", |f| f.is_finite())
            .boxed()
    } else {
        prop_oneof![
            any::<f32>(),
            Just(f32::NAN),
            Just(f32::INFINITY),
            Just(f32::NEG_INFINITY)
        ]
        .boxed()
    };
    let f8 = if feldera_range {
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .boxed()
    } else {
        prop_oneof![
            any::<f64>(),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY)
        ]
        .boxed()
    };
    let finite_numeric = "-?[0-9]{1,40}(\\.[0-9]{1,30})?"
        .prop_filter_map("canonical", |s| Numeric::finite(Text::from(s)).ok());
    let numeric = if feldera_range {
        finite_numeric.boxed()
    } else {
        prop_oneof![
            4 => finite_numeric,
            1 => prop_oneof![Just(Numeric::NaN), Just(Numeric::PosInfinity), Just(Numeric::NegInfinity)],
        ]
        .boxed()
    };
    let date = if feldera_range {
        days.clone().prop_map(Date::Days).boxed()
    } else {
        prop_oneof![
            4 => (-2_451_545i32..3_000_000i32).prop_map(Date::Days),
            1 => prop_oneof![Just(Date::Infinity), Just(Date::NegInfinity)],
        ]
        .boxed()
    };
    let time_max = if feldera_range {
        USECS_PER_DAY - 1
    } else {
        USECS_PER_DAY
    };
    let ts_micros: BoxedStrategy<Option<i64>> = if feldera_range {
        micros.clone().prop_map(Some).boxed()
    } else {
        prop_oneof![
            2 => micros.clone().prop_map(Some),
            2 => (-211_813_488_000_000_000i64..9_000_000_000_000_000_000i64).prop_map(Some),
            1 => prop_oneof![Just(None), Just(Some(i64::MAX)), Just(Some(i64::MIN))],
        ]
        .boxed()
    };
    let json_doc =
        proptest::collection::vec(("[a-z \"\\\\]{0,5}", any::<i32>(), any::<bool>()), 0..4)
            .prop_map(|entries| {
                let map: serde_json::Map<String, serde_json::Value> = entries
                    .into_iter()
                    .map(|(k, n, b)| (k, serde_json::json!([n, b, null, "x\ny"])))
                    .collect();
                serde_json::Value::Object(map)
            });
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i16>().prop_map(Value::Int2),
        any::<i32>().prop_map(Value::Int4),
        any::<i64>().prop_map(Value::Int8),
        any::<u32>().prop_map(Value::Oid),
        f4.prop_map(Value::Float4),
        f8.prop_map(Value::Float8),
        numeric.prop_map(Value::Numeric),
        any::<String>().prop_map(|s| Value::Text(Text::from(s))),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(|b| Value::Bytea(b.into())),
        date.prop_map(Value::Date),
        (0..=time_max).prop_map(|t| Value::Time(Time(t))),
        ((0..USECS_PER_DAY), -50_400i32..=50_400).prop_map(|(t, o)| Value::TimeTz(TimeTz {
            time: Time(t),
            offset_seconds: o
        })),
        ts_micros.clone().prop_map(|t| Value::Timestamp(match t {
            Some(i64::MAX) => Timestamp::Infinity,
            Some(i64::MIN) => Timestamp::NegInfinity,
            Some(us) => Timestamp::Micros(us),
            None => Timestamp::Infinity,
        })),
        ts_micros.prop_map(|t| Value::TimestampTz(match t {
            Some(i64::MAX) | None => TimestampTz::Infinity,
            Some(i64::MIN) => TimestampTz::NegInfinity,
            Some(us) => TimestampTz::Micros(us),
        })),
        (any::<i32>(), any::<i32>(), any::<i64>()).prop_map(|(months, days, micros)| {
            Value::Interval(Interval {
                months,
                days,
                micros,
            })
        }),
        any::<u128>().prop_map(|u| Value::Uuid(uuid::Uuid::from_u128(u))),
        json_doc.clone().prop_map(|j| Value::Json(Text::from(
            serde_json::to_string_pretty(&j).unwrap_or_default()
        ))),
        json_doc.prop_map(|j| Value::Jsonb(Text::from(j.to_string()))),
        "[a-z]{0,8}( [0-9.]{1,4})?".prop_map(|s| Value::Other(Box::new(OtherValue {
            type_oid: 869,
            type_name: Some(Text::from("pg_catalog.inet")),
            repr: OtherRepr::Text(Text::from(s)),
        }))),
    ]
    .boxed()
}

/// Any value but `Unchanged`: scalars and arrays of one or two dimensions (lower bound 1
/// in Feldera range, any bound otherwise).
pub fn arb_value(feldera_range: bool) -> BoxedStrategy<Value> {
    let bounds = if feldera_range {
        Just(1i32).boxed()
    } else {
        prop_oneof![3 => Just(1i32), 1 => -3i32..4].boxed()
    };
    let array = (
        arb_scalar(feldera_range),
        1u32..4,
        0u32..3,
        bounds,
        proptest::collection::vec(any::<bool>(), 12),
    )
        .prop_map(|(sample, outer, inner, lower, nulls)| {
            // Elements all of the sample's type: the sample or NULL.
            let dims: Vec<ArrayDim> = if inner == 0 {
                vec![ArrayDim {
                    len: outer,
                    lower_bound: lower,
                }]
            } else {
                vec![
                    ArrayDim {
                        len: outer,
                        lower_bound: lower,
                    },
                    ArrayDim {
                        len: inner,
                        lower_bound: 1,
                    },
                ]
            };
            let n = (outer * inner.max(1)) as usize;
            let elements = (0..n)
                .map(|i| {
                    if nulls[i % nulls.len()] {
                        Value::Null
                    } else {
                        sample.clone()
                    }
                })
                .collect();
            Value::Array(Box::new(Array {
                element_type: 0,
                dims,
                elements,
            }))
        });
    prop_oneof![6 => arb_scalar(feldera_range), 1 => array].boxed()
}

/// Reading a JetStream stream back as a consumer does, with the NATS client (not the
/// sink's code).
#[cfg(feature = "jetstream")]
// A test helper: a failure to read the stream is the test's failure.
#[allow(clippy::expect_used)]
pub mod jetstream {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use async_nats::jetstream::{
        self, consumer::AckPolicy, consumer::DeliverPolicy, consumer::pull,
    };
    use futures::StreamExt;

    /// One message as a consumer received it.
    #[derive(Clone, Debug)]
    pub struct ReadMessage {
        /// Its stream sequence.
        pub sequence: u64,
        /// Its subject.
        pub subject: String,
        /// Its headers (the last value of each).
        pub headers: BTreeMap<String, String>,
        /// Its payload.
        pub payload: bytes::Bytes,
    }

    impl ReadMessage {
        /// A header's value.
        pub fn header(&self, name: &str) -> Option<&str> {
            self.headers.get(name).map(String::as_str)
        }

        /// The payload's JSON values (Feldera's NATS input reads every value of a message).
        pub fn records(&self) -> Vec<serde_json::Value> {
            serde_json::Deserializer::from_slice(&self.payload)
                .into_iter::<serde_json::Value>()
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("message {}: payload is not JSON: {e}", self.sequence))
        }
    }

    /// Every message of `stream` from the start, in order, read through an ephemeral pull
    /// consumer on `servers` (comma-separated URLs).
    pub async fn read_stream(servers: &str, stream: &str) -> Vec<ReadMessage> {
        let urls: Vec<&str> = servers.split(',').collect();
        let client = async_nats::connect(urls).await.expect("connect to NATS");
        let context = jetstream::new(client);
        let mut handle = context.get_stream(stream).await.expect("the stream exists");
        let last = handle
            .info()
            .await
            .expect("stream info")
            .state
            .last_sequence;
        let consumer = handle
            .create_consumer(pull::Config {
                deliver_policy: DeliverPolicy::All,
                ack_policy: AckPolicy::None,
                inactive_threshold: Duration::from_secs(60),
                ..pull::Config::default()
            })
            .await
            .expect("create a consumer");
        let mut out = Vec::new();
        let mut read_through = 0;
        while read_through < last {
            let mut batch = consumer
                .batch()
                .max_messages(1000)
                .expires(Duration::from_secs(2))
                .messages()
                .await
                .expect("fetch");
            let mut got = 0;
            while let Some(message) = batch.next().await {
                let message = message.expect("a message");
                let sequence = message.info().expect("message info").stream_sequence;
                let headers = message
                    .headers
                    .iter()
                    .flat_map(|h| h.iter())
                    .filter_map(|(k, v)| Some((k.to_string(), v.last()?.as_str().to_owned())))
                    .collect();
                out.push(ReadMessage {
                    sequence,
                    subject: message.subject.to_string(),
                    headers,
                    payload: message.payload.clone(),
                });
                read_through = sequence;
                got += 1;
            }
            if got == 0 {
                // Nothing more within the wait: the rest expired or was deleted.
                break;
            }
        }
        out
    }
}
