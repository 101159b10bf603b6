//! WAL positions just past a page header. `pg_current_wal_insert_lsn()` reports the next
//! insert position, which — when the last record ended exactly at a page's start, e.g.
//! after a WAL switch — lies past the new page's header, where no record ends. The
//! stream (and a walsender's keepalive) reports where records end, so on an idle server it
//! never reaches such a position. Taken back to the page's start, it means the same (no
//! record ends inside a header: a record's tail continued onto a page is at least 8 bytes
//! long, a whole record at least 24) and is reached.

use cdc_core::Lsn;

/// The size of a WAL page's header (64-bit builds: 8-byte alignment), and of the longer
/// one on the first page of a segment.
const SHORT_PAGE_HEADER: u64 = 24;
const LONG_PAGE_HEADER: u64 = 40;

/// The server's WAL page and segment sizes, as far as known (`wal_block_size`,
/// `wal_segment_size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WalPages {
    page: Option<u64>,
    segment: Option<u64>,
}

impl WalPages {
    /// The sizes as `SHOW` printed them (unknown when missing or not understood).
    pub(crate) fn from_shown(page: Option<&str>, segment: Option<&str>) -> Self {
        WalPages {
            page: page.and_then(parse_size),
            segment: segment.and_then(parse_size),
        }
    }

    /// `position` taken back to its page's start when it lies just past the page's
    /// header (see the module's doc); unchanged when the sizes are not known.
    pub(crate) fn record_end(self, position: Lsn) -> Lsn {
        let (Some(page), Some(segment)) = (self.page, self.segment) else {
            return position;
        };
        if !page.is_power_of_two() || !segment.is_power_of_two() || segment < page {
            return position;
        }
        let header = if position.0 % segment == LONG_PAGE_HEADER {
            LONG_PAGE_HEADER
        } else if position.0 % page == SHORT_PAGE_HEADER
            && position.0 % segment != SHORT_PAGE_HEADER
        {
            SHORT_PAGE_HEADER
        } else {
            return position;
        };
        Lsn(position.0 - header)
    }
}

/// A size as `SHOW` prints it (`8192`, `16MB`, `1GB`, `64kB`), in bytes.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "kB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_just_past_a_page_header_is_the_page_start() {
        let sizes = |page: Option<&str>, segment: Option<&str>| WalPages::from_shown(page, segment);
        let usual = sizes(Some("8192"), Some("16MB"));
        let end = |lsn: u64| usual.record_end(Lsn(lsn));
        // Past the short header of a page, and past the long one of a segment's first.
        assert_eq!(end(0x10C6_4018), Lsn(0x10C6_4000));
        assert_eq!(end(0x1100_0028), Lsn(0x1100_0000));
        // A record's end: at a page start, a continued record's tail (page + 32 or + 40
        // on a page with the short header), anywhere else.
        assert_eq!(end(0x10C6_4000), Lsn(0x10C6_4000));
        assert_eq!(end(0x10C6_4020), Lsn(0x10C6_4020));
        assert_eq!(end(0x10C6_4028), Lsn(0x10C6_4028));
        assert_eq!(end(0x10C6_3FC8), Lsn(0x10C6_3FC8));
        assert_eq!(end(0x1100_0030), Lsn(0x1100_0030));
        // Other sizes: their own boundaries only.
        let large = sizes(Some("16384"), Some("16MB"));
        assert_eq!(large.record_end(Lsn(0x2018)), Lsn(0x2018));
        assert_eq!(large.record_end(Lsn(0x4018)), Lsn(0x4000));
        let small = sizes(Some("8192"), Some("1MB"));
        assert_eq!(small.record_end(Lsn(0x0100_0028)), Lsn(0x0100_0000));
        // Unknown or impossible sizes: unchanged.
        for unusable in [
            sizes(None, Some("16MB")),
            sizes(Some("8192"), None),
            sizes(Some("0"), Some("16MB")),
            sizes(Some("3000"), Some("16MB")),
            sizes(Some("x"), Some("16MB")),
        ] {
            assert_eq!(
                unusable.record_end(Lsn(0x4018)),
                Lsn(0x4018),
                "{unusable:?}"
            );
        }
    }

    #[test]
    fn sizes_parse_as_show_prints_them() {
        assert_eq!(parse_size("8192"), Some(8192));
        assert_eq!(parse_size("16MB"), Some(16 << 20));
        assert_eq!(parse_size(" 1GB "), Some(1 << 30));
        assert_eq!(parse_size("64kB"), Some(64 << 10));
        assert_eq!(parse_size("16 MB"), Some(16 << 20));
        assert_eq!(parse_size("16TB"), None);
        assert_eq!(parse_size("MB"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999GB"), None);
    }
}
