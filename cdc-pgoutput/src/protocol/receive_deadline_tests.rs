//! Tests of the receive deadline with a fake clock: a base `Instant` plus durations.

use super::*;

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn a_silent_server_is_probed_twice_then_presumed_dead() {
    let t0 = Instant::now();
    let mut deadline = ReceiveDeadline::new(Some(30 * SECOND), t0);
    assert!(!deadline.poll_probe(t0 + 9 * SECOND));
    assert_eq!(deadline.poll_timeout(), Some(t0 + 10 * SECOND));
    assert!(deadline.poll_probe(t0 + 10 * SECOND));
    assert!(
        !deadline.poll_probe(t0 + 10 * SECOND),
        "one probe per third"
    );
    assert_eq!(deadline.poll_timeout(), Some(t0 + 20 * SECOND));
    assert!(deadline.poll_probe(t0 + 20 * SECOND));
    assert_eq!(deadline.poll_timeout(), Some(t0 + 30 * SECOND));
    assert!(!deadline.poll_probe(t0 + 29 * SECOND));
    assert_eq!(deadline.poll_expired(t0 + 29 * SECOND), None);
    assert_eq!(deadline.poll_expired(t0 + 31 * SECOND), Some(31 * SECOND));
}

#[test]
fn anything_received_ends_the_silence() {
    let t0 = Instant::now();
    let mut deadline = ReceiveDeadline::new(Some(30 * SECOND), t0);
    assert!(deadline.poll_probe(t0 + 10 * SECOND));
    deadline.on_received(t0 + 25 * SECOND);
    assert_eq!(deadline.poll_expired(t0 + 40 * SECOND), None);
    assert_eq!(deadline.poll_timeout(), Some(t0 + 35 * SECOND));
    assert!(deadline.poll_probe(t0 + 35 * SECOND), "probes start over");
    assert_eq!(deadline.poll_expired(t0 + 55 * SECOND), Some(30 * SECOND));
}

#[test]
fn silence_while_not_reading_does_not_count() {
    let t0 = Instant::now();
    let mut deadline = ReceiveDeadline::new(Some(30 * SECOND), t0);
    deadline.set_reading(false, t0 + SECOND);
    assert_eq!(deadline.poll_timeout(), None);
    assert_eq!(deadline.poll_expired(t0 + 600 * SECOND), None);
    assert!(!deadline.poll_probe(t0 + 600 * SECOND));
    deadline.set_reading(true, t0 + 600 * SECOND);
    assert_eq!(deadline.poll_expired(t0 + 629 * SECOND), None);
    assert_eq!(deadline.poll_timeout(), Some(t0 + 610 * SECOND));
    assert!(deadline.poll_expired(t0 + 630 * SECOND).is_some());
    // Staying in the reading state does not restart the count.
    deadline.set_reading(true, t0 + 630 * SECOND);
    assert!(deadline.poll_expired(t0 + 630 * SECOND).is_some());
}

#[test]
fn no_timeout_means_never() {
    let t0 = Instant::now();
    for timeout in [None, Some(Duration::ZERO)] {
        let mut deadline = ReceiveDeadline::new(timeout, t0);
        assert_eq!(deadline.timeout(), None);
        assert_eq!(deadline.poll_timeout(), None);
        assert!(!deadline.poll_probe(t0 + 86_400 * SECOND));
        assert_eq!(deadline.poll_expired(t0 + 86_400 * SECOND), None);
    }
    let deadline = ReceiveDeadline::new(Some(Duration::MAX), t0);
    assert!(deadline.poll_timeout().is_some(), "saturates, never panics");
}

#[test]
fn the_effective_timeout_is_at_least_twice_the_servers() {
    assert_eq!(
        effective_receive_timeout(Some(30 * SECOND), Some(60 * SECOND)),
        Some(120 * SECOND)
    );
    assert_eq!(
        effective_receive_timeout(Some(30 * SECOND), Some(2 * SECOND)),
        Some(30 * SECOND)
    );
    assert_eq!(
        effective_receive_timeout(Some(SECOND), Some(2 * SECOND)),
        Some(4 * SECOND)
    );
    assert_eq!(
        effective_receive_timeout(Some(30 * SECOND), Some(Duration::ZERO)),
        Some(30 * SECOND)
    );
    assert_eq!(effective_receive_timeout(None, Some(2 * SECOND)), None);
    assert_eq!(
        effective_receive_timeout(Some(30 * SECOND), None),
        Some(30 * SECOND)
    );
    let once = effective_receive_timeout(Some(SECOND), Some(2 * SECOND));
    assert_eq!(effective_receive_timeout(once, Some(2 * SECOND)), once);
}
