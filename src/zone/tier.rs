//! Which endpoints answer the names of a headless import: the local-first
//! rule of [`Locality`](crate::api::locality::Locality) and the opt-in
//! serving fallback, as one pure choice ([`choose`]) that the zone builds
//! from and `/explain` explains with.
//!
//! The tiers, first that has an endpoint wins:
//!
//! 1. this cluster's ready endpoints (local-first imports only, once this
//!    cluster's id is known);
//! 2. every cluster's ready endpoints;
//! 3. with `serve_terminating` on, and no ready endpoint anywhere: this
//!    cluster's terminating but still serving endpoints (local-first only);
//! 4. every cluster's serving endpoints.
//!
//! Only the service name's A and AAAA answers prefer this cluster; the
//! per-endpoint names and SRV answer for every cluster, from the ready
//! endpoints, or from the serving ones under the fallback.

/// The endpoints an answer was taken from, when it is not the plain
/// "every cluster's ready endpoints" of a spread import (which is not
/// counted, so that the common answer costs nothing more).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// This cluster's ready endpoints (a local-first import while this
    /// cluster has one).
    Local,
    /// Every cluster's ready endpoints, because this cluster has none (a
    /// local-first import).
    All,
    /// This cluster's serving endpoints: no ready endpoint anywhere, the
    /// fallback is on, and this cluster has a serving one (local-first).
    LocalServing,
    /// Every cluster's serving endpoints: no ready endpoint anywhere and
    /// the fallback is on.
    AllServing,
}

impl Tier {
    /// Every tier, in the order they are tried (and of their counters).
    pub const ALL: [Self; 4] = [Self::Local, Self::All, Self::LocalServing, Self::AllServing];

    /// The `tier` label of `clusterset_dns_local_first_answers_total`, and
    /// the name `/explain` gives it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::All => "all",
            Self::LocalServing => "local_serving",
            Self::AllServing => "all_serving",
        }
    }

    /// Whether the tier's endpoints are serving (terminating), not ready.
    pub fn serving(self) -> bool {
        matches!(self, Self::LocalServing | Self::AllServing)
    }
}

/// How many endpoints a headless import has, by readiness and cluster:
/// distinct per-endpoint names (`(cluster, host)`), so that a dual-stack
/// endpoint counts once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Ready endpoints in every cluster, this one included.
    pub ready: usize,
    /// Ready endpoints in this cluster.
    pub local_ready: usize,
    /// Terminating but serving endpoints in every cluster (counted whether
    /// or not the fallback is on).
    pub serving: usize,
    /// Terminating but serving endpoints in this cluster.
    pub local_serving: usize,
}

/// Which endpoints answer, decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The names are built from the serving endpoints (no endpoint is
    /// ready anywhere, and the fallback is on); else from the ready ones.
    pub serving: bool,
    /// The service name's A and AAAA hold this cluster's endpoints only.
    pub local: bool,
    /// The tier of the service name's A and AAAA answers; `None` for the
    /// plain answer of a spread import (every cluster's ready endpoints).
    pub apex: Option<Tier>,
    /// The tier of every other name (per-endpoint names, SRV): every
    /// cluster's serving endpoints under the fallback, else `None`.
    pub names: Option<Tier>,
}

/// Which endpoints answer a headless import with `census`. `local_first`:
/// the import's locality is local-first *and* this cluster's id is known
/// (without it, no endpoint is known to be this cluster's);
/// `serve_terminating`: the fallback is on. `None` when no endpoint may
/// answer: the import's names do not exist (NXDOMAIN).
pub fn choose(local_first: bool, serve_terminating: bool, census: Census) -> Option<Choice> {
    let (serving, local) = if census.ready > 0 {
        (false, local_first && census.local_ready > 0)
    } else if serve_terminating && census.serving > 0 {
        (true, local_first && census.local_serving > 0)
    } else {
        return None;
    };
    let apex = match (serving, local) {
        (false, true) => Some(Tier::Local),
        (false, false) if local_first => Some(Tier::All),
        (false, false) => None,
        (true, true) => Some(Tier::LocalServing),
        (true, false) => Some(Tier::AllServing),
    };
    Some(Choice {
        serving,
        local,
        apex,
        names: serving.then_some(Tier::AllServing),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn census(ready: usize, local_ready: usize, serving: usize, local_serving: usize) -> Census {
        Census {
            ready,
            local_ready,
            serving,
            local_serving,
        }
    }

    fn apex(local_first: bool, fallback: bool, c: Census) -> Option<Option<Tier>> {
        choose(local_first, fallback, c).map(|choice| choice.apex)
    }

    #[test]
    fn local_first_prefers_this_clusters_ready_endpoints_then_every_clusters() {
        let local = choose(true, false, census(3, 2, 0, 0)).unwrap();
        assert_eq!(local.apex, Some(Tier::Local));
        assert!(local.local && !local.serving);
        // Other names answer for every cluster, uncounted.
        assert_eq!(local.names, None);
        let failed_over = choose(true, false, census(1, 0, 0, 0)).unwrap();
        assert_eq!(failed_over.apex, Some(Tier::All));
        assert!(!failed_over.local && !failed_over.serving);
        // Serving endpoints here do not beat ready ones elsewhere.
        assert_eq!(apex(true, true, census(1, 0, 4, 4)), Some(Some(Tier::All)));
    }

    #[test]
    fn a_spread_import_answers_every_clusters_ready_endpoints_untiered() {
        for c in [census(3, 2, 0, 0), census(1, 0, 2, 2)] {
            let choice = choose(false, true, c).unwrap();
            assert_eq!((choice.apex, choice.names), (None, None), "{c:?}");
            assert!(!choice.local && !choice.serving);
        }
    }

    #[test]
    fn no_ready_endpoint_is_nxdomain_unless_the_fallback_takes_serving_ones() {
        assert_eq!(choose(true, false, census(0, 0, 2, 1)), None);
        assert_eq!(choose(false, false, census(0, 0, 2, 1)), None);
        assert_eq!(choose(true, true, census(0, 0, 0, 0)), None);
        let local = choose(true, true, census(0, 0, 2, 1)).unwrap();
        assert_eq!(local.apex, Some(Tier::LocalServing));
        assert!(local.local && local.serving);
        assert_eq!(local.names, Some(Tier::AllServing));
        assert_eq!(
            apex(true, true, census(0, 0, 2, 0)),
            Some(Some(Tier::AllServing))
        );
        // A spread import falls back to every cluster's serving endpoints.
        let spread = choose(false, true, census(0, 0, 2, 2)).unwrap();
        assert_eq!(spread.apex, Some(Tier::AllServing));
        assert!(!spread.local);
        assert_eq!(spread.names, Some(Tier::AllServing));
    }

    #[test]
    fn labels_are_distinct_and_in_order() {
        let labels: Vec<&str> = Tier::ALL.iter().map(|t| t.label()).collect();
        assert_eq!(labels, ["local", "all", "local_serving", "all_serving"]);
        assert!(
            Tier::ALL
                .iter()
                .all(|t| t.serving() == t.label().ends_with("serving"))
        );
    }
}
