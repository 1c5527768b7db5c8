//! Leader election on a `coordination.k8s.io` Lease, as client-go's
//! leaderelection does it: a replica takes the Lease when it is free or
//! expired (an optimistic update: the apiserver's resourceVersion check
//! lets only one of two racing replicas win), renews it every
//! [`RENEW_EVERY`], and stops (the process exits and restarts as a standby)
//! when it cannot renew within [`RENEW_DEADLINE`], so two replicas never
//! write at once.
//!
//! Every Lease call is bounded by the deadline, whether the apiserver
//! refuses, times out or hangs: a standby takes an unrenewed Lease after
//! [`LEASE_DURATION`], and by then the old leader must have stopped. Its
//! writes are held to the same deadline by its [`Fence`].

use std::fmt::Display;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::time::Instant;

use super::fence::Fence;

/// How long a Lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How often a standby tries to take the Lease, and a leader to renew it
/// after a failed attempt.
pub const RETRY_EVERY: Duration = Duration::from_secs(2);
/// How long after its last renewal began a leader still trusts its
/// leadership: one retry short of [`LEASE_DURATION`], the margin for the
/// standby's clock and for a write already on the wire.
pub const RENEW_DEADLINE: Duration =
    Duration::from_secs(LEASE_DURATION.as_secs() - RETRY_EVERY.as_secs());

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn expired(spec: &LeaseSpec) -> bool {
    let duration = spec
        .lease_duration_seconds
        .map_or(LEASE_DURATION, |s| Duration::from_secs(s.max(0) as u64));
    match &spec.renew_time {
        Some(renewed) => {
            let age = k8s_openapi::jiff::Timestamp::now().duration_since(renewed.0);
            age.as_secs_f64() > duration.as_secs_f64()
        }
        None => true,
    }
}

/// Tries once to take or renew the Lease; `Ok(true)` when we hold it.
pub async fn try_acquire(
    api: &Api<Lease>,
    name: &str,
    identity: &str,
) -> Result<bool, kube::Error> {
    let holder_spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
        acquire_time: Some(acquired.unwrap_or_else(now)),
        renew_time: Some(now()),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    match api.get_opt(name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(holder_spec(0, None)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(error),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.clone().unwrap_or_default();
            let ours = spec.holder_identity.as_deref() == Some(identity);
            if !ours && !expired(&spec) {
                return Ok(false);
            }
            let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
            let acquired = if ours { spec.acquire_time } else { None };
            lease.spec = Some(holder_spec(transitions, acquired));
            // The resourceVersion read above makes this a compare-and-swap.
            match api.replace(name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(error),
            }
        }
    }
}

/// Waits until this replica holds the Lease; returns when the winning
/// attempt began, which is when the Lease's renewal time was taken. A hung
/// attempt is given up after [`RENEW_DEADLINE`] and tried again.
pub async fn acquire(api: &Api<Lease>, name: &str, identity: &str) -> Instant {
    let mut logged = false;
    loop {
        let began = Instant::now();
        match tokio::time::timeout(RENEW_DEADLINE, try_acquire(api, name, identity)).await {
            Ok(Ok(true)) => {
                tracing::info!(lease = name, identity, "leading");
                return began;
            }
            Ok(Ok(false)) if !logged => {
                tracing::info!(lease = name, identity, "standby: another replica leads");
                logged = true;
            }
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                tracing::warn!(lease = name, error = %crate::error::Chain(&error), "cannot take the leader Lease")
            }
            Err(_) => tracing::warn!(
                lease = name,
                "taking the leader Lease did not finish in {RENEW_DEADLINE:?}"
            ),
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// Renews the Lease until a renewal cannot be made before the deadline;
/// then closes `fence` and returns why. `fence` must hold the deadline of
/// the acquisition ([`acquire`]'s instant plus [`RENEW_DEADLINE`]).
pub async fn hold(api: &Api<Lease>, name: &str, identity: &str, fence: &Fence) -> String {
    hold_with(|| try_acquire(api, name, identity), fence).await
}

/// [`hold`] over any renewal: `Ok(true)` renewed, `Ok(false)` another
/// replica holds the Lease, `Err` the attempt failed.
async fn hold_with<F, E>(mut renew: impl FnMut() -> F, fence: &Fence) -> String
where
    F: Future<Output = Result<bool, E>>,
    E: Display,
{
    let why = loop {
        tokio::time::sleep(RENEW_EVERY).await;
        if let Err(why) = renew_before_deadline(&mut renew, fence).await {
            break why;
        }
    };
    fence.close();
    why
}

/// One renewal, retried every [`RETRY_EVERY`] until it succeeds or the
/// fence's deadline comes; a success moves the deadline.
async fn renew_before_deadline<F, E>(
    renew: &mut impl FnMut() -> F,
    fence: &Fence,
) -> Result<(), String>
where
    F: Future<Output = Result<bool, E>>,
    E: Display,
{
    let Some(deadline) = fence.deadline() else {
        return Err("the leader's fence has no deadline".into());
    };
    loop {
        let began = Instant::now();
        match tokio::time::timeout_at(deadline, renew()).await {
            Ok(Ok(true)) => {
                fence.extend(began + RENEW_DEADLINE);
                return Ok(());
            }
            Ok(Ok(false)) => return Err("another replica took the leader Lease".into()),
            Ok(Err(error)) if Instant::now() + RETRY_EVERY < deadline => {
                tracing::warn!(error = %error, "renewing the leader Lease failed; retrying");
                tokio::time::sleep(RETRY_EVERY).await;
            }
            Ok(Err(error)) => {
                return Err(format!(
                    "could not renew the leader Lease within {RENEW_DEADLINE:?}: {error}"
                ));
            }
            Err(_) => {
                return Err(format!(
                    "renewing the leader Lease did not finish within {RENEW_DEADLINE:?} of the last renewal"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A Lease renewal that answers from a script, one answer per attempt;
    /// `None` hangs forever. Records when each attempt began.
    struct Script {
        answers: Mutex<Vec<Option<Result<bool, String>>>>,
        attempts: Mutex<Vec<Instant>>,
    }

    impl Script {
        fn new(answers: Vec<Option<Result<bool, String>>>) -> Self {
            Self {
                answers: Mutex::new(answers.into_iter().rev().collect()),
                attempts: Mutex::new(Vec::new()),
            }
        }

        async fn renew(&self) -> Result<bool, String> {
            self.attempts.lock().unwrap().push(Instant::now());
            let answer = self
                .answers
                .lock()
                .unwrap()
                .pop()
                .expect("the script ran out");
            match answer {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        }
    }

    /// A fence as [`acquire`] leaves it at `t0`.
    fn acquired_now() -> (Instant, Fence) {
        let t0 = Instant::now();
        let fence = Fence::closed();
        fence.extend(t0 + RENEW_DEADLINE);
        (t0, fence)
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewal_hangs_stops_at_its_deadline() {
        let (t0, fence) = acquired_now();
        let script = Script::new(vec![Some(Ok(true)), None]);
        let why = hold_with(|| script.renew(), &fence).await;
        // Renewed at 5 s, so the deadline is 5 s + RENEW_DEADLINE; the hung
        // attempt began at 10 s and is given up at that deadline.
        assert_eq!(t0.elapsed(), RENEW_EVERY + RENEW_DEADLINE, "{why}");
        assert!(why.contains("did not finish"), "{why}");
        assert!(
            !fence.is_open(),
            "the fence stays open after leadership ended"
        );
        assert!(
            t0.elapsed() < RENEW_EVERY + LEASE_DURATION,
            "stopped after a standby may lead"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewals_fail_retries_then_stops_before_its_deadline() {
        let (t0, fence) = acquired_now();
        let refused = || Some(Err("connection refused".to_owned()));
        let script = Script::new(vec![refused(); 8]);
        let why = hold_with(|| script.renew(), &fence).await;
        let attempts = script.attempts.lock().unwrap().clone();
        // At 5, 7, 9, 11 s; the next retry would start at 13 s = the deadline.
        assert_eq!(attempts.len(), 4, "{attempts:?}");
        assert!(t0.elapsed() <= RENEW_DEADLINE, "{:?}", t0.elapsed());
        assert!(why.contains("connection refused"), "{why}");
        assert!(!fence.is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_keeps_leading_while_renewals_succeed_and_a_late_success_counts() {
        let (t0, fence) = acquired_now();
        let script = Script::new(vec![
            Some(Ok(true)),
            Some(Err("timeout".to_owned())),
            Some(Ok(true)),
            Some(Ok(false)),
        ]);
        let why = hold_with(|| script.renew(), &fence).await;
        assert_eq!(why, "another replica took the leader Lease");
        // 5 s renewed; 10 s failed, 12 s renewed; 17 s lost.
        assert_eq!(t0.elapsed(), Duration::from_secs(17));
        assert!(!fence.is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn each_renewal_moves_the_fence_to_the_deadline_after_it_began() {
        let (t0, fence) = acquired_now();
        let script = Script::new(vec![Some(Ok(true))]);
        let mut renew = || script.renew();
        tokio::time::sleep(RENEW_EVERY).await;
        renew_before_deadline(&mut renew, &fence).await.unwrap();
        assert_eq!(fence.deadline(), Some(t0 + RENEW_EVERY + RENEW_DEADLINE));
    }
}
