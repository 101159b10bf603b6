//! Names of the data files: the file a table's changes go to, and the set of names a
//! checkpoint may list (anything else in a checkpoint was not written by pgcdc).

use cdc_core::TableName;
use sha2::{Digest, Sha256};

use super::options::FileLayout;

/// Name of the data file of [`FileLayout::Multiplexed`].
pub const MULTIPLEXED_FILE: &str = "changes.json";

/// Longest file name, in bytes, that common filesystems accept (`NAME_MAX`).
const MAX_NAME: usize = 255;
/// Extension of every data file.
const EXTENSION: &str = ".json";
/// Separates the readable prefix from the hash in a hashed name. Escaping never produces
/// it, so a hashed name never equals a readable one.
const HASH_MARK: char = '~';
/// Hex digits of the hash: the first 128 bits of SHA-256, lower-case.
const HASH_DIGITS: usize = 32;
/// Longest readable prefix of a hashed name, so that the whole name fits in [`MAX_NAME`].
const MAX_PREFIX: usize = MAX_NAME - 1 - HASH_DIGITS - EXTENSION.len();

/// The data file name of `table` under [`FileLayout::PerTable`]. Every table gets its own
/// name, always the same one (it depends on nothing but the table's exact name), of at
/// most 255 ASCII bytes, without `/` or NUL, and distinct from every other table's name
/// even on a case-insensitive filesystem.
///
/// The readable form is `schema.name.json` with every byte outside `[A-Za-z0-9_-]`
/// written as `%XX` (upper-case hex), e.g. `public.orders.json`,
/// `my%20schema.order%2Elines.json`. It is used as is when it fits in 255 bytes and the
/// schema and name have no ASCII upper-case letter (Postgres folds unquoted identifiers
/// to lower case, so these are the usual tables).
///
/// Otherwise (a quoted mixed-case name such as `"Orders"`, or a long non-ASCII name whose
/// escapes do not fit) the name is the readable form without `.json`, cut to at most 217
/// bytes (never inside an escape), then `~`, then the first 128 bits of the SHA-256 of
/// the whole readable form (without `.json`) as 32 lower-case hex digits, then `.json`:
/// `public.Orders~<32 hex digits>.json`. Both `"Orders"` and `orders` thus have their own
/// file (`public.orders.json` stays as pgcdc always named it), and names differing only
/// in case are told apart by the hash.
pub fn table_file_name(table: &TableName) -> String {
    let readable = readable_stem(table);
    let has_upper = |s: &str| s.bytes().any(|b| b.is_ascii_uppercase());
    if readable.len() + EXTENSION.len() <= MAX_NAME
        && !has_upper(&table.schema)
        && !has_upper(&table.name)
    {
        return readable + EXTENSION;
    }
    let digest = Sha256::digest(readable.as_bytes());
    let mut out = String::with_capacity(MAX_NAME);
    out.push_str(&readable[..escape_boundary(&readable, MAX_PREFIX)]);
    out.push(HASH_MARK);
    for b in digest.iter().take(HASH_DIGITS / 2) {
        out.push(hex_digit(b >> 4).to_ascii_lowercase());
        out.push(hex_digit(b & 0xF).to_ascii_lowercase());
    }
    out.push_str(EXTENSION);
    out
}

/// `schema.name`, each part escaped (see [`table_file_name`]). Injective: a `.` inside a
/// part is escaped, so the only bare `.` separates the two parts.
fn readable_stem(table: &TableName) -> String {
    let mut out = String::with_capacity(table.schema.len() + table.name.len() + 1);
    escape_part(&mut out, &table.schema);
    out.push('.');
    escape_part(&mut out, &table.name);
    out
}

fn escape_part(out: &mut String, part: &str) {
    for &b in part.as_bytes() {
        if is_plain(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(hex_digit(b >> 4));
            out.push(hex_digit(b & 0xF));
        }
    }
}

/// Bytes the escaping keeps as they are.
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789ABCDEF"[usize::from(nibble & 0xF)])
}

/// The longest length ≤ `max` at which `escaped` (ASCII, escapes of three bytes) can be
/// cut without splitting an escape.
fn escape_boundary(escaped: &str, max: usize) -> usize {
    let bytes = escaped.as_bytes();
    let mut end = 0;
    while end < bytes.len() {
        let step = if bytes[end] == b'%' { 3 } else { 1 };
        if end + step > max {
            break;
        }
        end += step;
    }
    end
}

/// Whether `name` is a data file name pgcdc writes under `layout`: `changes.json` for
/// [`FileLayout::Multiplexed`]; for [`FileLayout::PerTable`] a name of the two forms
/// [`table_file_name`] produces (a lower-case-safe readable name, or a readable prefix,
/// `~` and 32 lower-case hex digits). Every such name is a plain file name of at most 255
/// bytes: no `/`, NUL, `.` or `..`, so joined onto the directory it stays inside it.
pub(crate) fn is_data_file_name(name: &str, layout: FileLayout) -> bool {
    match layout {
        FileLayout::Multiplexed => name == MULTIPLEXED_FILE,
        FileLayout::PerTable => {
            if name.len() > MAX_NAME {
                return false;
            }
            let Some(stem) = name.strip_suffix(EXTENSION) else {
                return false;
            };
            match stem.split_once(HASH_MARK) {
                None => is_readable_stem(stem, false),
                Some((prefix, hash)) => {
                    prefix.len() <= MAX_PREFIX
                        && prefix.split('.').count() <= 2
                        && prefix.split('.').all(|p| is_escaped(p, true))
                        && hash.len() == HASH_DIGITS
                        && hash
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                }
            }
        }
    }
}

/// If `name` is a per-table file name earlier pgcdc versions wrote and this one no longer
/// does (a readable name with upper-case letters, now hashed), the table it belongs to.
pub(crate) fn legacy_table(name: &str) -> Option<TableName> {
    let stem = name.strip_suffix(EXTENSION)?;
    if !is_readable_stem(stem, true) || is_data_file_name(name, FileLayout::PerTable) {
        return None;
    }
    let (schema, table) = stem.split_once('.')?;
    Some(TableName::new(unescape(schema)?, unescape(table)?))
}

/// `schema.name` with both parts escaped; upper-case letters only if `allow_upper`.
fn is_readable_stem(stem: &str, allow_upper: bool) -> bool {
    let parts: Vec<&str> = stem.split('.').collect();
    parts.len() == 2 && parts.iter().all(|p| is_escaped(p, allow_upper))
}

/// Whether `part` is a possible output of [`escape_part`]: plain bytes and complete
/// `%XX` escapes (upper-case hex); upper-case letters outside escapes only if
/// `allow_upper`.
fn is_escaped(part: &str, allow_upper: bool) -> bool {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |j: usize| {
                bytes
                    .get(j)
                    .is_some_and(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c))
            };
            if !(hex(i + 1) && hex(i + 2)) {
                return false;
            }
            i += 3;
        } else if is_plain(b) && (allow_upper || !b.is_ascii_uppercase()) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// The string `part` (an output of [`escape_part`]) was escaped from; `None` if the
/// bytes are not UTF-8.
fn unescape(part: &str) -> Option<String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(schema: &str, table: &str) -> String {
        table_file_name(&TableName::new(schema, table))
    }

    #[test]
    fn lower_case_names_keep_their_readable_form() {
        assert_eq!(name("public", "orders"), "public.orders.json");
        assert_eq!(name("my schema", "a.b/c%"), "my%20schema.a%2Eb%2Fc%25.json");
        assert_eq!(name("é", "x"), "%C3%A9.x.json");
    }

    #[test]
    fn mixed_case_names_are_hashed_after_a_readable_prefix() {
        let upper = name("public", "Orders");
        assert!(upper.starts_with("public.Orders~"), "{upper}");
        assert_eq!(upper.len(), "public.Orders~".len() + 32 + ".json".len());
        // Stable across versions: the SHA-256 of `public.Orders`.
        assert_eq!(upper, "public.Orders~43fd82f7e8eaeebc678a1f440d9ee3fd.json");
        assert_ne!(upper, name("public", "ORDERS"));
    }

    #[test]
    fn long_names_are_cut_between_escapes() {
        let long = "é".repeat(60);
        let n = name(&long, &long);
        assert!(n.len() <= MAX_NAME, "{n}");
        let prefix = n.split('~').next().unwrap_or_default();
        assert!(
            prefix.len() <= MAX_PREFIX && prefix.len().is_multiple_of(3),
            "{prefix}"
        );
        assert!(is_data_file_name(&n, FileLayout::PerTable));
    }

    #[test]
    fn only_names_pgcdc_writes_are_data_file_names() {
        for ok in [
            "public.orders.json",
            "my%20schema.a%2Eb%2Fc%25.json",
            "public.Orders~43fd82f7e8eaeebc678a1f440d9ee3fd.json",
            "%C3%A9%C3%A9~0123456789abcdef0123456789abcdef.json",
        ] {
            assert!(is_data_file_name(ok, FileLayout::PerTable), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x.json",
            "/tmp/x.json",
            "a/b.json",
            "a.b\0.json",
            "notes.txt",
            "tsconfig.json",
            "a.b.c.json",
            "public.Orders.json",
            "public.orders%2e.json",
            "public.orders%2.json",
            "public.Orders~43FD82F7E8EAEEBC678A1F440D9EE3FD.json",
            "public.Orders~43fd82.json",
            "a.b.c~0123456789abcdef0123456789abcdef.json",
            MULTIPLEXED_FILE,
            super::super::state::CHECKPOINT_FILE,
        ] {
            assert!(!is_data_file_name(bad, FileLayout::PerTable), "{bad:?}");
        }
        assert!(is_data_file_name(MULTIPLEXED_FILE, FileLayout::Multiplexed));
        assert!(!is_data_file_name(
            "public.orders.json",
            FileLayout::Multiplexed
        ));
    }

    #[test]
    fn legacy_mixed_case_names_are_recognized_with_their_table() {
        assert_eq!(
            legacy_table("My%20Schema.Orders.json"),
            Some(TableName::new("My Schema", "Orders"))
        );
        assert_eq!(legacy_table("public.orders.json"), None);
        assert_eq!(legacy_table("../Orders.json"), None);
        assert_eq!(legacy_table("Public.%FF.json"), None);
    }
}
