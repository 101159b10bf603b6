//! The stdout sink's text mode: one human-readable line per event, values in Postgres's
//! text form (`INSERT public.t @0/16B3748#1: id=1 name='x'`).

use cdc_core::{
    ChangeEvent, EventKind, OldRow, OldRowKind, Row, SnapshotMarker, TableSchema, Value,
    quote_identifier,
};

/// Appends the human-readable line for `event`.
pub(super) fn render(event: &ChangeEvent, out: &mut Vec<u8>) {
    use std::fmt::Write as _;
    // Writing into a String cannot fail: the `fmt::Result`s below are ignored.
    let mut line = String::new();
    let pos = event.position;
    let _ = match &event.kind {
        EventKind::Begin(b) => write!(line, "BEGIN xid={} final_lsn={} @{pos}", b.xid, b.final_lsn),
        EventKind::Commit(c) => write!(
            line,
            "COMMIT lsn={} end_lsn={} @{pos}",
            c.commit_lsn, c.end_lsn
        ),
        EventKind::Insert { table, new } => {
            let _ = write!(line, "INSERT {} @{pos}:", table.name);
            text_row(&mut line, table, new, false);
            Ok(())
        }
        EventKind::Update { table, old, new } => {
            let _ = write!(line, "UPDATE {} @{pos}:", table.name);
            text_row(&mut line, table, new, false);
            text_old(&mut line, table, old.as_ref());
            Ok(())
        }
        EventKind::Delete { table, old } => {
            let _ = write!(line, "DELETE {} @{pos}:", table.name);
            text_old(&mut line, table, old.as_ref());
            Ok(())
        }
        EventKind::Truncate {
            tables,
            cascade,
            restart_identity,
        } => {
            let names: Vec<String> = tables.iter().map(|t| t.name.to_string()).collect();
            write!(
                line,
                "TRUNCATE {}{}{} @{pos}",
                names.join(", "),
                if *cascade { " CASCADE" } else { "" },
                if *restart_identity {
                    " RESTART IDENTITY"
                } else {
                    ""
                }
            )
        }
        EventKind::SchemaChange { old, new } => {
            let _ = write!(line, "SCHEMA {} @{pos}:", new.name);
            match old {
                Some(old) => {
                    let diffs = old.differences(new);
                    let _ = write!(line, " {}", diffs.join("; "));
                }
                None => {
                    for c in &new.columns {
                        let _ = write!(
                            line,
                            " {} {}",
                            quote_identifier(&c.name),
                            c.column_type
                                .name
                                .clone()
                                .unwrap_or_else(|| format!("oid {}", c.column_type.oid))
                        );
                    }
                }
            }
            Ok(())
        }
        EventKind::Message {
            transactional,
            prefix,
            content,
        } => write!(
            line,
            "MESSAGE prefix={prefix:?}{} @{pos}: {:?}",
            if *transactional { " transactional" } else { "" },
            String::from_utf8_lossy(content)
        ),
        EventKind::Snapshot(marker) => match marker {
            SnapshotMarker::Started => write!(line, "SNAPSHOT started @{pos}"),
            SnapshotMarker::Restarted => write!(line, "SNAPSHOT restarted @{pos}"),
            SnapshotMarker::TableStarted(t) => write!(line, "SNAPSHOT table {t} started @{pos}"),
            SnapshotMarker::TableCompleted { table, rows } => {
                write!(line, "SNAPSHOT table {table} completed, {rows} rows @{pos}")
            }
            SnapshotMarker::Completed { consistent_point } => write!(
                line,
                "SNAPSHOT completed, consistent point {consistent_point} @{pos}"
            ),
            SnapshotMarker::ChunkStarted { table, chunk } => {
                write!(line, "SNAPSHOT table {table} chunk {chunk} started @{pos}")
            }
            SnapshotMarker::ChunkCompleted { table, chunk, rows } => write!(
                line,
                "SNAPSHOT table {table} chunk {chunk} completed, {rows} rows @{pos}"
            ),
            _ => write!(
                line,
                "SNAPSHOT (a marker this version does not know) @{pos}"
            ),
        },
        _ => write!(line, "EVENT (a kind this version does not know) @{pos}"),
    };
    line.push('\n');
    out.extend_from_slice(line.as_bytes());
}

fn text_old(line: &mut String, table: &TableSchema, old: Option<&OldRow>) {
    match old {
        None => line.push_str(" (no old row)"),
        Some(old) => {
            line.push_str(match old.kind {
                OldRowKind::Key => " (old key:",
                OldRowKind::Full => " (old:",
            });
            text_row(line, table, &old.values, old.kind == OldRowKind::Key);
            line.push(')');
        }
    }
}

fn text_row(line: &mut String, table: &TableSchema, row: &Row, key_only: bool) {
    for (column, value) in table.columns.iter().zip(row) {
        if key_only && !column.part_of_key {
            continue;
        }
        line.push(' ');
        line.push_str(&quote_identifier(&column.name));
        line.push('=');
        text_value(line, value);
    }
}

fn text_value(line: &mut String, value: &Value) {
    match value {
        Value::Null => line.push_str("NULL"),
        Value::Unchanged => line.push_str("<unchanged>"),
        Value::Bool(_)
        | Value::Int2(_)
        | Value::Int4(_)
        | Value::Int8(_)
        | Value::Oid(_)
        | Value::Float4(_)
        | Value::Float8(_)
        | Value::Numeric(_) => line.push_str(&value.to_pg_text().unwrap_or_default()),
        _ => match value.to_pg_text() {
            Some(text) => {
                line.push('\'');
                line.push_str(&text.replace('\'', "''"));
                line.push('\'');
            }
            None => line.push_str("<binary>"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures;
    use super::*;

    /// The lines for [`fixtures::events`], without their `\n`. Values keep their control
    /// characters: text mode is for people, not for line-based parsing.
    const EXPECTED: [&str; 34] = [
        r#"BEGIN xid=4294967295 final_lsn=0/16B3748 @0/16B3748#0"#,
        r#"BEGIN xid=0 final_lsn=FFFFFFFF/FFFFFFFF @0/16B3748#0"#,
        "INSERT public.scalars @0/16B3748#1: id=9223372036854775807 b=t i2=-32768 i4=-1 o=4294967295 f4=1.5 f8=0.1 n=-12.3400 t='it''s \"q\" \\ /\n\t\r\u{8}\u{c}\0\u{1}\u{1f}\u{7f} é ☃ 😀 \u{2028}\u{2029}' by='\\x0001090a63647f80ff' d='2000-01-01' tm='12:34:56.789012' ttz='01:00:00+05:30' ts='1999-12-31 23:59:59.999999' tstz='2039-02-13 23:31:30.123456+00' iv='1 year 2 mons -3 days +01:02:03.000004' u='01234567-89ab-cdef-fedc-ba9876543210' inet='10.0.0.1/8'",
        r#"INSERT public.scalars @0/16B3748#2: id=-9223372036854775808 b=f i2=32767 i4=-2147483648 o=0 f4=NaN f8=NaN n=NaN t='' by='\x' d='infinity' tm='24:00:00' ttz='00:00:00-09:30' ts='-infinity' tstz='infinity' iv='00:00:00' u='00000000-0000-0000-0000-000000000000' inet='''quoted'' "text"'"#,
        r#"INSERT public.scalars @0/16B3748#3: id=0 b=NULL i2=0 i4=2147483647 o=1 f4=Infinity f8=-Infinity n=Infinity t='ascii only' by=NULL d='0739-02-03 BC' tm='00:00:00' ttz=NULL ts='294277-01-09 04:00:54.775807' tstz='-infinity' iv='-1 mons -00:00:00.000001' u=NULL inet=NULL"#,
        r#"INSERT public.scalars @0/16B3748#4: id=-1 b=NULL i2=NULL i4=NULL o=NULL f4=-Infinity f8=Infinity n=-Infinity t=NULL by=NULL d='-infinity' tm=NULL ttz=NULL ts='infinity' tstz='290279-12-22 19:59:05.224192+00 BC' iv=NULL u=NULL inet=NULL"#,
        r#"INSERT public.scalars @0/16B3748#5: id=1 b=NULL i2=NULL i4=NULL o=NULL f4=-0 f8=-0 n=0 t=NULL by=NULL d='9999-12-31' tm=NULL ttz=NULL ts='9999-12-31 23:59:59.999999' tstz='0001-01-01 00:00:00+00' iv=NULL u=NULL inet=NULL"#,
        r#"INSERT public.scalars @0/16B3748#6: id=2 b=NULL i2=NULL i4=NULL o=NULL f4=1.1754944e-38 f8=5e-324 n=123456789012345678901234567890.000000000000000000001 t=NULL by=NULL d=NULL tm=NULL ttz=NULL ts=NULL tstz=NULL iv=NULL u=NULL inet=NULL"#,
        r#"INSERT public.scalars @0/16B3748#7: id=3 b=NULL i2=NULL i4=NULL o=NULL f4=3.4028235e+38 f8=1e+300 n=-0.5 t=NULL by=NULL d=NULL tm=NULL ttz=NULL ts=NULL tstz=NULL iv=NULL u=NULL inet=NULL"#,
        "INSERT public.composites @0/16B3748#8: id=1 ints='{1,NULL,-3}' grid='{{a,\"b,c\"},{\"\\\"q\\\"\n\",NULL}}' empty='{}' bounded='[0:1]={1,2}' floats='{NaN,Infinity,-0,2.5}' j='{\"b\": 1,\n \"a\" : [1, 2.50, 1e400, \"x y\\n\\u00e9\"], \"b\": null}' jb='{\"a\": {\"b\": [true, false, null, \"\\\"\"]}}'",
        r#"INSERT public.composites @0/16B3748#9: id=2 ints='{0}' grid='[-2:-2][1:2]={{7,NULL}}' empty=NULL bounded=NULL floats='{NULL}' j='  "just a string" ' jb='12.50e3'"#,
        "INSERT \"My Schema\".\"t\"\"x\\y\" @0/16B3748#10: \"Key \"\"1\"\"\"=1 \"col\nwith\tcontrols\u{1}\"='it''s \"q\" \\ /\n\t\r\u{8}\u{c}\0\u{1}\u{1f}\u{7f} é ☃ 😀 \u{2028}\u{2029}' \"ünï☃\"='ü'",
        "UPDATE \"My Schema\".\"t\"\"x\\y\" @0/16B3748#11: \"Key \"\"1\"\"\"=1 \"col\nwith\tcontrols\u{1}\"=<unchanged> \"ünï☃\"=NULL (no old row)",
        "UPDATE \"My Schema\".\"t\"\"x\\y\" @0/16B3748#12: \"Key \"\"1\"\"\"=2 \"col\nwith\tcontrols\u{1}\"='x' \"ünï☃\"=<unchanged> (old key: \"Key \"\"1\"\"\"=1)",
        r#"UPDATE public."full" @0/16B3748#13: id=1 big=<unchanged> x=NaN (old: id=1 big=<unchanged> x=0.5)"#,
        r#"UPDATE public."full" @0/16B3748#14: id=<unchanged> big=<unchanged> x=<unchanged> (old: id=1 big='big' x=NULL)"#,
        r#"DELETE "My Schema"."t""x\y" @0/16B3748#15: (no old row)"#,
        r#"DELETE "My Schema"."t""x\y" @0/16B3748#16: (old key: "Key ""1"""=2)"#,
        r#"DELETE public."full" @0/16B3748#17: (old: id=1 big=<unchanged> x=-0)"#,
        r#"TRUNCATE public.scalars @0/16B3748#18"#,
        r#"TRUNCATE public.scalars, "My Schema"."t""x\y" CASCADE RESTART IDENTITY @0/16B3748#19"#,
        r#"TRUNCATE  RESTART IDENTITY @0/16B3748#20"#,
        "SCHEMA \"My Schema\".\"t\"\"x\\y\" @0/16B3748#21: \"Key \"\"1\"\"\" oid 23 \"col\nwith\tcontrols\u{1}\" pg_catalog.text \"ünï☃\" oid 25",
        r#"SCHEMA "My Schema".renamed @0/16B3748#22: renamed from "My Schema"."t""x\y" to "My Schema".renamed; column "ünï☃" dropped"#,
        r#"MESSAGE prefix="it's \"q\" \\ /\n\t\r\u{8}\u{c}\0\u{1}\u{1f}\u{7f} é ☃ 😀 \u{2028}\u{2029}" transactional @0/16B3748#23: "it's \"q\" \\ /\n\t\r\u{8}\u{c}\0\u{1}\u{1f}\u{7f} é ☃ 😀 \u{2028}\u{2029}""#,
        r#"MESSAGE prefix="" @0/16B3748#24: "\0A��""#,
        r#"MESSAGE prefix="p" @0/16B3748#25: """#,
        r#"COMMIT lsn=0/16B3748 end_lsn=0/16B3780 @0/16B3748#26"#,
        r#"COMMIT lsn=0/0 end_lsn=0/1 @0/16B3748#27"#,
        r#"SNAPSHOT started @1/0#0"#,
        r#"SNAPSHOT restarted @1/0#1"#,
        r#"SNAPSHOT table "My Schema"."t""x\y" started @1/0#2"#,
        r#"SNAPSHOT table public.scalars completed, 18446744073709551615 rows @1/0#3"#,
        r#"SNAPSHOT completed, consistent point 1/28 @1/0#4"#,
    ];

    /// The lines for [`fixtures::rejected_events`]: text mode prints what JSON cannot.
    const EXPECTED_REJECTED_BY_JSON: [&str; 3] = [
        "INSERT \"My Schema\".\"t\"\"x\\y\" @0/1#1: \"Key \"\"1\"\"\"=1 \"col\nwith\tcontrols\u{1}\"=<binary> \"ünï☃\"=NULL",
        "INSERT \"My Schema\".\"t\"\"x\\y\" @0/1#2: \"Key \"\"1\"\"\"=1 \"col\nwith\tcontrols\u{1}\"=<unchanged> \"ünï☃\"=NULL",
        "INSERT \"My Schema\".\"t\"\"x\\y\" @0/1#3: \"Key \"\"1\"\"\"=1 \"col\nwith\tcontrols\u{1}\"='[1, 2' \"ünï☃\"=NULL",
    ];

    fn check(events: &[ChangeEvent], expected: &[&str]) {
        assert_eq!(events.len(), expected.len());
        for (event, expected) in events.iter().zip(expected) {
            let mut out = Vec::new();
            render(event, &mut out);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{expected}\n"),
                "{event:?}"
            );
        }
    }

    #[test]
    fn every_event_and_value_kind_renders_to_the_golden_line() {
        check(&fixtures::events(), &EXPECTED);
    }

    #[test]
    fn values_without_json_form_are_printed_too() {
        check(&fixtures::rejected_events(), &EXPECTED_REJECTED_BY_JSON);
    }
}
