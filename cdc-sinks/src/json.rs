//! Low-level JSON writing into a reused `Vec<u8>`: strings, integers, floats, and inlining
//! of JSON text. No intermediate `serde_json::Value`; one pass over the input.

use cdc_core::Text;

/// How a byte must be escaped inside a JSON string: 0 = copied as is, `u` = `\u00XX`,
/// anything else = a backslash followed by that byte.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = b'u';
        i += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0A] = b'n';
    table[0x0C] = b'f';
    table[0x0D] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal (quotes included). Control characters, `"` and `\`
/// are escaped; everything else, including non-ASCII UTF-8, is copied unchanged.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    write_str_bytes(out, s.as_bytes());
}

/// [`write_str`] for a [`Text`], whose UTF-8 was checked when it was made, so it is not
/// validated again.
pub(crate) fn write_text(out: &mut Vec<u8>, text: &Text) {
    write_str_bytes(out, text.as_bytes());
}

/// Appends `bytes` as a JSON string literal if they are valid UTF-8 (true); appends
/// nothing if they are not (false). The ASCII prefix, which is most text, is found
/// sixteen bytes at a time and needs no further check; the standard library validates
/// the rest from the first other byte on (an ASCII prefix cannot split a character).
pub(crate) fn write_utf8(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    // Blocks of ASCII that need no escaping: most text is all such blocks but a short
    // tail. One scan both validates and clears them for copying.
    let mut clean = 0;
    while let Some(block) = block_at::<16>(bytes, clean)
        && is_clean_ascii(block)
    {
        clean += 16;
    }
    if bytes.len() - clean < 16 {
        // Less than a block left: the last sixteen bytes (overlapping some found clean)
        // settle it at once, or, in a shorter string, each byte.
        match bytes
            .len()
            .checked_sub(16)
            .and_then(|at| block_at::<16>(bytes, at))
        {
            Some(last) if is_clean_ascii(last) => clean = bytes.len(),
            Some(_) => {}
            None => {
                while bytes
                    .get(clean)
                    .is_some_and(|&b| ESCAPE[b as usize] == 0 && b.is_ascii())
                {
                    clean += 1;
                }
            }
        }
    }
    let rest = bytes.get(clean..).unwrap_or_default();
    if !rest.is_empty() && std::str::from_utf8(rest).is_err() {
        return false;
    }
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    out.extend_from_slice(bytes.get(..clean).unwrap_or_default());
    if !rest.is_empty() {
        write_escaped(out, rest);
    }
    out.push(b'"');
    true
}

/// Whether the `N` bytes are ASCII and none needs escaping (as [`is_clean`], one more
/// vector compare).
fn is_clean_ascii<const N: usize>(block: &[u8; N]) -> bool {
    let mut escape = false;
    for &b in block {
        escape |= (b < 0x20) | (b == b'"') | (b == b'\\') | (b >= 0x80);
    }
    !escape
}

/// Escaping looks only at ASCII bytes and copies the rest unchanged, so valid UTF-8 in
/// gives valid UTF-8 out; callers pass only bytes known to be UTF-8.
fn write_str_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    write_escaped(out, bytes);
    out.push(b'"');
}

/// Appends `bytes` escaped for a JSON string, without the quotes.
fn write_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut start = 0;
    let mut i = 0;
    let mut tail_tried = false;
    while i < bytes.len() {
        // Sixteen, then eight bytes at a time while none needs escaping (most text has
        // none): a row's short values are mostly scanned here.
        if let Some(block) = block_at::<16>(bytes, i)
            && is_clean(block)
        {
            i += 16;
            continue;
        }
        if let Some(word) = block_at::<8>(bytes, i)
            && is_clean(word)
        {
            i += 8;
            continue;
        }
        // Fewer than eight left: the last eight bytes, overlapping some already found
        // clean, settle the rest at once (tried once: if they hold a byte to escape, the
        // rest goes byte by byte).
        if !tail_tried
            && bytes.len() - i < 8
            && let Some(tail) = bytes.len().checked_sub(8)
            && tail >= start
            && let Some(word) = block_at::<8>(bytes, tail)
            && {
                tail_tried = true;
                is_clean(word)
            }
        {
            break;
        }
        let Some(&b) = bytes.get(i) else {
            break;
        };
        let esc = ESCAPE[b as usize];
        if esc != 0 {
            out.extend_from_slice(bytes.get(start..i).unwrap_or_default());
            if esc == b'u' {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xF) as usize]);
            } else {
                out.push(b'\\');
                out.push(esc);
            }
            start = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(bytes.get(start..).unwrap_or_default());
}

/// Whether none of the `N` bytes needs escaping (a control character, a quote or a
/// backslash). Written byte by byte without early exit so that the compiler turns it into
/// a few vector compares (SSE2 on x86-64).
fn is_clean<const N: usize>(block: &[u8; N]) -> bool {
    let mut escape = false;
    for &b in block {
        escape |= (b < 0x20) | (b == b'"') | (b == b'\\');
    }
    !escape
}

/// The `N` bytes of `bytes` from `at`, if there are `N`.
fn block_at<const N: usize>(bytes: &[u8], at: usize) -> Option<&[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Appends an integer.
pub(crate) fn write_int<I: itoa::Integer>(out: &mut Vec<u8>, v: I) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Appends a finite `f64` in its shortest round-trip form (`1.5`, `1e-7`, `-0.0`).
/// The caller guarantees finiteness.
pub(crate) fn write_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
}

/// Appends a finite `f32` in its shortest round-trip form. The caller guarantees finiteness.
pub(crate) fn write_f32(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
}

/// Appends `n` as exactly `width` decimal digits, zero-padded (`n < 10^width`).
pub(crate) fn write_padded(out: &mut Vec<u8>, mut n: u64, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// Why JSON text could not be inlined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InlineJsonError {
    /// Empty or only white space.
    Empty,
    /// A string is not closed or a bracket is not balanced.
    Unbalanced,
    /// More than one top-level value.
    TrailingData,
}

/// Appends the JSON document `text` without its insignificant white space, so that a
/// `json` value spanning several lines cannot break line framing. Key order, duplicate
/// keys and number spellings are kept exactly.
///
/// The text comes from Postgres, which validated it; this only checks the structure the
/// framing depends on (strings closed, brackets balanced, one top-level value). On error
/// `out` is left as it was.
pub(crate) fn write_inline_json(out: &mut Vec<u8>, text: &[u8]) -> Result<(), InlineJsonError> {
    let start = out.len();
    out.reserve(text.len());
    let mut depth: usize = 0;
    let mut in_string = false;
    let mut escaped = false;
    let mut values_done = 0usize;
    let mut in_scalar = false;
    let fail = |out: &mut Vec<u8>, e| {
        out.truncate(start);
        Err(e)
    };
    for &b in text {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                if depth == 0 {
                    values_done += 1;
                }
            }
            continue;
        }
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {
                if in_scalar {
                    in_scalar = false;
                    if depth == 0 {
                        values_done += 1;
                    }
                }
                continue;
            }
            _ => {}
        }
        if depth == 0 && values_done > 0 && !in_scalar {
            return fail(out, InlineJsonError::TrailingData);
        }
        match b {
            b'"' => {
                if in_scalar {
                    return fail(out, InlineJsonError::TrailingData);
                }
                in_string = true;
            }
            b'{' | b'[' => {
                if in_scalar {
                    return fail(out, InlineJsonError::TrailingData);
                }
                depth += 1;
            }
            b'}' | b']' => {
                if depth == 0 {
                    return fail(out, InlineJsonError::Unbalanced);
                }
                in_scalar = false;
                depth -= 1;
                if depth == 0 {
                    values_done += 1;
                }
            }
            b',' | b':' => in_scalar = false,
            _ => {
                if depth == 0 {
                    in_scalar = true;
                }
            }
        }
        out.push(b);
    }
    if in_scalar {
        values_done += 1;
    }
    if in_string || depth != 0 {
        return fail(out, InlineJsonError::Unbalanced);
    }
    if values_done == 0 {
        return fail(out, InlineJsonError::Empty);
    }
    if values_done > 1 {
        return fail(out, InlineJsonError::TrailingData);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    fn inline(v: &str) -> Result<String, InlineJsonError> {
        let mut out = b"x".to_vec();
        write_inline_json(&mut out, v.as_bytes())
            .map(|()| String::from_utf8(out[1..].to_vec()).unwrap())
    }

    #[test]
    fn escapes_quotes_backslashes_and_controls() {
        assert_eq!(s("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            s("\n\t\r\u{8}\u{c}\u{1}\u{1f}"),
            r#""\n\t\r\b\f\u0001\u001f""#
        );
        assert_eq!(s("héllo ☃ \u{2028}"), "\"héllo ☃ \u{2028}\"");
    }

    #[test]
    fn escapes_at_every_place_the_word_scans_can_meet() {
        // Every length up to three sixteen-byte blocks, with one character to escape at
        // each position (and none): the block, word and overlapping-tail scans all meet
        // it or miss it. serde_json writes the expected text.
        for len in 0..48 {
            for at in 0..=len {
                for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', 'é'] {
                    let mut text: String = "abcdefgh".chars().cycle().take(len).collect();
                    if at < len {
                        text.replace_range(at..=at, &special.to_string());
                    }
                    assert_eq!(s(&text), serde_json::to_string(&text).unwrap(), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn pads_digits() {
        let mut out = Vec::new();
        write_padded(&mut out, 42, 6);
        assert_eq!(out, b"000042");
    }

    #[test]
    fn inlines_json_without_white_space_keeping_order() {
        assert_eq!(
            inline("{\"b\": 1,\n \"a\" : [1, 2, \"x y\"], \"b\": null}").unwrap(),
            r#"{"b":1,"a":[1,2,"x y"],"b":null}"#
        );
        assert_eq!(inline("  12.50e3 ").unwrap(), "12.50e3");
        assert_eq!(inline("\"a\\\" b\"").unwrap(), r#""a\" b""#);
        assert_eq!(inline("true").unwrap(), "true");
    }

    #[test]
    fn rejects_broken_structure_and_restores_buffer() {
        assert_eq!(inline(""), Err(InlineJsonError::Empty));
        assert_eq!(inline("{\"a\":1"), Err(InlineJsonError::Unbalanced));
        assert_eq!(inline("\"abc"), Err(InlineJsonError::Unbalanced));
        assert_eq!(inline("]"), Err(InlineJsonError::Unbalanced));
        assert_eq!(inline("1 2"), Err(InlineJsonError::TrailingData));
        assert_eq!(inline("{} {}"), Err(InlineJsonError::TrailingData));
        let mut out = b"keep".to_vec();
        assert!(write_inline_json(&mut out, b"[1,").is_err());
        assert_eq!(out, b"keep");
    }

    proptest! {
        #[test]
        fn bytes_are_written_when_and_as_the_standard_library_validates_them(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
            text in "\\PC{0,40}",
            ascii in "[\\x00-\\x7f]{0,70}",
            at in 0usize..40,
        ) {
            // Arbitrary bytes (mostly invalid) and valid text with a cut or a stray byte.
            let mut mixed = text.clone().into_bytes();
            let at = at.min(mixed.len());
            let mut cut = mixed.clone();
            cut.truncate(at);
            mixed.insert(at, 0xff);
            let controls = ascii.into_bytes();
            for case in [bytes, text.into_bytes(), cut, mixed, controls] {
                let mut out = b"x".to_vec();
                let written = write_utf8(&mut out, &case);
                match std::str::from_utf8(&case) {
                    Ok(s) => {
                        prop_assert!(written);
                        let mut expected = b"x".to_vec();
                        write_str(&mut expected, s);
                        prop_assert_eq!(out, expected);
                    }
                    Err(_) => {
                        prop_assert!(!written);
                        prop_assert_eq!(out, b"x".to_vec());
                    }
                }
            }
        }

        #[test]
        fn strings_round_trip_through_serde_json(v in "\\PC*|[\\x00-\\x7f]*") {
            let text = s(&v);
            prop_assert_eq!(serde_json::from_str::<String>(&text).unwrap(), v);
        }

        #[test]
        fn the_block_test_agrees_with_the_table(
            bytes in proptest::array::uniform8(prop_oneof![any::<u8>(), Just(b'"'), Just(b'\\'), 0u8..0x21, 0x7fu8..0x82])
        ) {
            let table = bytes.iter().any(|&b| ESCAPE[b as usize] != 0);
            prop_assert_eq!(!is_clean(&bytes), table);
        }

        #[test]
        fn inlined_json_parses_to_the_same_value(v in proptest::collection::vec(("[a-z\\n \"]{0,4}", any::<i32>()), 0..5)) {
            let map: serde_json::Map<String, serde_json::Value> =
                v.into_iter().map(|(k, n)| (k, serde_json::Value::from(n))).collect();
            let pretty = serde_json::to_string_pretty(&serde_json::Value::Object(map.clone())).unwrap();
            let compact = inline(&pretty).unwrap();
            prop_assert!(!compact.contains('\n'));
            prop_assert_eq!(serde_json::from_str::<serde_json::Value>(&compact).unwrap(), serde_json::Value::Object(map));
        }
    }
}
