//! The notifier end to end against [`FakeAlertmanager`]: batching, overflow, failures, stop.

use std::time::{Duration, Instant};

use super::fake_alertmanager::FakeAlertmanager;
use super::*;
use crate::labels::{Label, Labels};
use crate::rules::alert::{Alert, AlertState};

fn outgoing(n: usize) -> Outgoing {
    Outgoing {
        alert: Alert {
            labels: Labels::from_trusted(vec![Label::new("alertname", "Load"), Label::new("n", n.to_string())]),
            annotations: vec![Label::new("summary", "high")],
            value: 1.0,
            state: AlertState::Firing,
            active_at_ms: 0,
            fired_at_ms: Some(60_000),
            resolved_at_ms: None,
            keep_firing_since_ms: None,
            last_sent_at_ms: Some(60_000),
            valid_until_ms: 300_000,
        },
        expr: "load > 1".to_owned(),
        tenant: None,
    }
}

fn alerts(range: std::ops::Range<usize>) -> Vec<Outgoing> {
    range.map(outgoing).collect()
}

fn config(alertmanagers: &[&FakeAlertmanager]) -> NotifierConfig {
    NotifierConfig {
        alertmanagers: alertmanagers.iter().map(|a| a.base()).collect(),
        external_labels: [("replica".to_owned(), "r1".to_owned())].into(),
        external_url: "http://saltdb:9201".to_owned(),
        ..NotifierConfig::default()
    }
}

/// The posted batches as JSON arrays.
fn batches(am: &FakeAlertmanager, n: usize) -> Vec<Vec<serde_json::Value>> {
    am.wait_for_posts(n).iter().map(|p| serde_json::from_str(&p.body).unwrap()).collect()
}

/// Waits up to 10 s for `done`.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_150_alert_send_makes_three_posts_of_at_most_64() {
    let am = FakeAlertmanager::start();
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(config(&[&am]), metrics.clone()).unwrap();
    notifier.send(alerts(0..150));
    let posted = batches(&am, 3);
    assert_eq!(posted.iter().map(Vec::len).collect::<Vec<_>>(), [64, 64, 22]);
    let first = &posted[0][0];
    assert_eq!(first["labels"]["n"], "0");
    assert_eq!(first["labels"]["replica"], "r1", "external label added");
    assert_eq!(first["generatorURL"], "http://saltdb:9201/graph?g0.expr=load+%3E+1&g0.tab=1");
    let url = &notifier.alertmanagers()[0];
    eventually("150 counted as sent", || metrics.sent_count(url) == 150);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(am.posts().len(), 3, "no fourth post");
    assert_eq!((metrics.error_count(url), metrics.dropped_count(), metrics.queue_length_now()), (0, 0, 0));
}

#[test]
fn alerts_of_each_tenant_are_posted_apart_with_their_tenant() {
    let am = FakeAlertmanager::start();
    am.hold();
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(config(&[&am]), metrics.clone()).unwrap();
    notifier.send(alerts(1000..1001));
    am.wait_for_posts(1);
    let of = |n: usize, tenant: Option<&str>| Outgoing {
        tenant: tenant.map(|t| crate::tenant::TenantId::parse(t).unwrap()),
        ..outgoing(n)
    };
    notifier.send(vec![of(0, Some("a")), of(1, None), of(2, Some("b")), of(3, Some("a"))]);
    am.release();
    let posts = am.wait_for_posts(4);
    let seen: Vec<(String, Vec<String>)> = posts[1..]
        .iter()
        .map(|p| {
            let alerts: Vec<serde_json::Value> = serde_json::from_str(&p.body).unwrap();
            assert!(alerts.iter().all(|a| a.get("tenant").is_none()), "the tenant is a header, not a field");
            (p.tenant.clone(), alerts.iter().map(|a| a["labels"]["n"].as_str().unwrap().to_owned()).collect())
        })
        .collect();
    let expected = [("a", vec!["0", "3"]), ("", vec!["1"]), ("b", vec!["2"])];
    assert_eq!(seen, expected.map(|(t, n)| (t.to_owned(), n.into_iter().map(str::to_owned).collect::<Vec<_>>())));
    eventually("5 counted as sent", || metrics.sent_count(&notifier.alertmanagers()[0]) == 5);
}

#[test]
fn a_full_queue_drops_the_oldest_while_the_alertmanager_is_busy() {
    let am = FakeAlertmanager::start();
    am.hold();
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(NotifierConfig { queue_capacity: 100, ..config(&[&am]) }, metrics.clone()).unwrap();
    notifier.send(alerts(1000..1001));
    am.wait_for_posts(1);
    notifier.send(alerts(0..150));
    assert_eq!((metrics.dropped_count(), metrics.queue_length_now()), (50, 100));
    am.release();
    let posted = batches(&am, 3);
    assert_eq!(posted.iter().map(Vec::len).collect::<Vec<_>>(), [1, 64, 36]);
    assert_eq!(posted[1][0]["labels"]["n"], "50", "the 50 oldest were dropped");
}

#[test]
fn a_refused_batch_counts_as_errors_and_dropped() {
    let am = FakeAlertmanager::start();
    am.answer_next(&[400]);
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(config(&[&am]), metrics.clone()).unwrap();
    notifier.send(alerts(0..3));
    let url = notifier.alertmanagers()[0].clone();
    eventually("3 dropped", || metrics.dropped_count() == 3);
    assert_eq!((metrics.sent_count(&url), metrics.error_count(&url)), (3, 3));
}

#[test]
fn a_batch_one_alertmanager_took_is_not_dropped() {
    let (good, bad) = (FakeAlertmanager::start(), FakeAlertmanager::start());
    bad.answer_next(&[422]);
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(config(&[&good, &bad]), metrics.clone()).unwrap();
    notifier.send(alerts(0..2));
    let urls = notifier.alertmanagers().to_vec();
    eventually("errors counted", || metrics.error_count(&urls[1]) == 2);
    eventually("sent counted", || metrics.sent_count(&urls[0]) == 2);
    assert_eq!((metrics.error_count(&urls[0]), metrics.sent_count(&urls[1]), metrics.dropped_count()), (0, 2, 0));
    assert_eq!(good.posts().len(), 1);
}

#[test]
fn without_alertmanagers_alerts_are_dropped() {
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(NotifierConfig::default(), metrics.clone()).unwrap();
    notifier.send(alerts(0..2));
    eventually("2 dropped", || metrics.dropped_count() == 2);
    assert!(notifier.alertmanagers().is_empty());
}

#[test]
fn stop_sends_what_is_queued() {
    let am = FakeAlertmanager::start();
    am.hold();
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(config(&[&am]), metrics.clone()).unwrap();
    notifier.send(alerts(0..1));
    am.wait_for_posts(1);
    notifier.send(alerts(1..11));
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            am.release();
        });
        notifier.stop();
    });
    assert_eq!(am.posts().len(), 2);
    assert_eq!(metrics.dropped_count(), 0);
    notifier.send(alerts(11..12));
    assert_eq!(metrics.dropped_count(), 1, "a stopped notifier drops");
}

#[test]
fn stop_gives_up_at_the_drain_deadline() {
    let am = FakeAlertmanager::start();
    am.hold();
    let metrics = NotifierMetrics::detached();
    let drain = Duration::from_millis(300);
    let notifier = Notifier::new(NotifierConfig { drain_timeout: drain, ..config(&[&am]) }, metrics.clone()).unwrap();
    notifier.send(alerts(0..1));
    am.wait_for_posts(1);
    notifier.send(alerts(1..11));
    let started = Instant::now();
    notifier.stop();
    let took = started.elapsed();
    assert!(took >= drain && took < drain + Duration::from_secs(1), "stop took {took:?}");
    let again = Instant::now();
    notifier.stop();
    assert!(again.elapsed() < drain, "only the first stop waits");
    am.release();
    eventually("the queued 10 dropped once the post under way ended", || metrics.dropped_count() == 10);
    assert_eq!(am.posts().len(), 1);
}

#[test]
fn send_does_not_wait_for_a_busy_alertmanager() {
    let am = FakeAlertmanager::start();
    am.hold();
    let metrics = NotifierMetrics::detached();
    let notifier = Notifier::new(config(&[&am]), metrics.clone()).unwrap();
    notifier.send(alerts(0..1));
    am.wait_for_posts(1);
    let started = Instant::now();
    notifier.send(alerts(1..10_001));
    let queued = started.elapsed();
    assert!(queued < Duration::from_secs(2), "send took {queued:?}");
    assert_eq!(metrics.queue_length_now(), 10_000);
    am.release();
    let delivered = Instant::now();
    let posts = am.wait_for_posts(1 + 10_000usize.div_ceil(queue::MAX_BATCH));
    eprintln!(
        "notifier: queued 10,000 alerts in {queued:?}; {} posts delivered in {:?}",
        posts.len(),
        delivered.elapsed()
    );
    assert_eq!(posts.len(), 158);
}

#[test]
fn a_bad_alertmanager_url_is_refused() {
    let config = NotifierConfig { alertmanagers: vec!["https://am:9093".to_owned()], ..NotifierConfig::default() };
    let err = Notifier::new(config, NotifierMetrics::detached()).unwrap_err();
    assert!(matches!(err, NotifierError::Url(_)), "{err}");
}
