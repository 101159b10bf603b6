//! Every `pgcdc` command shown in the documentation (README.md, docs/*.md,
//! benches/README.md: fenced `sh` blocks, continued with a trailing backslash) is one the
//! command line accepts: parsed by the CLI's own parser, so a renamed or removed flag
//! fails here instead of in a reader's terminal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use cdc_examples::cli::Cli;
use clap::Parser;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The documentation files.
fn documents() -> Vec<PathBuf> {
    let root = workspace();
    let mut files = vec![root.join("README.md"), root.join("benches/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The `pgcdc …` commands of the `sh` blocks of `text`, continuation lines joined, with
/// their line numbers.
fn commands(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && (trimmed == "```sh" || trimmed == "```bash");
            continue;
        }
        if !in_sh {
            continue;
        }
        if let Some((start, mut command)) = current.take() {
            command.push(' ');
            command.push_str(line.trim().trim_end_matches('\\'));
            if line.trim_end().ends_with('\\') {
                current = Some((start, command));
            } else {
                out.push((start, command));
            }
            continue;
        }
        if trimmed.starts_with("pgcdc ") {
            let command = trimmed.trim_end().trim_end_matches('\\').to_owned();
            if line.trim_end().ends_with('\\') {
                current = Some((n + 1, command));
            } else {
                out.push((n + 1, command));
            }
        }
    }
    out
}

/// Splits a shell command line into words: whitespace-separated, single and double
/// quotes grouping (enough for the documentation's commands).
fn words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

fn shown(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_pgcdc_command_in_the_docs_parses() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, command) in commands(&text) {
            // A pipe or a redirection ends the pgcdc part.
            let command = command
                .split(['|', '>'])
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            checked += 1;
            if let Err(e) = Cli::try_parse_from(words(&command)) {
                if matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ) {
                    continue;
                }
                failures.push(format!("{}:{line}: {command}\n{e}", shown(&file)));
            }
        }
    }
    assert!(
        checked >= 5,
        "only {checked} pgcdc commands found in the docs"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_extraction_joins_continuations_and_splits_quotes() {
    let text =
        "x\n```sh\npgcdc stream --uri 'a b' \\\n  --publication p\necho no\n```\npgcdc outside\n";
    let found = commands(text);
    assert_eq!(found.len(), 1);
    assert_eq!(
        words(&found[0].1),
        ["pgcdc", "stream", "--uri", "a b", "--publication", "p"]
    );
    // A wrong flag is refused by the parser this test uses.
    assert!(Cli::try_parse_from(["pgcdc", "stream", "--no-such-flag"]).is_err());
}
