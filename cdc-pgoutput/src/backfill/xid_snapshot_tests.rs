use proptest::prelude::*;

use super::*;

const EPOCH: u64 = 1 << 32;

fn snap(text: &str) -> XidSnapshot {
    XidSnapshot::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn parses_what_postgres_prints() {
    let s = snap("10:20:10,14,15");
    assert_eq!((s.xmin(), s.xmax()), (10, 20));
    assert_eq!(s.in_progress(), &[10, 14, 15]);
    assert_eq!(s.to_text(), "10:20:10,14,15");
    assert_eq!(s.to_string(), "10:20:10,14,15");

    let idle = snap("748:748:");
    assert_eq!((idle.xmin(), idle.xmax()), (748, 748));
    assert!(idle.in_progress().is_empty());
    assert_eq!(idle.to_text(), "748:748:");

    let big = snap("18446744073709551614:18446744073709551615:18446744073709551614");
    assert_eq!(big.xmax(), u64::MAX);
    assert_eq!(big.in_progress(), &[u64::MAX - 1]);
}

#[test]
fn leading_zeros_are_read_as_postgres_reads_them() {
    assert_eq!(snap("010:020:015").to_text(), "10:20:15");
}

#[test]
fn rejects_malformed_text() {
    for bad in [
        "",
        ":",
        "::",
        "10:20",
        "10:20:30:",
        "10:20:14,",
        "10:20:,14",
        "10:20:14,,15",
        "10::",
        ":20:",
        "+10:20:",
        "-1:20:",
        " 10:20:",
        "10 :20:",
        "10:20: 14",
        "10:20:14 ",
        "a:b:",
        "10:20:1a",
        "1e3:2000:",
        "０:20:",
        "10;20;",
        "18446744073709551616:18446744073709551617:",
        "10:20:99999999999999999999999",
    ] {
        match XidSnapshot::parse(bad) {
            Err(XidSnapshotError::Syntax { input, problem }) => {
                assert_eq!(input, bad);
                assert!(!problem.is_empty());
            }
            other => panic!("{bad:?}: expected a syntax error, got {other:?}"),
        }
    }
}

#[test]
fn rejects_inconsistent_snapshots() {
    use XidSnapshotError::*;
    let cases: &[(&str, XidSnapshotError)] = &[
        ("20:10:", XminAfterXmax { xmin: 20, xmax: 10 }),
        (
            "0:10:",
            InvalidXid {
                field: "xmin",
                value: 0,
            },
        ),
        (
            "10:4294967296:",
            InvalidXid {
                field: "xmax",
                value: EPOCH,
            },
        ),
        (
            "4294967296:4294967300:",
            InvalidXid {
                field: "xmin",
                value: EPOCH,
            },
        ),
        (
            "10:20:9",
            InProgressOutOfRange {
                xid: 9,
                xmin: 10,
                xmax: 20,
            },
        ),
        (
            "10:20:20",
            InProgressOutOfRange {
                xid: 20,
                xmin: 10,
                xmax: 20,
            },
        ),
        (
            "10:10:10",
            InProgressOutOfRange {
                xid: 10,
                xmin: 10,
                xmax: 10,
            },
        ),
        (
            "10:20:15,14",
            InProgressNotAscending {
                previous: 15,
                xid: 14,
            },
        ),
        (
            "10:20:14,14",
            InProgressNotAscending {
                previous: 14,
                xid: 14,
            },
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(XidSnapshot::parse(text).as_ref(), Err(expected), "{text}");
    }
    assert_eq!(
        XidSnapshot::new(10, 20, vec![12, 11]),
        Err(InProgressNotAscending {
            previous: 12,
            xid: 11
        })
    );
    assert_eq!(
        XidSnapshot::new(10, 20, vec![12, 15]).map(|s| s.to_text()),
        Ok("10:20:12,15".to_owned())
    );
}

#[test]
fn errors_say_what_failed() {
    let e = XidSnapshot::parse("10:20:1a").unwrap_err().to_string();
    assert!(
        e.contains("10:20:1a") && e.contains("in-progress id"),
        "{e}"
    );
    let e = XidSnapshot::parse("x:20:").unwrap_err().to_string();
    assert!(e.contains("xmin is not a decimal number"), "{e}");
    let e = XidSnapshot::parse("30:20:").unwrap_err().to_string();
    assert!(e.contains("xmin 30 is after xmax 20"), "{e}");
}

#[test]
fn errors_quote_only_the_start_of_long_input() {
    let long = format!("1:2:{}", "é,".repeat(10_000));
    let Err(XidSnapshotError::Syntax { input, .. }) = XidSnapshot::parse(&long) else {
        panic!("expected a syntax error");
    };
    assert_eq!(input.chars().count(), EXCERPT_CHARS + 1);
    assert!(input.starts_with("1:2:é,") && input.ends_with('…'));
}

#[test]
fn visibility_is_postgres_rule() {
    let s = snap("10:20:12,15");
    for (xid, visible) in [
        (0, true),
        (9, true),
        (10, true), // finished before the snapshot: not listed
        (11, true),
        (12, false), // running
        (13, true),
        (15, false),
        (19, true),
        (20, false), // at xmax: not finished
        (21, false),
        (u64::MAX, false),
    ] {
        assert_eq!(s.is_visible(xid), visible, "{xid}");
    }
}

#[test]
fn widen_in_epoch_zero() {
    let s = snap("700:750:710");
    assert_eq!(s.widen(749), 749);
    assert_eq!(s.widen(3), 3);
    assert_eq!(s.widen(800), 800); // started after the snapshot
    // Special ids stay as they are.
    assert_eq!(s.widen(0), 0);
    assert_eq!(s.widen(1), 1);
    assert_eq!(s.widen(2), 2);
    // Nothing precedes epoch 0: an id more than 2^31 "ahead" of xmax is put in epoch 0
    // rather than underflowing.
    assert_eq!(s.widen(u32::MAX), u64::from(u32::MAX));
    assert_eq!(s.widen(750 + (1 << 31)), 750 + (1 << 31));
}

#[test]
fn widen_across_the_wrap() {
    // xmax just above 2^32 (epoch 1, 32-bit part 5); a transaction whose 32-bit id is just
    // below the wrap belongs to epoch 0.
    let s = XidSnapshot::new(EPOCH - 10, EPOCH + 5, vec![EPOCH - 10, EPOCH + 3]).unwrap();
    assert_eq!(s.widen(u32::MAX), EPOCH - 1);
    assert_eq!(s.widen(u32::MAX - 9), EPOCH - 10);
    assert_eq!(s.widen(3), EPOCH + 3);
    assert_eq!(s.widen(4), EPOCH + 4);
    assert_eq!(s.widen(5), EPOCH + 5);
    assert_eq!(s.widen(6), EPOCH + 6);
    // The window's ends: 2^31 - 1 ahead, 2^31 behind.
    assert_eq!(s.widen(5 + 0x7fff_ffff), EPOCH + 5 + 0x7fff_ffff);
    assert_eq!(s.widen(5 + 0x8000_0000), EPOCH + 5 - 0x8000_0000);

    assert!(!s.is_visible_xid32(u32::MAX - 9)); // running
    assert!(s.is_visible_xid32(u32::MAX - 8)); // finished, below the wrap
    assert!(s.is_visible_xid32(u32::MAX));
    assert!(!s.is_visible_xid32(3)); // running, above the wrap
    assert!(s.is_visible_xid32(4));
    assert!(!s.is_visible_xid32(5)); // xmax
    assert!(!s.is_visible_xid32(6));
    assert!(s.is_visible_xid32(2)); // frozen

    // xmax just above the wrap while every running transaction is below it.
    let s = XidSnapshot::new(EPOCH - 3, EPOCH + 3, vec![EPOCH - 3]).unwrap();
    assert_eq!(s.widen(u32::MAX - 2), EPOCH - 3);
    assert!(!s.is_visible_xid32(u32::MAX - 2));
    assert!(s.is_visible_xid32(u32::MAX - 1));
}

#[test]
fn widen_near_the_top_of_the_range_does_not_overflow() {
    let s = XidSnapshot::new(u64::MAX - 20, u64::MAX - 10, vec![]).unwrap();
    assert_eq!(s.widen(u32::MAX - 15), u64::MAX - 15);
    // 16 ahead of xmax would leave u64: put in xmax's (the last) epoch instead of
    // overflowing.
    let last_epoch = u64::MAX - (EPOCH - 1);
    assert_eq!(s.widen(5), last_epoch + 5);
}

/// A valid snapshot: xmin ≤ xmax, both with a non-zero 32-bit part, and a sorted set of
/// in-progress ids between them. Small ranges as often as huge ones, so visibility is
/// exercised around actual entries.
fn snapshots() -> impl Strategy<Value = XidSnapshot> {
    (
        prop_oneof![
            3u64..1_000,
            EPOCH - 100..EPOCH + 100,
            any::<u64>(),
            u64::MAX - 100..=u64::MAX,
        ],
        prop_oneof![0u64..64, 0u64..100_000, any::<u64>()],
        prop::collection::vec(any::<u64>(), 0..12),
    )
        .prop_map(|(xmax, width, picks)| {
            let xmax = if xmax % EPOCH == 0 {
                xmax.saturating_sub(1).max(1)
            } else {
                xmax
            };
            let mut xmin = xmax.saturating_sub(width).max(1);
            if xmin % EPOCH == 0 {
                xmin += 1;
            }
            let range = xmax - xmin;
            let mut xip: Vec<u64> = if range == 0 {
                Vec::new()
            } else {
                picks.iter().map(|p| xmin + p % range).collect()
            };
            xip.sort_unstable();
            xip.dedup();
            XidSnapshot::new(xmin, xmax, xip).unwrap()
        })
}

/// Postgres's rule written out without the binary search.
fn reference_visible(s: &XidSnapshot, xid: u64) -> bool {
    if xid < s.xmin() {
        return true;
    }
    if xid >= s.xmax() {
        return false;
    }
    !s.in_progress().contains(&xid)
}

proptest! {
    #[test]
    fn text_round_trips(s in snapshots()) {
        prop_assert_eq!(XidSnapshot::parse(&s.to_text()), Ok(s.clone()));
        prop_assert_eq!(XidSnapshot::parse(&s.to_string()), Ok(s));
    }

    #[test]
    fn visibility_matches_reference(
        s in snapshots(),
        offsets in prop::collection::vec(-5i64..5, 1..8),
        any_xid: u64,
    ) {
        let mut probes = vec![any_xid, s.xmin(), s.xmax()];
        for &base in [s.xmin(), s.xmax()].iter().chain(s.in_progress()) {
            for &d in &offsets {
                if let Some(x) = base.checked_add_signed(d) {
                    probes.push(x);
                }
            }
        }
        for x in probes {
            prop_assert_eq!(s.is_visible(x), reference_visible(&s, x), "xid {}", x);
        }
    }

    #[test]
    fn widen_keeps_the_low_bits_and_finds_recent_ids(
        s in snapshots(),
        delta in -(1i64 << 31)..(1i64 << 31),
        xid32: u32,
    ) {
        prop_assert_eq!(s.widen(xid32) % EPOCH, u64::from(xid32));
        // Any full id within 2^31 of xmax (and not special) widens back to itself.
        if let Some(full) = s.xmax().checked_add_signed(delta)
            && full % EPOCH >= 3
        {
            prop_assert_eq!(s.widen(full as u32), full);
            prop_assert_eq!(s.is_visible_xid32(full as u32), s.is_visible(full));
        }
    }

    #[test]
    fn parse_never_panics(text in "[0-9:,]{0,40}|\\PC{0,40}") {
        if let Ok(s) = XidSnapshot::parse(&text) {
            prop_assert_eq!(XidSnapshot::parse(&s.to_text()), Ok(s));
        }
    }
}
