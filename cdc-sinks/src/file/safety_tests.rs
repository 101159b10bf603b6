//! Tests that the file sink touches only files it owns: it refuses a checkpoint that names
//! files pgcdc never writes, never removes a file it did not create, never writes through
//! a symbolic link, refuses a second writer on the directory, and gives every table its
//! own valid file name.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;

use cdc_core::{ErrorKind, ReplicaIdentity, SchemaRef, SinkBatch, TableName, Value};
use proptest::prelude::*;

use super::tests::{contents, feed, open, options, reference, workload};
use super::*;
use crate::feldera::Framing;
use crate::testing::{self, batch, insert, pos, text};

/// Opens a sink on `options` and returns the error it fails with.
async fn open_err(options: FileSinkOptions) -> Error {
    match FelderaFileSink::new(options) {
        Ok(mut sink) => match sink.open(Acknowledger::channel().0).await {
            Ok(_) => panic!("the sink opened, it should have been refused"),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// Edits the checkpoint file of `dir` as JSON.
fn edit_checkpoint(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(CHECKPOINT_FILE);
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
}

/// A table `schema.name` with an integer key `id` and a text column.
fn named_table(schema: &str, name: &str) -> SchemaRef {
    let base = testing::table(
        "t",
        &[("id", 23), ("note", 25)],
        &["id"],
        ReplicaIdentity::Default,
    );
    let mut table = (*base).clone();
    table.name = TableName::new(schema, name);
    Arc::new(table)
}

/// One transaction inserting one row into each of `tables`.
fn insert_into(id: u64, tables: &[&SchemaRef]) -> SinkBatch {
    let lsn = 10_000 + id * 100;
    let mut events = vec![testing::begin(lsn)];
    for (i, table) in tables.iter().enumerate() {
        events.push(insert(
            pos(lsn, 1 + i as u64),
            table,
            vec![Value::Int4(id as i32), text("row")],
        ));
    }
    events.push(testing::commit(lsn, 1 + tables.len() as u64));
    batch(id, events)
}

// ---- A checkpoint that names files pgcdc never writes is refused ----

#[tokio::test]
async fn a_checkpoint_naming_a_file_pgcdc_never_writes_is_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    let absolute = elsewhere.path().join("absolute.json");
    let absolute = absolute.to_str().unwrap();
    for name in [
        "../escaped.json",
        absolute,
        "sub/dir.json",
        "nul\0.json",
        ".",
        "..",
        "",
        "notes.txt",
        MULTIPLEXED_FILE,
        "public.orders.json/",
    ] {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("out");
        let (mut sink, _) = open(options(&dir)).await;
        feed(&mut sink, None, &workload()[..1]).await.unwrap();
        drop(sink);
        edit_checkpoint(&dir, |json| json["files"][name] = 0.into());
        let before = contents(&dir);

        let err = open_err(options(&dir)).await;
        assert_eq!(err.kind(), ErrorKind::Config, "{name:?}: {err}");
        assert!(
            err.message().contains(&format!("{name:?}"))
                && err.message().contains("not one pgcdc wrote"),
            "{name:?}: {err}"
        );
        assert!(!parent.path().join("escaped.json").exists(), "{name:?}");
        assert!(!Path::new(absolute).exists(), "{name:?}");
        assert!(!dir.join("sub").exists(), "{name:?}");
        assert_eq!(contents(&dir), before, "{name:?}");
    }
}

#[tokio::test]
async fn a_multiplexed_checkpoint_may_name_only_changes_json() {
    let dir = tempfile::tempdir().unwrap();
    let multiplexed = FileSinkOptions {
        layout: FileLayout::Multiplexed,
        ..options(dir.path())
    };
    let (mut sink, _) = open(multiplexed.clone()).await;
    feed(&mut sink, None, &workload()[..1]).await.unwrap();
    drop(sink);
    edit_checkpoint(dir.path(), |json| {
        json["files"]["public.orders.json"] = 0.into()
    });
    let err = open_err(multiplexed).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.message().contains("\"public.orders.json\""), "{err}");
    assert!(!dir.path().join("public.orders.json").exists());
}

#[tokio::test]
async fn a_checkpoint_whose_snapshot_start_names_a_foreign_file_is_refused() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("out");
    let (mut sink, _) = open(options(&dir)).await;
    feed(&mut sink, None, &workload()[..1]).await.unwrap();
    drop(sink);
    edit_checkpoint(&dir, |json| {
        json["snapshot_start"] = serde_json::json!({ "../escaped.json": 0 })
    });
    let err = open_err(options(&dir)).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.message().contains("\"../escaped.json\""), "{err}");
}

// ---- Files the checkpoint does not name as ours are never removed ----

#[tokio::test]
async fn resume_keeps_files_the_checkpoint_does_not_name() {
    let batches = workload();
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    feed(&mut sink, None, &batches[..2]).await.unwrap();
    drop(sink);
    let foreign = [
        ("tsconfig.base.json", "{\"compilerOptions\":{}}"),
        ("notes.v2.json", "[]"),
        ("public.other.json", "someone else's"),
    ];
    for (name, text) in foreign {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let (mut sink, token) = open(options(dir.path())).await;
    feed(&mut sink, token.as_ref(), &batches).await.unwrap();
    drop(sink);
    let (_sink, _) = open(options(dir.path())).await;
    let mut expected = reference(&batches).await;
    for (name, text) in foreign {
        expected.insert(name.to_owned(), text.to_owned());
    }
    assert_eq!(contents(dir.path()), expected);
}

#[tokio::test]
async fn a_data_file_created_after_the_checkpoint_is_removed_at_recovery() {
    let (orders, log) = (
        named_table("public", "orders"),
        named_table("public", "log"),
    );
    let first = insert_into(1, &[&orders]);
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    feed(&mut sink, None, std::slice::from_ref(&first))
        .await
        .unwrap();
    // A new table's file is created, written and never checkpointed.
    sink.write(insert_into(2, &[&orders, &log])).await.unwrap();
    assert!(dir.path().join("public.log.json").exists());
    drop(sink);
    let (_sink, token) = open(options(dir.path())).await;
    assert_eq!(token.as_ref(), Some(&first.resume_token));
    assert_eq!(
        contents(dir.path()),
        reference(std::slice::from_ref(&first)).await
    );
}

#[tokio::test]
async fn a_foreign_file_where_a_new_data_file_goes_is_neither_written_nor_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    // Appears after the checkpoint was created, before the table's first change.
    std::fs::write(dir.path().join("public.orders.json"), "not ours").unwrap();
    let err = feed(&mut sink, None, &workload()[..1]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.message().contains("public.orders.json"), "{err}");
    drop(sink);
    let (_sink, _) = open(options(dir.path())).await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("public.orders.json")).unwrap(),
        "not ours"
    );
}

// ---- Symbolic links are never followed ----

#[tokio::test]
async fn a_symlink_at_a_checkpointed_data_file_is_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    let victim = elsewhere.path().join("victim.txt");
    std::fs::write(
        &victim,
        "precious, and longer than any checkpointed length ".repeat(20),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    feed(&mut sink, None, &workload()[..1]).await.unwrap();
    drop(sink);
    let data = dir.path().join("public.orders.json");
    std::fs::remove_file(&data).unwrap();
    symlink(&victim, &data).unwrap();

    let err = open_err(options(dir.path())).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(
        err.message().contains("public.orders.json") && err.message().contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious, and longer than any checkpointed length ".repeat(20)
    );
}

#[tokio::test]
async fn a_symlink_where_a_new_data_file_goes_is_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    let victim = elsewhere.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let missing = elsewhere.path().join("missing.txt");
    for target in [&victim, &missing] {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, _) = open(options(dir.path())).await;
        symlink(target, dir.path().join("public.orders.json")).unwrap();
        let err = feed(&mut sink, None, &workload()[..1]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.message().contains("public.orders.json"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!missing.exists());
    }
}

#[tokio::test]
async fn a_symlink_at_the_checkpoint_name_is_refused() {
    let elsewhere = tempfile::tempdir().unwrap();
    // A dangling link, and a link to a valid checkpoint of another directory.
    let dangling = elsewhere.path().join("missing.json");
    let other = tempfile::tempdir().unwrap();
    let (sink, _) = open(options(other.path())).await;
    drop(sink);
    let valid = other.path().join(CHECKPOINT_FILE);
    let valid_text = std::fs::read_to_string(&valid).unwrap();
    for target in [&dangling, &valid] {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join(CHECKPOINT_FILE);
        symlink(target, &link).unwrap();
        let err = open_err(options(dir.path())).await;
        assert_eq!(err.kind(), ErrorKind::Config, "{target:?}: {err}");
        assert!(
            err.message().contains(CHECKPOINT_FILE) && err.message().contains("symbolic link"),
            "{err}"
        );
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert!(!dangling.exists());
        assert_eq!(std::fs::read_to_string(&valid).unwrap(), valid_text);
    }
}

#[tokio::test]
async fn a_symlink_at_the_temporary_checkpoint_name_is_not_written_through() {
    let elsewhere = tempfile::tempdir().unwrap();
    let victim = elsewhere.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let batches = workload();
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    symlink(&victim, dir.path().join(state::CHECKPOINT_TMP)).unwrap();
    let err = feed(&mut sink, None, &batches[..1]).await.unwrap_err();
    assert!(err.message().contains(state::CHECKPOINT_TMP), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(
        !dir.path()
            .join(CHECKPOINT_FILE)
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    drop(sink);
    // Recovery removes the stray link (the name is pgcdc's own) and carries on.
    let (mut sink, token) = open(options(dir.path())).await;
    feed(&mut sink, token.as_ref(), &batches).await.unwrap();
    assert_eq!(contents(dir.path()), reference(&batches).await);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

// ---- One writer per directory ----

#[tokio::test]
async fn a_second_sink_on_one_directory_is_refused_with_the_holders_pid() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = open(options(dir.path())).await;
    // The same process: the lock belongs to the first sink's open file, not the process.
    let err = open_err(options(dir.path())).await;
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(
        err.message()
            .contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    drop(first);
    let (_second, _) = open(options(dir.path())).await;
}

// ---- Every table gets its own valid file name ----

#[test]
fn tables_differing_only_in_case_get_names_distinct_under_case_folding() {
    let upper = table_file_name(&TableName::new("public", "Orders"));
    let lower = table_file_name(&TableName::new("public", "orders"));
    assert_eq!(lower, "public.orders.json");
    assert_ne!(upper.to_lowercase(), lower.to_lowercase());
}

#[test]
fn the_longest_legal_non_ascii_names_fit_in_a_file_name() {
    // 63 bytes each: Postgres' identifier limit.
    let part = format!("{}x", "é".repeat(31));
    assert_eq!(part.len(), 63);
    let name = table_file_name(&TableName::new(part.clone(), part));
    assert!(name.len() <= 255, "{} bytes: {name}", name.len());
}

#[tokio::test]
async fn mixed_case_and_long_tables_each_get_their_own_file() {
    let long = format!("{}x", "é".repeat(31));
    let tables = [
        named_table("public", "Orders"),
        named_table("public", "orders"),
        named_table(&long, &long),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    let refs: Vec<&SchemaRef> = tables.iter().collect();
    feed(&mut sink, None, &[insert_into(1, &refs)])
        .await
        .unwrap();
    let files = contents(dir.path());
    assert_eq!(files.len(), 3, "{files:?}");
    for table in &tables {
        let name = table_file_name(&table.name);
        assert_eq!(files[&name], "{\"insert\":{\"id\":1,\"note\":\"row\"}}\n");
    }
}

/// One identifier part: letters of both cases (ASCII and not, including characters whose
/// case folding is unusual), digits, punctuation the mapping escapes, up to 63 bytes.
fn identifier() -> impl Strategy<Value = String> {
    let chars = prop_oneof![
        proptest::char::range('a', 'z'),
        proptest::char::range('A', 'Z'),
        proptest::char::range('0', '9'),
        proptest::sample::select(vec![
            '_', '-', '.', '%', '/', ' ', '~', '"', 'é', 'É', 'ß', 'ẞ', 'Ω', 'ω', 'K', 'ſ', 'İ',
            'ı', '日', '🦀',
        ]),
    ];
    proptest::collection::vec(chars, 0..64).prop_map(|chars| {
        let mut out = String::new();
        for c in chars {
            if out.len() + c.len_utf8() > 63 {
                break;
            }
            out.push(c);
        }
        out
    })
}

/// A table name and another one: unrelated, or the same with its case changed.
fn two_tables() -> impl Strategy<Value = (TableName, TableName)> {
    (
        identifier(),
        identifier(),
        identifier(),
        identifier(),
        0..4u8,
    )
        .prop_map(|(s1, n1, s2, n2, how)| {
            let a = TableName::new(s1.clone(), n1.clone());
            let b = match how {
                0 => TableName::new(s2, n2),
                1 => TableName::new(s1.to_uppercase(), n1.to_uppercase()),
                2 => TableName::new(s1.to_lowercase(), n1.to_lowercase()),
                _ => TableName::new(s1, n1.to_uppercase()),
            };
            (a, b)
        })
}

/// Whether a per-table checkpoint listing `file` passes the validation at `open`.
fn accepted_in_a_checkpoint(file: &str) -> bool {
    let mut state = state::CheckpointState::empty(FileLayout::PerTable, Framing::Lines, None);
    state.files.insert(file.to_owned(), 0);
    state.check_names(Path::new(CHECKPOINT_FILE)).is_ok()
}

proptest! {
    #[test]
    fn distinct_tables_map_to_distinct_valid_file_names((a, b) in two_tables()) {
        let (fa, fb) = (table_file_name(&a), table_file_name(&b));
        for f in [&fa, &fb] {
            prop_assert!(f.len() <= 255, "{} bytes: {f}", f.len());
            prop_assert!(!f.contains('/') && !f.contains('\0'), "{f}");
            // ASCII only, so Unicode case folding is ASCII case folding.
            prop_assert!(f.is_ascii(), "{f}");
            prop_assert!(accepted_in_a_checkpoint(f), "the checkpoint validation refuses {f}");
        }
        prop_assert_eq!(table_file_name(&a), fa.clone(), "the mapping is a function");
        if a != b {
            prop_assert_ne!(fa.to_lowercase(), fb.to_lowercase());
            prop_assert_ne!(fa.to_uppercase(), fb.to_uppercase());
        }
    }

    #[test]
    fn any_string_maps_to_a_valid_file_name(schema in ".{0,100}", name in ".{0,100}") {
        let f = table_file_name(&TableName::new(schema, name));
        prop_assert!(f.len() <= 255 && f.is_ascii(), "{f}");
        prop_assert!(!f.contains('/') && !f.contains('\0') && f != "." && f != "..", "{f}");
        prop_assert!(accepted_in_a_checkpoint(&f), "the checkpoint validation refuses {f}");
    }
}
