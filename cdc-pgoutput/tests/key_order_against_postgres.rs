//! Postgres as the oracle for the online snapshot's key order: for each orderable type,
//! a few hundred values (edge cases and random ones with many duplicates) stored by the
//! server and read back in text format must sort, decoded by this crate, into exactly the
//! server's `ORDER BY` order and equal groups (`dense_rank()`), for every pair of values.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use cdc_core::Value;
use cdc_core::value::{Date, Time, Timestamp, TimestampTz, USECS_PER_DAY};
use cdc_pgoutput::backfill::key_order::{KeyCollation, KeyColumnOrder, KeyOrder};
use cdc_pgoutput::types::{TypeRegistry, decode_text};
use cdc_testkit::Cluster;
use cdc_testkit::tokio_postgres::{Client, SimpleQueryMessage};

/// The session settings the text decoders expect.
const SESSION: &str = "SET TimeZone = 'UTC'; SET IntervalStyle = 'postgres'; \
     SET DateStyle = 'ISO'; SET extra_float_digits = 1; SET bytea_output = 'hex'";

/// A small deterministic generator (SplitMix64), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `lo..=hi`, also for the full `i64` range.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (i128::from(hi) - i128::from(lo) + 1) as u128;
        (i128::from(lo) + (u128::from(self.next()) % span) as i128) as i64
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

struct Oracle {
    _cluster: Cluster,
    client: Client,
    registry: TypeRegistry,
    version: u32,
}

/// SQL string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

impl Oracle {
    async fn start() -> Oracle {
        let cluster = Cluster::new().await.unwrap();
        let client = cluster.connect("postgres").await.unwrap();
        client.batch_execute(SESSION).await.unwrap();
        let version = cluster.server_version_num().await.unwrap();
        Oracle {
            _cluster: cluster,
            client,
            registry: TypeRegistry::new(),
            version,
        }
    }

    /// A key column's order, built from the catalog the way a caller must: the type, and
    /// the collation's provider and locale, with the database default resolved through
    /// `pg_database`.
    async fn key_column(&self, table: &str, column: &str) -> Result<KeyColumnOrder, String> {
        // Where each server version keeps a collation's locale: libc always in collcollate
        // (datcollate); ICU in colliculocale (daticulocale) on 15-16; ICU and builtin in
        // colllocale (datlocale) from 17 on; before 15 the database default is always libc.
        let (db_provider, coll_locale, db_locale) = match self.version {
            v if v >= 170_000 => ("d.datlocprovider::text", "c.colllocale", "d.datlocale"),
            v if v >= 150_000 => (
                "d.datlocprovider::text",
                "c.colliculocale",
                "d.daticulocale",
            ),
            _ => ("'c'", "NULL::text", "NULL::text"),
        };
        let row = self
            .client
            .query_one(
                &format!(
                    "SELECT a.atttypid, \
                       CASE WHEN a.attcollation = 0 THEN NULL \
                            WHEN c.collprovider = 'd' THEN {db_provider} \
                            ELSE c.collprovider::text END, \
                       CASE WHEN c.collprovider = 'd' \
                            THEN COALESCE({db_locale}, d.datcollate::text) \
                            ELSE COALESCE({coll_locale}, c.collcollate::text) END \
                     FROM pg_attribute a \
                     LEFT JOIN pg_collation c ON c.oid = a.attcollation \
                     JOIN pg_database d ON d.datname = current_database() \
                     WHERE a.attrelid = $1::text::regclass AND a.attname = $2"
                ),
                &[&table, &column],
            )
            .await
            .unwrap();
        let type_oid: u32 = row.get(0);
        let provider: Option<String> = row.get(1);
        let collate: Option<String> = row.get(2);
        let collate = collate.as_deref().unwrap_or("");
        let collation = match provider.as_deref() {
            None => KeyCollation::NotCollatable,
            Some("c") => KeyCollation::Libc { collate },
            Some("i") => KeyCollation::Icu { locale: collate },
            Some("b") => KeyCollation::Builtin { locale: collate },
            Some(other) => panic!("unknown collation provider {other:?}"),
        };
        KeyColumnOrder::for_column(type_oid, collation).map_err(|e| e.to_string())
    }

    /// Stores `literals` (SQL expressions) in a fresh table with columns `columns`
    /// (`name type`, …), then reads the rows back in `ORDER BY` order of all columns, each
    /// value decoded from its text form, with its `dense_rank()`.
    async fn stored_in_order(
        &self,
        table: &str,
        columns: &[(&str, &str)],
        rows: &[Vec<String>],
    ) -> (KeyOrder, Vec<(Vec<Value>, i64)>) {
        let defs: Vec<String> = columns.iter().map(|(n, t)| format!("{n} {t}")).collect();
        let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
        let names = names.join(", ");
        self.client
            .batch_execute(&format!(
                "CREATE TABLE {table} (id serial, {})",
                defs.join(", ")
            ))
            .await
            .unwrap();
        for chunk in rows.chunks(100) {
            let values: Vec<String> = chunk
                .iter()
                .map(|r| format!("({})", r.join(", ")))
                .collect();
            self.client
                .batch_execute(&format!(
                    "INSERT INTO {table} ({names}) VALUES {}",
                    values.join(", ")
                ))
                .await
                .unwrap_or_else(|e| panic!("{table}: {e}"));
        }
        let mut orders = Vec::new();
        let mut types = Vec::new();
        for (name, _) in columns {
            let order = self
                .key_column(table, name)
                .await
                .unwrap_or_else(|e| panic!("{table}.{name}: {e}"));
            types.push(self.registry.resolve(order.type_oid()));
            orders.push(order);
        }
        let messages = self
            .client
            .simple_query(&format!(
                "SELECT {names}, dense_rank() OVER (ORDER BY {names}) \
                 FROM {table} ORDER BY {names}, id"
            ))
            .await
            .unwrap();
        let mut out = Vec::new();
        for m in messages {
            let SimpleQueryMessage::Row(row) = m else {
                continue;
            };
            let key: Vec<Value> = types
                .iter()
                .enumerate()
                .map(|(i, ty)| {
                    let text = row.get(i).unwrap();
                    decode_text(ty, &Bytes::copy_from_slice(text.as_bytes()))
                        .unwrap_or_else(|e| panic!("{table}: {text:?}: {e}"))
                })
                .collect();
            let rank: i64 = row.get(columns.len()).unwrap().parse().unwrap();
            out.push((key, rank));
        }
        assert_eq!(out.len(), rows.len(), "{table}");
        (KeyOrder::new(orders), out)
    }

    /// `KeyOrder` orders the stored values as `ORDER BY` did, with the same equal groups:
    /// every pair compares as their ranks do, and a shuffled copy sorts back into ranks
    /// that never decrease.
    async fn check_order(&self, table: &str, columns: &[(&str, &str)], rows: &[Vec<String>]) {
        let (order, stored) = self.stored_in_order(table, columns, rows).await;
        let distinct = stored.last().map_or(0, |(_, r)| *r);
        assert!(
            distinct > 1 && (distinct as usize) < stored.len(),
            "{table}: want both distinct and equal values, got {distinct} groups of {}",
            stored.len()
        );
        for (a, ra) in &stored {
            for (b, rb) in &stored {
                let got = order.compare(a, b).unwrap();
                assert_eq!(
                    got,
                    ra.cmp(rb),
                    "{table}: {a:?} (rank {ra}) vs {b:?} (rank {rb})"
                );
            }
        }
        let mut rng = Rng(0x5eed);
        let mut shuffled = stored.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.below(i as u64 + 1) as usize);
        }
        shuffled.sort_by(|(a, _), (b, _)| order.compare(a, b).unwrap());
        assert!(
            shuffled.windows(2).all(|w| w[0].1 <= w[1].1),
            "{table}: sorting does not give Postgres's order"
        );
    }

    async fn check_column(&self, table: &str, column_type: &str, literals: Vec<String>) {
        let rows: Vec<Vec<String>> = literals.into_iter().map(|l| vec![l]).collect();
        self.check_order(table, &[("v", column_type)], &rows).await;
    }
}

/// `edges` as literals of the type `cast`: `'edge'::cast`.
fn typed_literals(cast: &str, edges: &[&str]) -> Vec<String> {
    edges.iter().map(|s| format!("'{s}'::{cast}")).collect()
}

fn integers(rng: &mut Rng, cast: &str, min: i64, max: i64) -> Vec<String> {
    let mut v: Vec<i64> = vec![min, min + 1, -1, 0, 1, max - 1, max];
    v.extend((0..150).map(|_| rng.range(-40, 40)));
    v.extend((0..150).map(|_| rng.range(min, max)));
    v.iter().map(|i| format!("({i})::{cast}")).collect()
}

fn floats8(rng: &mut Rng) -> Vec<String> {
    let mut v: Vec<String> = [
        "'NaN'",
        "'Infinity'",
        "'-Infinity'",
        "'-0'",
        "'0'",
        "'5e-324'",
        "'-5e-324'",
        "'2.2250738585072014e-308'",
        "'1.7976931348623157e308'",
        "'-1.7976931348623157e308'",
        "('Infinity'::float8 - 'Infinity'::float8)",
        "('-Infinity'::float8 + 'Infinity'::float8)",
        "'NaN'",
        "'-0'",
    ]
    .iter()
    .map(|s| format!("{s}::float8"))
    .collect();
    for _ in 0..150 {
        v.push(format!("{}::float8", rng.range(-20, 20) as f64 / 4.0));
    }
    for _ in 0..150 {
        let x = f64::from_bits(rng.next());
        if x.is_finite() {
            v.push(format!("'{x:e}'::float8"));
        }
    }
    v
}

fn floats4(rng: &mut Rng) -> Vec<String> {
    let mut v: Vec<String> = [
        "'NaN'",
        "'Infinity'",
        "'-Infinity'",
        "'-0'",
        "'0'",
        "'1e-45'",
        "'-1e-45'",
        "'1.1754944e-38'",
        "'3.4028235e38'",
        "'-3.4028235e38'",
        "('Infinity'::float4 - 'Infinity'::float4)",
    ]
    .iter()
    .map(|s| format!("{s}::float4"))
    .collect();
    for _ in 0..150 {
        v.push(format!("{}::float4", rng.range(-20, 20) as f32 / 4.0));
    }
    for _ in 0..150 {
        let x = f32::from_bits(rng.next() as u32);
        if x.is_finite() {
            v.push(format!("'{x:e}'::float4"));
        }
    }
    v
}

fn numerics(rng: &mut Rng) -> Vec<String> {
    let nines = "9".repeat(1000);
    let mut v = typed_literals(
        "numeric",
        &[
            "NaN",
            "Infinity",
            "-Infinity",
            "NaN",
            "0",
            "0.0",
            "-0.000",
            "1",
            "1.0",
            "1.00",
            "-1.5",
            "-1.50",
            "1e-100",
            "-1e-100",
            "0.0000001",
            "0.00000010",
            "0.00000001",
            "99999.9999",
            "100000",
            "100000.00000",
            "123456789012345678901234567890.123456789",
            "-123456789012345678901234567890.1234567890",
        ],
    );
    v.push(format!("'{nines}.5'::numeric"));
    v.push(format!("'-{nines}.5'::numeric"));
    v.push(format!("'{nines}'::numeric"));
    for _ in 0..200 {
        // Small values at several scales, so equal values with different scales abound.
        let units = rng.range(-30, 30);
        let scale = rng.below(4) as usize;
        let extra = rng.below(3) as usize;
        let digits = format!("{:0>width$}", units.unsigned_abs(), width = scale + 1);
        let (int, frac) = digits.split_at(digits.len() - scale);
        let sign = if units < 0 { "-" } else { "" };
        let frac = format!("{frac}{}", "0".repeat(extra));
        let text = if frac.is_empty() {
            format!("{sign}{int}")
        } else {
            format!("{sign}{int}.{frac}")
        };
        v.push(format!("'{text}'::numeric"));
    }
    for _ in 0..80 {
        let mantissa = rng.next() as i64;
        let scale = rng.below(30);
        v.push(format!("({mantissa}::numeric / 10::numeric ^ {scale})"));
    }
    v
}

fn dates(rng: &mut Rng) -> Vec<String> {
    let mut v = typed_literals(
        "date",
        &[
            "infinity",
            "-infinity",
            "4714-11-24 BC",
            "5874897-12-31",
            "2000-01-01",
            "1999-12-31",
            "0001-01-01",
            "0001-12-31 BC",
            "infinity",
        ],
    );
    for _ in 0..150 {
        v.push(format!("'{}'::date", Date::Days(rng.range(-20, 20) as i32)));
    }
    for _ in 0..150 {
        let days = rng.range(-2_451_545, 2_000_000_000) as i32;
        v.push(format!("'{}'::date", Date::Days(days)));
    }
    v
}

fn times(rng: &mut Rng) -> Vec<String> {
    let mut v: Vec<String> = ["00:00", "24:00", "23:59:59.999999", "00:00:00.000001"]
        .iter()
        .map(|s| format!("'{s}'::time"))
        .collect();
    for _ in 0..150 {
        v.push(format!("'{}'::time", Time(rng.range(0, 20) * 500_000)));
    }
    for _ in 0..150 {
        v.push(format!("'{}'::time", Time(rng.range(0, USECS_PER_DAY))));
    }
    v
}

/// Microseconds since 2000 of Postgres's first and last timestamps.
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const MAX_TIMESTAMP: i64 = 9_223_371_331_199_999_999;

/// Microseconds since 2000: 150 within 2.5 s of it in quarter seconds (so equal values
/// abound), then 150 anywhere in Postgres's range.
fn timestamp_micros(rng: &mut Rng) -> Vec<i64> {
    let mut micros: Vec<i64> = (0..150).map(|_| rng.range(-10, 10) * 250_000).collect();
    micros.extend((0..150).map(|_| rng.range(MIN_TIMESTAMP, MAX_TIMESTAMP)));
    micros
}

fn timestamps(rng: &mut Rng) -> Vec<String> {
    let mut v = typed_literals(
        "timestamp",
        &[
            "infinity",
            "-infinity",
            "4714-11-24 00:00 BC",
            "294276-12-31 23:59:59.999999",
            "2000-01-01 00:00",
            "1999-12-31 23:59:59.999999",
            "-infinity",
        ],
    );
    v.extend(
        timestamp_micros(rng)
            .into_iter()
            .map(|m| format!("'{}'::timestamp", Timestamp::Micros(m))),
    );
    v
}

fn timestamptzs(rng: &mut Rng) -> Vec<String> {
    let mut v = typed_literals(
        "timestamptz",
        &[
            "infinity",
            "-infinity",
            "4714-11-24 00:00+00 BC",
            "294276-12-31 23:59:59.999999+00",
            // The same instant in three zones.
            "2024-01-01 12:00+02",
            "2024-01-01 10:00+00",
            "2024-01-01 05:00-05",
            "2024-01-01 10:00:00.000001+00",
        ],
    );
    v.extend(
        timestamp_micros(rng)
            .into_iter()
            .map(|m| format!("'{}'::timestamptz", TimestampTz::Micros(m))),
    );
    v
}

fn uuids(rng: &mut Rng) -> Vec<String> {
    let mut v = typed_literals(
        "uuid",
        &[
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "7fffffff-ffff-ffff-ffff-ffffffffffff",
            "80000000-0000-0000-0000-000000000000",
            "00000000-0000-0000-0000-000000000001",
            "00000000-0000-0000-0000-000000000080",
        ],
    );
    let firsts = [0x00u8, 0x01, 0x7f, 0x80, 0xfe, 0xff];
    for _ in 0..300 {
        let mut b = [0u8; 16];
        b[0] = *rng.pick(&firsts);
        b[15] = *rng.pick(&firsts);
        if rng.below(2) == 0 {
            b[7] = rng.next() as u8;
        }
        v.push(format!("'{}'::uuid", uuid::Uuid::from_bytes(b)));
    }
    v
}

fn byteas(rng: &mut Rng) -> Vec<String> {
    let mut v: Vec<String> = [
        "", "00", "0000", "0001", "01", "7f", "80", "ff", "ff00", "", "61",
    ]
    .iter()
    .map(|s| format!("'\\x{s}'::bytea"))
    .collect();
    let alphabet = ["00", "01", "7f", "80", "ff", "61"];
    for _ in 0..300 {
        let len = rng.below(4);
        let hex: String = (0..len).map(|_| *rng.pick(&alphabet)).collect();
        v.push(format!("'\\x{hex}'::bytea"));
    }
    v
}

/// Strings from a small alphabet (ASCII, control characters, space, two- three- and
/// four-byte UTF-8 up to U+10FFFF), so prefixes and duplicates abound; `spaces` adds
/// trailing spaces now and then.
fn strings(rng: &mut Rng, spaces: bool) -> Vec<String> {
    let alphabet = [
        "a",
        "b",
        "A",
        "z",
        " ",
        "\t",
        "\u{1}",
        "e",
        "é",
        "ß",
        "\u{7f}",
        "\u{80}",
        "\u{ffff}",
        "😀",
        "\u{10ffff}",
        "'",
    ];
    let mut v: Vec<String> = ["", "", "a", "a ", "a\t", "a\u{1}", " a", "😀"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for _ in 0..300 {
        let len = rng.below(4);
        let mut s: String = (0..len).map(|_| *rng.pick(&alphabet)).collect();
        if spaces && rng.below(3) == 0 {
            s.push_str(&" ".repeat(rng.below(3) as usize + 1));
        }
        v.push(s);
    }
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn key_order_matches_order_by_for_every_orderable_type() {
    let pg = Oracle::start().await;
    let rng = &mut Rng(42);

    pg.check_column("k_int2", "int2", integers(rng, "int2", -32768, 32767))
        .await;
    pg.check_column(
        "k_int4",
        "int4",
        integers(rng, "int4", i32::MIN.into(), i32::MAX.into()),
    )
    .await;
    pg.check_column("k_int8", "int8", integers(rng, "int8", i64::MIN, i64::MAX))
        .await;
    let mut oids: Vec<String> = [0u32, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX]
        .iter()
        .map(|o| format!("{o}::oid"))
        .collect();
    oids.extend((0..150).map(|_| format!("{}::oid", rng.below(40))));
    oids.extend((0..150).map(|_| format!("{}::oid", rng.next() as u32)));
    pg.check_column("k_oid", "oid", oids).await;
    let bools = (0..40)
        .map(|_| if rng.below(2) == 0 { "false" } else { "true" }.to_owned())
        .collect();
    pg.check_column("k_bool", "bool", bools).await;
    pg.check_column("k_float4", "float4", floats4(rng)).await;
    pg.check_column("k_float8", "float8", floats8(rng)).await;
    pg.check_column("k_numeric", "numeric", numerics(rng)).await;
    pg.check_column("k_date", "date", dates(rng)).await;
    pg.check_column("k_time", "time", times(rng)).await;
    pg.check_column("k_timestamp", "timestamp", timestamps(rng))
        .await;
    pg.check_column("k_timestamptz", "timestamptz", timestamptzs(rng))
        .await;
    pg.check_column("k_uuid", "uuid", uuids(rng)).await;
    pg.check_column("k_bytea", "bytea", byteas(rng)).await;

    let quoted = |v: Vec<String>| v.iter().map(|s| quote(s)).collect::<Vec<_>>();
    pg.check_column(
        "k_text_c",
        "text COLLATE \"C\"",
        quoted(strings(rng, false)),
    )
    .await;
    pg.check_column(
        "k_text_posix",
        "text COLLATE \"POSIX\"",
        quoted(strings(rng, false)),
    )
    .await;
    pg.check_column(
        "k_varchar_c",
        "varchar(20) COLLATE \"C\"",
        quoted(strings(rng, false)),
    )
    .await;
    // `name` has the C collation by default.
    pg.check_column("k_name", "name", quoted(strings(rng, false)))
        .await;
    pg.check_column(
        "k_bpchar_c",
        "bpchar COLLATE \"C\"",
        quoted(strings(rng, true)),
    )
    .await;
    pg.check_column(
        "k_char4_c",
        "char(4) COLLATE \"C\"",
        quoted(strings(rng, true)),
    )
    .await;
    // The test cluster's database has the C locale, so its default collation is C once
    // resolved through pg_database.
    pg.check_column("k_text_default", "text", quoted(strings(rng, false)))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn composite_key_matches_order_by() {
    let pg = Oracle::start().await;
    let rng = &mut Rng(7);
    let strings = strings(rng, false);
    let rows: Vec<Vec<String>> = strings
        .iter()
        .map(|s| vec![rng.range(-2, 2).to_string(), quote(s)])
        .collect();
    pg.check_order(
        "k_composite",
        &[("a", "int4"), ("b", "text COLLATE \"C\"")],
        &rows,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn catalog_collations_other_than_c_are_refused() {
    let pg = Oracle::start().await;
    // Collations initdb imported from the operating system and ICU, when there are any.
    let rows = pg
        .client
        .query(
            "SELECT collname FROM pg_collation \
             WHERE collname NOT IN ('C', 'POSIX', 'default', 'ucs_basic') \
               AND collencoding IN (-1, 6) \
             ORDER BY collname LIMIT 5",
            &[],
        )
        .await
        .unwrap();
    for (i, row) in rows.iter().enumerate() {
        let name: String = row.get(0);
        let table = format!("k_coll_{i}");
        pg.client
            .batch_execute(&format!("CREATE TABLE {table} (v text COLLATE \"{name}\")"))
            .await
            .unwrap();
        let result = pg.key_column(&table, "v").await;
        assert!(
            result.as_ref().is_err_and(|e| e.contains("sort bytewise")),
            "{name}: {result:?}"
        );
    }
    // Never orderable, whatever the collation.
    pg.client
        .batch_execute("CREATE TABLE k_unsupported (i interval, j jsonb, t timetz)")
        .await
        .unwrap();
    for column in ["i", "j", "t"] {
        let e = pg.key_column("k_unsupported", column).await.unwrap_err();
        assert!(e.contains("not reproduced"), "{column}: {e}");
    }
}
