//! Tests of the status schedule with a fake clock: a base `Instant` plus durations, never a
//! sleep, so minutes of protocol time take microseconds.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::protocol::replication::{PrimaryKeepalive, XLogData};

const SECOND: Duration = Duration::from_secs(1);

fn xlog(wal_start: u64) -> ServerMessage {
    ServerMessage::XLogData(XLogData {
        wal_start: Lsn(wal_start),
        wal_end: Lsn(wal_start),
        server_clock: 0,
        data: Bytes::from_static(b"B"),
    })
}

fn keepalive(reply_requested: bool) -> ServerMessage {
    ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
        wal_end: Lsn(0),
        server_clock: 0,
        reply_requested,
    })
}

/// A schedule at `t0` whose first update (due at construction) was already taken, so the
/// next periodic one is a full interval away.
fn started(config: StatusConfig, t0: Instant) -> StatusSchedule {
    let mut schedule = StatusSchedule::new(config, t0);
    assert!(schedule.poll_transmit(t0).is_some());
    schedule
}

#[test]
fn the_first_update_is_due_at_once_and_reports_nothing() {
    let t0 = Instant::now();
    let mut schedule = StatusSchedule::new(StatusConfig::new(3600 * SECOND), t0);
    assert_eq!(schedule.poll_timeout(), t0);
    let first = schedule.poll_transmit(t0).expect("due at construction");
    assert_eq!(
        (first.write(), first.flush(), first.apply()),
        (Lsn(0), Lsn(0), Lsn(0))
    );
    assert_eq!(schedule.poll_transmit(t0), None, "one update per due time");
    assert_eq!(schedule.poll_timeout(), t0 + 3600 * SECOND);
}

#[test]
fn a_keepalive_that_requests_a_reply_is_answered_at_once() {
    let t0 = Instant::now();
    let mut schedule = started(StatusConfig::new(3600 * SECOND), t0);
    schedule.confirm_flushed(Lsn(100));
    schedule.on_server_message(&xlog(500), t0 + SECOND);

    let now = t0 + 5 * SECOND;
    schedule.on_server_message(&keepalive(false), now);
    assert_eq!(schedule.poll_transmit(now), None, "no reply was requested");

    schedule.on_server_message(&keepalive(true), now);
    assert!(
        schedule.poll_timeout() <= now,
        "a driver sleeping until poll_timeout wakes at once"
    );
    let reply = schedule
        .poll_transmit(now)
        .expect("answered at the same instant");
    assert_eq!(
        (reply.write(), reply.flush(), reply.apply()),
        (Lsn(500), Lsn(100), Lsn(100))
    );
    assert_eq!(schedule.poll_transmit(now), None, "answered once");
    assert_eq!(
        schedule.poll_timeout(),
        now + 3600 * SECOND,
        "the next periodic update counts from the reply"
    );
}

#[test]
fn request_status_yields_an_update_at_once() {
    let t0 = Instant::now();
    let mut schedule = started(StatusConfig::new(10 * SECOND), t0);
    let now = t0 + 3 * SECOND;
    assert_eq!(schedule.poll_transmit(now), None);
    schedule.confirm_flushed(Lsn(42));
    assert_eq!(
        schedule.poll_transmit(now),
        None,
        "confirming alone sends nothing"
    );
    schedule.request_status();
    assert!(schedule.poll_timeout() <= now);
    let update = schedule.poll_transmit(now).expect("requested");
    assert_eq!(update.flush(), Lsn(42));
    assert_eq!(schedule.poll_transmit(now), None);
    assert_eq!(schedule.poll_timeout(), now + 10 * SECOND);
}

#[test]
fn nothing_is_sent_before_it_is_due() {
    let t0 = Instant::now();
    let mut schedule = started(StatusConfig::new(10 * SECOND), t0);
    let due = t0 + 10 * SECOND;
    // Data, pings without a reply request, confirmations: none of them makes an update
    // due, and none of them postpones the periodic one.
    for i in 1..100u64 {
        let now = t0 + Duration::from_millis(i * 99);
        schedule.on_server_message(&xlog(i * 10), now);
        schedule.on_server_message(&keepalive(false), now);
        schedule.confirm_flushed(Lsn(i));
        assert_eq!(schedule.poll_transmit(now), None, "at {:?}", now - t0);
        assert_eq!(schedule.poll_timeout(), due);
    }
    assert_eq!(schedule.poll_transmit(due - Duration::from_nanos(1)), None);
    let update = schedule.poll_transmit(due).expect("due after the interval");
    assert_eq!((update.write(), update.flush()), (Lsn(990), Lsn(99)));
    assert_eq!(schedule.poll_timeout(), due + 10 * SECOND);
}

#[test]
fn a_late_wake_sends_once_and_counts_the_interval_from_then() {
    let t0 = Instant::now();
    let mut schedule = started(StatusConfig::new(SECOND), t0);
    let late = t0 + 5 * SECOND;
    assert!(schedule.poll_transmit(late).is_some());
    assert_eq!(
        schedule.poll_transmit(late),
        None,
        "missed updates are not made up"
    );
    assert_eq!(schedule.poll_timeout(), late + SECOND);
}

/// Drives a schedule the way the stream task does, waking at every arrival (if messages
/// arrive every `arrivals`) and at every `poll_timeout`, for `length`; nobody confirms
/// anything. Returns the time and content of every update sent.
fn run_unconfirmed(
    config: StatusConfig,
    arrivals: Option<Duration>,
    length: Duration,
) -> Vec<(Duration, StatusReport)> {
    let t0 = Instant::now();
    let end = t0 + length;
    let mut schedule = StatusSchedule::new(config, t0);
    let mut next_arrival = arrivals.map(|every| t0 + every);
    let mut wal = 0u64;
    let mut sent = Vec::new();
    let mut now = t0;
    for _ in 0..1_000_000 {
        if let Some(report) = schedule.poll_transmit(now) {
            sent.push((now - t0, report));
        }
        let timeout = schedule.poll_timeout();
        assert!(timeout > now, "nothing due right after polling");
        now = next_arrival.map_or(timeout, |arrival| arrival.min(timeout));
        if now > end {
            return sent;
        }
        if let (Some(arrival), Some(every)) = (next_arrival, arrivals)
            && arrival == now
        {
            wal += 100;
            schedule.on_server_message(&xlog(wal), now);
            next_arrival = Some(arrival + every);
        }
    }
    panic!("the schedule kept the driver busy");
}

#[test]
fn updates_stay_within_a_third_of_wal_sender_timeout_while_nobody_confirms() {
    // The client asked for an hour; the server's timeout wins.
    let config = StatusConfig {
        status_interval: 3600 * SECOND,
        wal_sender_timeout: Some(60 * SECOND),
    };
    let limit = 20 * SECOND;
    let length = 10 * 60 * SECOND;
    // Data keeps arriving (the task reads, the consumer does not confirm), or nothing
    // arrives at all (backpressure: the task stopped reading).
    for arrivals in [Some(Duration::from_millis(250)), Some(7 * SECOND), None] {
        let sent = run_unconfirmed(config, arrivals, length);
        let first = sent.first().expect("an update was sent").0;
        assert!(first <= limit, "first update at {first:?} ({arrivals:?})");
        let mut previous = first;
        for &(at, report) in &sent[1..] {
            assert!(
                at - previous <= limit,
                "{:?} without an update before {at:?} ({arrivals:?})",
                at - previous
            );
            previous = at;
            assert_eq!(report.flush(), Lsn(0), "nothing was confirmed");
        }
        assert!(
            length - previous <= limit,
            "updates stopped at {previous:?}"
        );
        // Not flooding the server either: one per interval.
        assert!(
            sent.len() as u32 <= length.as_secs() as u32 / 20 + 1,
            "{} updates",
            sent.len()
        );
    }
}

#[test]
fn write_is_what_was_received_and_flush_what_was_confirmed() {
    let sent = run_unconfirmed(
        StatusConfig::new(SECOND),
        Some(Duration::from_millis(300)),
        10 * SECOND,
    );
    let last = sent.last().expect("updates were sent").1;
    // 33 arrivals in 10 s (at 0.3 s, 0.6 s, ... 9.9 s), 100 bytes apart.
    assert_eq!((last.write(), last.flush()), (Lsn(3300), Lsn(0)));
}

#[test]
fn the_interval_follows_wal_sender_timeout() {
    let ms = Duration::from_millis;
    // A third of the timeout when that is shorter than asked.
    assert_eq!(
        effective_status_interval(3600 * SECOND, Some(60 * SECOND)),
        20 * SECOND
    );
    assert_eq!(
        effective_status_interval(SECOND, Some(2 * SECOND)),
        ms(2000) / 3
    );
    // Never longer than asked.
    assert_eq!(effective_status_interval(SECOND, Some(60 * SECOND)), SECOND);
    // 0 disables the server's timeout; None means it is not followed.
    assert_eq!(
        effective_status_interval(3600 * SECOND, Some(Duration::ZERO)),
        3600 * SECOND
    );
    assert_eq!(
        effective_status_interval(3600 * SECOND, None),
        3600 * SECOND
    );
    // A tiny timeout gives 50 ms, not less; any interval is at least 10 ms.
    assert_eq!(effective_status_interval(SECOND, Some(ms(90))), ms(50));
    assert_eq!(effective_status_interval(ms(20), Some(ms(90))), ms(20));
    assert_eq!(effective_status_interval(ms(1), None), ms(10));
    assert_eq!(
        effective_status_interval(Duration::ZERO, Some(ms(1))),
        ms(10)
    );
    // What the config and the schedule use.
    let config = StatusConfig {
        status_interval: SECOND,
        wal_sender_timeout: Some(ms(600)),
    };
    assert_eq!(config.interval(), ms(200));
    assert_eq!(
        StatusSchedule::new(config, Instant::now()).interval(),
        ms(200)
    );
}

#[test]
fn an_enormous_interval_does_not_overflow_the_clock() {
    let t0 = Instant::now();
    let mut schedule = started(StatusConfig::new(Duration::MAX), t0);
    assert!(schedule.poll_timeout() > t0 + 365 * 86_400 * SECOND);
    assert_eq!(schedule.poll_transmit(t0 + 86_400 * SECOND), None);
    schedule.request_status();
    assert!(schedule.poll_transmit(t0 + 86_400 * SECOND).is_some());
}

#[test]
fn the_message_carries_the_report_and_the_given_clock() {
    let t0 = Instant::now();
    let mut schedule = StatusSchedule::new(StatusConfig::new(SECOND), t0);
    schedule.on_server_message(&xlog(900), t0);
    schedule.confirm_flushed(Lsn(700));
    let report = schedule.poll_transmit(t0).expect("due");
    assert_eq!(
        report.to_message(123_456),
        StandbyStatusUpdate {
            write: Lsn(900),
            flush: Lsn(700),
            apply: Lsn(700),
            client_clock: 123_456,
            reply_requested: false,
        }
    );
}

#[test]
fn write_is_never_below_flush() {
    let t0 = Instant::now();
    let mut schedule = StatusSchedule::new(StatusConfig::new(SECOND), t0);
    // Confirmed beyond anything received on this connection (e.g. a slot that resumed at
    // a position confirmed in an earlier session).
    schedule.on_server_message(&xlog(10), t0);
    schedule.confirm_flushed(Lsn(5000));
    let report = schedule.poll_transmit(t0).expect("due");
    assert_eq!((report.write(), report.flush()), (Lsn(5000), Lsn(5000)));
}

/// One step of a randomized session.
#[derive(Clone, Debug)]
enum Op {
    /// The sink confirmed up to here (often lower than before).
    Confirm(u64),
    /// An XLogData starting here arrived.
    XLogData(u64),
    /// A keepalive arrived.
    Keepalive { reply_requested: bool },
    /// The owner asked for an update now.
    RequestStatus,
    /// The driver asked what to send.
    Poll,
    /// Time passed.
    Advance(Duration),
}

fn arb_lsn() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0..5_000u64, 1 => any::<u64>()]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => arb_lsn().prop_map(Op::Confirm),
        3 => arb_lsn().prop_map(Op::XLogData),
        1 => any::<bool>().prop_map(|reply_requested| Op::Keepalive { reply_requested }),
        1 => Just(Op::RequestStatus),
        3 => Just(Op::Poll),
        3 => (0..5_000u64).prop_map(|ms| Op::Advance(Duration::from_millis(ms))),
    ]
}

fn arb_config() -> impl Strategy<Value = StatusConfig> {
    (
        1..10_000u64,
        prop::option::of(prop_oneof![Just(0u64), 1..60_000u64]),
    )
        .prop_map(|(interval, timeout)| StatusConfig {
            status_interval: Duration::from_millis(interval),
            wal_sender_timeout: timeout.map(Duration::from_millis),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Positions, whatever happens in whatever order: flush is exactly the highest value
    /// confirmed so far (so never more than was confirmed, and never lower than in an
    /// earlier update), apply equals flush, and write is the highest of received and
    /// confirmed (so never below flush and never going back).
    #[test]
    fn flush_never_exceeds_what_was_confirmed_nor_goes_back(
        config in arb_config(),
        ops in prop::collection::vec(arb_op(), 0..300),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut schedule = StatusSchedule::new(config, t0);
        let mut confirmed = 0u64;
        let mut received = 0u64;
        let mut last: Option<StatusReport> = None;
        for op in ops {
            match op {
                Op::Confirm(lsn) => {
                    confirmed = confirmed.max(lsn);
                    schedule.confirm_flushed(Lsn(lsn));
                }
                Op::XLogData(lsn) => {
                    received = received.max(lsn);
                    schedule.on_server_message(&xlog(lsn), now);
                }
                Op::Keepalive { reply_requested } => {
                    schedule.on_server_message(&keepalive(reply_requested), now);
                }
                Op::RequestStatus => schedule.request_status(),
                Op::Advance(by) => now += by,
                Op::Poll => {
                    if let Some(report) = schedule.poll_transmit(now) {
                        prop_assert!(report.flush() <= Lsn(confirmed), "more than confirmed");
                        prop_assert_eq!(report.flush(), Lsn(confirmed));
                        prop_assert_eq!(report.apply(), report.flush());
                        prop_assert_eq!(report.write(), Lsn(received.max(confirmed)));
                        if let Some(last) = last {
                            prop_assert!(report.flush() >= last.flush(), "flush went back");
                            prop_assert!(report.write() >= last.write(), "write went back");
                        }
                        last = Some(report);
                    }
                }
            }
            prop_assert_eq!(schedule.flushed(), Lsn(confirmed));
        }
    }

    /// Timing, for a driver that polls after every input and wakes at every poll_timeout:
    /// an update goes out exactly when one is owed (reply requested, or asked for) or the
    /// interval since the last one has passed — never earlier — and so consecutive
    /// updates are never more than the interval apart.
    #[test]
    fn updates_go_out_exactly_when_due(
        config in arb_config(),
        ops in prop::collection::vec(arb_op(), 0..300),
    ) {
        let t0 = Instant::now();
        let interval = config.interval();
        let mut schedule = StatusSchedule::new(config, t0);
        let mut now = t0;
        // The model: when the last update went out, and whether one is owed.
        let mut last_sent: Option<Instant> = None;
        let mut owed = false;
        let mut poll = |schedule: &mut StatusSchedule, now: Instant, owed: &mut bool|
            -> Result<(), TestCaseError>
        {
            let due = *owed || last_sent.is_none_or(|last| now >= last + interval);
            let sent = schedule.poll_transmit(now).is_some();
            prop_assert_eq!(sent, due, "at {:?} (last {:?})", now - t0, last_sent.map(|l| l - t0));
            if sent {
                if let Some(last) = last_sent {
                    prop_assert!(now - last <= interval, "late: {:?}", now - last);
                }
                last_sent = Some(now);
                *owed = false;
            }
            prop_assert!(schedule.poll_timeout() > now, "still due after polling");
            Ok(())
        };
        for op in ops {
            match op {
                Op::Confirm(lsn) => schedule.confirm_flushed(Lsn(lsn)),
                Op::XLogData(lsn) => schedule.on_server_message(&xlog(lsn), now),
                Op::Keepalive { reply_requested } => {
                    owed |= reply_requested;
                    schedule.on_server_message(&keepalive(reply_requested), now);
                }
                Op::RequestStatus => {
                    owed = true;
                    schedule.request_status();
                }
                Op::Poll => {}
                Op::Advance(by) => {
                    let target = now + by;
                    // The timer fires at every deadline on the way.
                    while schedule.poll_timeout() <= target {
                        now = schedule.poll_timeout().max(now);
                        poll(&mut schedule, now, &mut owed)?;
                    }
                    now = target;
                }
            }
            if owed {
                prop_assert!(schedule.poll_timeout() <= now, "an owed update waits");
            }
            poll(&mut schedule, now, &mut owed)?;
        }
    }
}
