//! Leader election on a `coordination.k8s.io` Lease, as client-go's
//! leaderelection does it: a replica takes the Lease when it is free or
//! expired (an optimistic update: the apiserver's resourceVersion check
//! lets only one of two racing replicas win), renews it every
//! [`RENEW_EVERY`], and stops (the process exits and restarts as a standby)
//! when it cannot renew within [`LEASE_DURATION`] minus one retry, so two
//! replicas never write at once.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// How long a Lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How often a standby tries to take the Lease.
pub const RETRY_EVERY: Duration = Duration::from_secs(2);

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

/// Waits until this replica holds the Lease.
pub async fn acquire(api: &Api<Lease>, name: &str, identity: &str) {
    let mut logged = false;
    loop {
        match try_acquire(api, name, identity).await {
            Ok(true) => {
                tracing::info!(lease = name, identity, "leading");
                return;
            }
            Ok(false) if !logged => {
                tracing::info!(lease = name, identity, "standby: another replica leads");
                logged = true;
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(lease = name, error = %crate::error::Chain(&error), "cannot take the leader Lease")
            }
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

/// Renews the Lease until a renewal cannot be made in time; returns why.
pub async fn hold(api: &Api<Lease>, name: &str, identity: &str) -> String {
    let deadline = LEASE_DURATION - RETRY_EVERY;
    let mut last_renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        loop {
            match try_acquire(api, name, identity).await {
                Ok(true) => {
                    last_renewed = tokio::time::Instant::now();
                    break;
                }
                Ok(false) => return "another replica took the leader Lease".into(),
                Err(error) => {
                    if last_renewed.elapsed() >= deadline {
                        return format!(
                            "could not renew the leader Lease for {:?}: {}",
                            last_renewed.elapsed(),
                            crate::error::Chain(&error)
                        );
                    }
                    tokio::time::sleep(RETRY_EVERY).await;
                }
            }
        }
    }
}
