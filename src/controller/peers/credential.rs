//! What the peers' state machine makes of a peer's credential: a refusal
//! read in a watch, probe or identity error ([`rejection_in_watch`],
//! [`rejection_in_text`]) reported once per episode, an expired credential
//! reported as such rather than as an outage, and one about to expire
//! warned of [`EXPIRY_WARNING`] ahead. What each report says, and what to
//! run again, is decided here; the shell only publishes it.

use std::time::Duration;

use super::{Effect, Now, Peers};
use crate::controller::connection::ClusterEvent;

/// The reasons of the Events about a peer's credential, beside
/// [`crate::peering::reason`]'s refusals. `CredentialRejected` and
/// `CredentialExpired` travel as [`Effect::Refused`] (a `PeerRefused`
/// Event, so `peer list` shows them), `CredentialExpiring` as
/// [`Effect::Warning`].
pub(super) mod credential_reason {
    /// The peer answered 401 or 403 to the Secret's credential.
    pub(crate) const REJECTED: &str = "CredentialRejected";
    /// The Secret's credential is past its expiry, and the peer is not up.
    pub(crate) const EXPIRED: &str = "CredentialExpired";
    /// The Secret's credential expires within [`super::EXPIRY_WARNING`].
    pub(crate) const EXPIRING: &str = "CredentialExpiring";
}

/// How long before its credential expires a peer is warned of.
pub(super) const EXPIRY_WARNING: Duration = Duration::from_secs(24 * 3600);

impl Peers {
    /// Reports, once per episode, that the peer refuses its Secret's
    /// credential (`code` 401 or 403) to connection `generation`, when
    /// that connection holds what the Secret holds now (an old connection
    /// whose superseded token was revoked is no news). Reported past the
    /// credential's expiry as `CredentialExpired`, else
    /// `CredentialRejected`. Nothing else changes: the peer is down as for
    /// any outage, its services kept for the grace period, and its
    /// connection goes on probing, so a credential that works again is
    /// noticed.
    pub(super) fn credential_rejected(
        &mut self,
        secret: &str,
        generation: u64,
        code: u16,
        now: Now,
        effects: &mut Vec<Effect>,
    ) {
        let Some(peer) = self.peers.get_mut(secret) else {
            return;
        };
        let frozen = peer.identity_changed
            && peer.next.is_none()
            && peer.current.as_ref().map(|c| c.generation) == Some(generation);
        if peer.newest() != Some(generation) || frozen {
            return;
        }
        let expired = peer.expires_at().is_some_and(|at| now.wall >= at);
        let reason = if expired {
            credential_reason::EXPIRED
        } else {
            credential_reason::REJECTED
        };
        if !peer.credential_reported.insert(reason) {
            return;
        }
        let message = if expired {
            expired_message(secret, peer.credential_expires)
        } else if code == 401 {
            format!(
                "Secret {secret}: the peer rejects its credential (401 Unauthorized: the token was revoked, or has expired); the peer's services stay imported for the grace period, then go. {RENEW} --name {secret}` again to issue a new one"
            )
        } else {
            format!(
                "Secret {secret}: the peer denies its credential access (403 Forbidden: its reader role or binding there was removed or changed); the peer's services stay imported for the grace period, then go. {RENEW} --name {secret}` again to grant it anew"
            )
        };
        credential_refused(secret.to_owned(), reason, message, effects);
    }

    /// Warns, once per credential, of a credential that expires within
    /// [`EXPIRY_WARNING`]; reports one past its expiry as
    /// `CredentialExpired` (once per episode) while the peer is not up,
    /// rather than as an outage only. Ends a credential episode once the
    /// credential works again.
    pub(super) fn credential_checks(&mut self, now: Now, effects: &mut Vec<Effect>) {
        for peer in self.peers.values_mut() {
            if peer.credential_works() {
                peer.credential_reported.clear();
            }
            let Some(expires) = peer.expires_at() else {
                continue;
            };
            let secret = peer.secret.clone();
            let at = peer.credential_expires;
            if now.wall >= expires {
                // A skewed clock aside, the peer refuses it at its next
                // probe: reported once the credential does not work.
                if !peer.credential_works()
                    && peer.credential_reported.insert(credential_reason::EXPIRED)
                {
                    let message = expired_message(&secret, at);
                    credential_refused(secret, credential_reason::EXPIRED, message, effects);
                }
            } else if !peer.expiry_warned
                && let Ok(left) = expires.duration_since(now.wall)
                && left < EXPIRY_WARNING
            {
                peer.expiry_warned = true;
                let at = at.map(|t| t.to_string()).unwrap_or_default();
                let hours = left.as_secs() / 3600;
                let message = format!(
                    "Secret {secret}: its credential expires at {at} (in {hours} h); then the peer refuses it, and its services stop being imported after the grace period. {RENEW} --name {secret}` before then to issue a new one"
                );
                tracing::warn!(
                    secret,
                    reason = credential_reason::EXPIRING,
                    "peer credential expiring: {message}"
                );
                effects.push(Effect::Warning {
                    secret,
                    reason: credential_reason::EXPIRING,
                    message,
                });
            }
        }
    }
}

/// How the peer-credential messages end: what to run again.
const RENEW: &str =
    "Run `clusterset-dns peer add --kubeconfig <this cluster> --peer-kubeconfig <the peer>";

/// The message of a `CredentialExpired` report.
fn expired_message(secret: &str, expires: Option<k8s_openapi::jiff::Timestamp>) -> String {
    let at = expires.map(|t| t.to_string()).unwrap_or_default();
    format!(
        "Secret {secret}: its credential expired at {at}, so the peer refuses it (the peer is not down); the peer's services stay imported for the grace period, then go. {RENEW} --name {secret}` again to issue a new one"
    )
}

/// Reports that the peer refuses `secret`'s credential for `reason`: a
/// log line and the refusal's Event and metric.
fn credential_refused(
    secret: String,
    reason: &'static str,
    message: String,
    effects: &mut Vec<Effect>,
) {
    tracing::error!(secret, reason, "peer credential refused: {message}");
    effects.push(Effect::Refused {
        secret,
        reason,
        message,
    });
}

/// The HTTP status of a watch error that says the peer refuses the
/// credential: 401 only. A 403 on a watch is what reading a peer of the
/// previous release's form with the narrow reader role gives before that
/// peer publishes (docs/upgrade.md), not a credential taken away; the
/// probe and the identity read, which the role always allows, report 403.
pub(super) fn rejection_in_watch(event: &ClusterEvent) -> Option<u16> {
    let error = match event {
        ClusterEvent::Exports(Err(error))
        | ClusterEvent::Services(Err(error))
        | ClusterEvent::McsSlices(Err(error)) => error,
        _ => return None,
    };
    let code = crate::watch::api_status(error)?.code;
    (code == 401).then_some(code)
}

/// The HTTP status, when 401 or 403, of an apiserver refusal in the text
/// of a probe or identity error. They reach the state machine as text
/// only, which holds the kube error as kube writes it: `ApiError: …
/// (Status { status: Some(Failure), code: 401, … })`; `code` comes first
/// after `status`, before anything the peer wrote (its message).
pub(super) fn rejection_in_text(text: &str) -> Option<u16> {
    let status = &text[text.find("(Status { status: ")?..];
    let code = &status[status.find(", code: ")? + ", code: ".len()..];
    let code: u16 = code
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    matches!(code, 401 | 403).then_some(code)
}
