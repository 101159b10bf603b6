//! `Text`: a cheaply clonable UTF-8 string backed by `Bytes`.

use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

/// An immutable UTF-8 string that shares its storage with the buffer it was decoded from.
///
/// Decoders slice values out of the received message without copying; cloning is a
/// reference-count increment. The UTF-8 invariant is checked at construction.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text(Bytes);

impl Text {
    /// Wraps `bytes` after checking that they are valid UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<Self, std::str::Utf8Error> {
        std::str::from_utf8(&bytes)?;
        Ok(Text(bytes))
    }

    /// A `Text` from a static string, without copying.
    pub const fn from_static(s: &'static str) -> Self {
        Text(Bytes::from_static(s.as_bytes()))
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        // SAFETY-free: every constructor checked the UTF-8 invariant; fall back to "" if a
        // future constructor forgets, rather than panic.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The underlying bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// The underlying bytes, consuming `self`.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Text {
    fn from(value: String) -> Self {
        Text(Bytes::from(value))
    }
}

impl From<&str> for Text {
    fn from(value: &str) -> Self {
        Text(Bytes::copy_from_slice(value.as_bytes()))
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Text::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_invalid_utf8() {
        assert!(Text::from_utf8(Bytes::from_static(b"\xff\xfe")).is_err());
        assert_eq!(
            Text::from_utf8(Bytes::from_static(b"h\xc3\xa9"))
                .unwrap()
                .as_str(),
            "hé"
        );
    }

    #[test]
    fn shares_storage_with_source() {
        let buf = Bytes::from_static(b"hello world");
        let text = Text::from_utf8(buf.slice(6..)).unwrap();
        assert_eq!(text.as_bytes().as_ptr(), buf[6..].as_ptr());
    }
}
