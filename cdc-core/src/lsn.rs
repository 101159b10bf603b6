//! Log sequence numbers and event positions.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PostgreSQL write-ahead log position (`pg_lsn`).
///
/// Displays and parses as Postgres does: two hexadecimal halves separated by a slash,
/// upper case, without leading zeros (`16/B374D848`). Serializes as that string.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The invalid LSN `0/0`, which Postgres uses for "none".
    pub const ZERO: Lsn = Lsn(0);
    /// The largest LSN, `FFFFFFFF/FFFFFFFF`.
    pub const MAX: Lsn = Lsn(u64::MAX);

    /// The raw 64-bit value.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whether this is the invalid LSN `0/0`.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Bytes of WAL from `earlier` to `self`, or 0 if `earlier` is not earlier.
    pub const fn bytes_since(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl From<u64> for Lsn {
    fn from(value: u64) -> Self {
        Lsn(value)
    }
}

impl From<Lsn> for u64 {
    fn from(value: Lsn) -> Self {
        value.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

/// Why a string is not an LSN.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid LSN {input:?}: expected two hexadecimal numbers of at most 8 digits separated by '/', e.g. 16/B374D848"
)]
pub struct ParseLsnError {
    /// The rejected input.
    pub input: String,
}

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError {
            input: s.to_owned(),
        };
        let (hi, lo) = s.split_once('/').ok_or_else(err)?;
        let half = |part: &str| -> Result<u64, ParseLsnError> {
            if part.is_empty() || part.len() > 8 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            u64::from_str_radix(part, 16).map_err(|_| err())
        };
        Ok(Lsn((half(hi)? << 32) | half(lo)?))
    }
}

impl Serialize for Lsn {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Lsn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The position of one delivered event: the LSN of its transaction's commit plus its
/// ordinal inside that transaction.
///
/// An LSN alone is not a resume position — several changes can share one LSN (a multi-row
/// insert, COPY) — so positions are totally ordered first by `commit_lsn`, then by
/// `ordinal`. Every event ever delivered from one slot has a distinct position, which makes
/// it the deduplication key on replay: after a restart, events at or before the resume
/// token's position are skipped.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Position {
    /// The LSN of the transaction's commit record (for snapshot rows: a point before the
    /// slot's consistent point, chosen by the source).
    pub commit_lsn: Lsn,
    /// The event's index within its transaction, starting at 0 for the Begin event.
    pub ordinal: u64,
}

impl Position {
    /// A position from its parts.
    pub const fn new(commit_lsn: Lsn, ordinal: u64) -> Self {
        Position {
            commit_lsn,
            ordinal,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.commit_lsn, self.ordinal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn displays_like_postgres() {
        assert_eq!(Lsn(0).to_string(), "0/0");
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn::MAX.to_string(), "FFFFFFFF/FFFFFFFF");
    }

    #[test]
    fn parses_lower_and_upper_case_and_leading_zeros() {
        assert_eq!("16/b374d848".parse::<Lsn>(), Ok(Lsn(0x16_B374_D848)));
        assert_eq!("00000016/0000000A".parse::<Lsn>(), Ok(Lsn(0x16_0000_000A)));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "/",
            "1/",
            "/1",
            "1",
            "1/2/3",
            "g/0",
            "123456789/0",
            "+1/0",
            " 1/0",
            "1/-0",
        ] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn serde_as_string() {
        let json = serde_json::to_string(&Lsn(0x1_0000_0002)).unwrap();
        assert_eq!(json, "\"1/2\"");
        assert_eq!(
            serde_json::from_str::<Lsn>(&json).unwrap(),
            Lsn(0x1_0000_0002)
        );
        assert!(serde_json::from_str::<Lsn>("\"nope\"").is_err());
    }

    #[test]
    fn position_orders_by_commit_then_ordinal() {
        let a = Position::new(Lsn(10), 5);
        let b = Position::new(Lsn(10), 6);
        let c = Position::new(Lsn(11), 0);
        assert!(a < b && b < c && a < c);
    }

    proptest! {
        #[test]
        fn lsn_display_parse_round_trip(raw in any::<u64>()) {
            let lsn = Lsn(raw);
            prop_assert_eq!(lsn.to_string().parse::<Lsn>(), Ok(lsn));
        }

        #[test]
        fn lsn_order_matches_u64(a in any::<u64>(), b in any::<u64>()) {
            prop_assert_eq!(Lsn(a).cmp(&Lsn(b)), a.cmp(&b));
        }

        #[test]
        fn position_order_is_lexicographic(a in any::<(u64, u64)>(), b in any::<(u64, u64)>()) {
            let pa = Position::new(Lsn(a.0), a.1);
            let pb = Position::new(Lsn(b.0), b.1);
            prop_assert_eq!(pa.cmp(&pb), a.cmp(&b));
        }

        #[test]
        fn position_serde_round_trip(a in any::<(u64, u64)>()) {
            let p = Position::new(Lsn(a.0), a.1);
            let json = serde_json::to_string(&p).unwrap();
            prop_assert_eq!(serde_json::from_str::<Position>(&json).unwrap(), p);
        }
    }
}
