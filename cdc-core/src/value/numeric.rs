//! `numeric`: exact decimal values of any size, plus NaN and ±Infinity.

use std::fmt;
use std::str::FromStr;

use super::Text;

/// A Postgres `numeric` value, kept exactly.
///
/// Finite values are held as their canonical decimal text (`-12.3400`: optional minus,
/// digits, optional fraction; no exponent, no leading `+`) — the form Postgres prints — so
/// values far beyond `rust_decimal`'s 28 digits keep every digit and the scale (trailing
/// zeros) is preserved. Use [`Numeric::to_decimal`] when a fixed-precision value is wanted;
/// it returns `None` rather than rounding.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Numeric {
    /// A finite value; see [`Numeric::finite`] for the invariant on the text.
    Finite(Text),
    /// `NaN`.
    NaN,
    /// `Infinity` (Postgres 14+).
    PosInfinity,
    /// `-Infinity` (Postgres 14+).
    NegInfinity,
}

/// Why a string is not a canonical `numeric`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid numeric {input:?}: expected [-]digits[.digits], NaN, Infinity or -Infinity")]
pub struct ParseNumericError {
    /// The rejected input.
    pub input: String,
}

impl Numeric {
    /// A finite numeric from canonical decimal text (`[-]digits[.digits]`), as Postgres's
    /// text output produces it.
    pub fn finite(text: Text) -> Result<Self, ParseNumericError> {
        if is_canonical_decimal(text.as_str()) {
            Ok(Numeric::Finite(text))
        } else {
            Err(ParseNumericError {
                input: text.as_str().to_owned(),
            })
        }
    }

    /// Parses Postgres's text output of a numeric: canonical decimal text, `NaN`,
    /// `Infinity` or `-Infinity`.
    pub fn parse_text(text: Text) -> Result<Self, ParseNumericError> {
        match text.as_str() {
            "NaN" => Ok(Numeric::NaN),
            "Infinity" => Ok(Numeric::PosInfinity),
            "-Infinity" => Ok(Numeric::NegInfinity),
            _ => Numeric::finite(text),
        }
    }

    /// Whether the value is finite.
    pub fn is_finite(&self) -> bool {
        matches!(self, Numeric::Finite(_))
    }

    /// The value as a `rust_decimal::Decimal`, or `None` when it is not finite or does not
    /// fit exactly (more than 28 fractional digits or a mantissa beyond 96 bits).
    pub fn to_decimal(&self) -> Option<rust_decimal::Decimal> {
        match self {
            Numeric::Finite(text) => rust_decimal::Decimal::from_str_exact(text.as_str()).ok(),
            _ => None,
        }
    }

    /// Number of digits after the decimal point (the display scale) of a finite value.
    pub fn scale(&self) -> Option<usize> {
        match self {
            Numeric::Finite(text) => Some(text.split_once('.').map_or(0, |(_, frac)| frac.len())),
            _ => None,
        }
    }
}

fn is_canonical_decimal(s: &str) -> bool {
    let unsigned = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match unsigned.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (unsigned, None),
    };
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
}

impl FromStr for Numeric {
    type Err = ParseNumericError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Numeric::parse_text(Text::from(s))
    }
}

impl From<rust_decimal::Decimal> for Numeric {
    fn from(value: rust_decimal::Decimal) -> Self {
        Numeric::Finite(Text::from(value.to_string()))
    }
}

impl fmt::Display for Numeric {
    /// Postgres's text output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Numeric::Finite(text) => f.write_str(text),
            Numeric::NaN => f.write_str("NaN"),
            Numeric::PosInfinity => f.write_str("Infinity"),
            Numeric::NegInfinity => f.write_str("-Infinity"),
        }
    }
}

impl fmt::Debug for Numeric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Numeric({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_digits_beyond_rust_decimal() {
        let digits = "9".repeat(1000);
        let n: Numeric = format!("-{digits}.5000").parse().unwrap();
        assert_eq!(n.to_string(), format!("-{digits}.5000"));
        assert_eq!(n.to_decimal(), None);
        assert_eq!(n.scale(), Some(4));
    }

    #[test]
    fn special_values() {
        for s in ["NaN", "Infinity", "-Infinity"] {
            let n: Numeric = s.parse().unwrap();
            assert!(!n.is_finite());
            assert_eq!(n.to_string(), s);
        }
    }

    #[test]
    fn rejects_non_canonical() {
        for bad in ["", "-", "1.", ".5", "+1", "1e5", "1,5", "nan", " 1"] {
            assert!(bad.parse::<Numeric>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn converts_to_decimal_when_exact() {
        let n: Numeric = "12.340".parse().unwrap();
        assert_eq!(n.to_decimal().unwrap().to_string(), "12.340");
    }
}
