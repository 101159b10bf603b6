//! `hstore` values (an extension type: recognised by its name) as Debezium writes them:
//! the pairs parsed from the type's text output, as a JSON object.

use super::HstoreMode;
use crate::json::write_str;

/// Whether a type named `name` (qualified, e.g. `public.hstore`) is the hstore extension's.
pub(super) fn is_hstore(name: Option<&str>) -> bool {
    name.is_some_and(|n| n == "hstore" || n.ends_with(".hstore"))
}

/// The pairs of hstore's text output (`"a"=>"1", "b"=>NULL`), in its order; `None` when
/// the text is not in that form.
pub(super) fn parse(text: &str) -> Option<Vec<(String, Option<String>)>> {
    let mut pairs = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, after) = quoted(rest)?;
        let after = after.trim_start().strip_prefix("=>")?.trim_start();
        let (value, after) = match after.strip_prefix("NULL") {
            Some(after) => (None, after),
            None => {
                let (value, after) = quoted(after)?;
                (Some(value), after)
            }
        };
        pairs.push((key, value));
        rest = after.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
            if rest.is_empty() {
                return None;
            }
        } else if !rest.is_empty() {
            return None;
        }
    }
    Some(pairs)
}

/// A double-quoted string with `\`-escapes, and what follows it.
fn quoted(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => out.push(chars.next()?.1),
            c => out.push(c),
        }
    }
    None
}

/// The pairs as a JSON object (`Map`), or as a string holding that object (`Json`).
pub(super) fn write(out: &mut Vec<u8>, pairs: &[(String, Option<String>)], mode: HstoreMode) {
    let mut object = Vec::with_capacity(pairs.len() * 16 + 2);
    object.push(b'{');
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            object.push(b',');
        }
        write_str(&mut object, key);
        object.push(b':');
        match value {
            Some(value) => write_str(&mut object, value),
            None => object.extend_from_slice(b"null"),
        }
    }
    object.push(b'}');
    match mode {
        HstoreMode::Map => out.extend_from_slice(&object),
        // The object is UTF-8: it came from `&str`s and JSON punctuation.
        HstoreMode::Json => write_str(out, &String::from_utf8_lossy(&object)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_hstore_prints() {
        assert_eq!(parse(""), Some(vec![]));
        assert_eq!(
            parse(r#""a"=>"1", "b"=>NULL, "q\"k"=>"v\\w""#),
            Some(vec![
                ("a".into(), Some("1".into())),
                ("b".into(), None),
                ("q\"k".into(), Some("v\\w".into())),
            ])
        );
        assert_eq!(parse(r#""a"=>"1","#), None);
        assert_eq!(parse(r#""a"=>1"#), None);
        assert_eq!(parse(r#""a"="#), None);
        assert_eq!(parse(r#""a"=>"1" "b"=>"2""#), None);
    }

    #[test]
    fn writes_a_map_or_a_json_string() {
        let pairs = parse(r#""a"=>"1", "b"=>NULL"#).unwrap();
        let mut out = Vec::new();
        write(&mut out, &pairs, HstoreMode::Map);
        assert_eq!(out, br#"{"a":"1","b":null}"#);
        out.clear();
        write(&mut out, &pairs, HstoreMode::Json);
        assert_eq!(out, br#""{\"a\":\"1\",\"b\":null}""#);
    }
}
