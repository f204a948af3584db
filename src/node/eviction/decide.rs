//! kubelet's `synchronize` as one pure step over a snapshot: which thresholds are met (and,
//! while one stays met, met until its minimum reclaim is freed too), since when, which have
//! outlasted their grace periods, the node conditions (held for the pressure transition
//! period after their last sighting), and then, once per new reading of the starved signal,
//! what to do: reclaim node-level resources when the signal has any, and the one pod to
//! evict if that is not enough. The executor acts on the `Decision`; after a reclaim it
//! collects again and asks `reclaim_resolved` before it evicts.

use super::local::local_storage_evictions;
use super::messages::{eviction_message, threshold_met_message, THRESHOLD_MET_REASON};
use super::rank::{pick, protection, rank, ranking, Candidate, Protection};
use super::signals::{observe, NodeInfo, Observations};
use super::threshold::Threshold;
use super::{admit, Admission, Cause, Eviction, NodeConditions, Pressure, Resource, Signal};
use crate::api::Pod;
use crate::node::stats::Snapshot;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the eviction manager runs with (kubelet's `eviction.Config`).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Every threshold: hard, soft, and the allocatable copies (`parse_thresholds`).
    pub thresholds: Vec<Threshold>,
    /// How long a pressure condition stays true after its threshold was last met.
    pub pressure_transition_period: Duration,
    /// The longest grace period a pod evicted for a soft threshold gets; zero: its own.
    pub max_pod_grace_period: Duration,
}

/// One step's inputs.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The latest collection.
    pub snapshot: &'a Snapshot,
    /// Capacities and filesystem layout.
    pub node: &'a NodeInfo,
    /// The pods that may be evicted: every admitted pod neither terminated nor already
    /// being stopped (an evicted pod is left out until it is gone, as kubelet waits for it).
    pub pods: &'a [Arc<Pod>],
    /// The clock.
    pub now: SystemTime,
}

/// An event to record on the node (Warning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    /// The reason.
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

/// Node-level resources to free before any pod is evicted (kubelet's
/// `reclaimNodeLevelResources`): dead containers, then unused images.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reclaim {
    /// The starved signal. Dead containers go first (kubelet's `DeleteAllUnusedContainers`).
    pub signal: Signal,
    /// Then every image no container uses (kubelet's `DeleteUnusedImages`).
    pub unused_images: bool,
    /// How much has to be freed for the threshold and its minimum reclaim to be met again,
    /// in the resource's unit (bytes or inodes).
    pub to_free: u64,
}

/// What one step decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The node's pressure conditions now.
    pub conditions: NodeConditions,
    /// The conditions that changed in this step (kubelet records `NodeHas…` events).
    pub changed: Vec<Pressure>,
    /// Pods past their own storage limits (`emptyDir` `sizeLimit`, `ephemeral-storage`
    /// limits), to evict at once; when there are any, this step decides nothing else.
    pub local: Vec<Eviction>,
    /// The threshold acted on, if one is met, past its grace period, on a new reading.
    pub starved: Option<Signal>,
    /// Events to record on the node.
    pub events: Vec<NodeEvent>,
    /// Node-level resources to free first, if the signal has any.
    pub reclaim: Option<Reclaim>,
    /// The pod to evict: at once when there is no `reclaim`, else only if
    /// `reclaim_resolved` says the reclaim was not enough. `None` with `starved` set: no
    /// pod may be evicted.
    pub evict: Option<Eviction>,
}

/// The eviction manager's state between steps (kubelet's `managerImpl` fields).
#[derive(Clone, Debug)]
pub struct EvictionState {
    settings: Settings,
    /// Thresholds (indices into `settings.thresholds`) met past their grace periods and not
    /// yet resolved (kubelet's `thresholdsMet`).
    thresholds_met: Vec<usize>,
    /// When each threshold now met was first met (`thresholdsFirstObservedAt`).
    first_observed: Vec<(usize, SystemTime)>,
    /// When each condition's threshold was last met (`nodeConditionsLastObservedAt`).
    conditions_last_observed: BTreeMap<Pressure, SystemTime>,
    conditions: NodeConditions,
    /// The previous step's readings (`lastObservations`).
    last_observations: Observations,
}

impl EvictionState {
    /// A manager that starts at `started` with no pressure.
    pub fn new(settings: Settings, started: SystemTime) -> EvictionState {
        EvictionState {
            settings,
            thresholds_met: Vec::new(),
            first_observed: Vec::new(),
            conditions_last_observed: BTreeMap::new(),
            conditions: NodeConditions::calm(started),
            last_observations: Observations::new(),
        }
    }

    /// What it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The node's pressure conditions.
    pub fn conditions(&self) -> NodeConditions {
        self.conditions
    }

    /// kubelet's `Admit`, under the current conditions.
    pub fn admit(&self, pod: &Pod) -> Admission {
        admit(&self.conditions, pod)
    }

    /// One step of kubelet's `synchronize`.
    pub fn synchronize(&mut self, input: &Inputs) -> Decision {
        let mut decision = Decision {
            conditions: self.conditions,
            changed: Vec::new(),
            local: Vec::new(),
            starved: None,
            events: Vec::new(),
            reclaim: None,
            evict: None,
        };
        let order = self.observe_thresholds(input, &mut decision);
        // Pods past their own limits go first, and alone (kubelet's localStorageEviction).
        let evictable: Vec<&Pod> =
            input.pods.iter().map(|p| &**p).filter(|p| protection(p) != Protection::Never).collect();
        decision.local = local_storage_evictions(&evictable, &input.snapshot.pods, input.node.dedicated_image_fs);
        if !decision.local.is_empty() {
            return decision;
        }
        let all = &self.settings.thresholds;
        let obs = &self.last_observations;
        let Some(&first) = order.first() else { return decision };
        let threshold = &all[first];
        let (signal, resource) = (threshold.signal, threshold.signal.resource());
        decision.starved = Some(signal);
        decision.events.push(NodeEvent { reason: THRESHOLD_MET_REASON, message: threshold_met_message(resource) });
        decision.reclaim = reclaim(threshold, obs, input.node);

        let stats: BTreeMap<&str, _> = input.snapshot.pods.iter().map(|s| (s.uid.as_str(), s)).collect();
        let mut candidates: Vec<Candidate> = input
            .pods
            .iter()
            .map(|p| Candidate { pod: p, stats: stats.get(p.metadata.uid.as_str()).copied() })
            .collect();
        rank(ranking(signal, input.node.dedicated_image_fs), &mut candidates);
        if let Some(c) = pick(&candidates) {
            let used: Vec<&Threshold> = order.iter().map(|&i| &all[i]).collect();
            let (message, annotations) = eviction_message(resource, c.pod, c.stats, &used, obs);
            decision.evict = Some(Eviction {
                uid: c.pod.metadata.uid.clone(),
                pod: c.pod.key(),
                cause: Cause::Threshold(signal),
                grace: grace_period(threshold, c.pod, self.settings.max_pod_grace_period),
                message,
                annotations,
            });
        }
        decision
    }

    /// The threshold half of a step: the readings, the thresholds met, the conditions (into
    /// `decision`), the state kept for the next step; returns the thresholds to act on, in
    /// eviction order.
    fn observe_thresholds(&mut self, input: &Inputs, decision: &mut Decision) -> Vec<usize> {
        let now = input.now;
        let all = &self.settings.thresholds;
        if all.is_empty() {
            return Vec::new();
        }
        let obs = observe(input.snapshot, input.node);
        let mut met = thresholds_met(all, 0..all.len(), &obs, false);
        if !self.thresholds_met.is_empty() {
            // Met before: stays met until the minimum reclaim is freed as well.
            let unresolved = thresholds_met(all, self.thresholds_met.iter().copied(), &obs, true);
            met = merge(met, unresolved);
        }
        let first_observed = first_observed_at(&met, &self.first_observed, now);
        let seen = node_conditions(all, &met);
        let last_observed = conditions_last_observed_at(&seen, &self.conditions_last_observed, now);
        let active = observed_since(&last_observed, self.settings.pressure_transition_period, now);
        let past_grace = met_grace_period(all, &first_observed, now);

        for p in Pressure::ALL {
            let on = active.contains(&p);
            let c = self.conditions.get_mut(p);
            if c.pressure != on {
                *c = super::ConditionState { pressure: on, since: now };
                decision.changed.push(p);
            }
        }
        decision.conditions = self.conditions;
        self.first_observed = first_observed;
        self.conditions_last_observed = last_observed;
        let updated = updated_stats(all, &past_grace, &obs, &self.last_observations);
        self.thresholds_met = past_grace;
        self.last_observations = obs;
        eviction_order(all, updated)
    }

    /// After a reclaim, whether the new readings meet no threshold, minimum reclaims
    /// included, so no pod need be evicted (kubelet's check in `reclaimNodeLevelResources`).
    pub fn reclaim_resolved(&self, snapshot: &Snapshot, node: &NodeInfo) -> bool {
        let all = &self.settings.thresholds;
        thresholds_met(all, 0..all.len(), &observe(snapshot, node), true).is_empty()
    }
}

/// kubelet's `thresholdsMet`: which of `candidates` (indices into `all`) `obs` meets;
/// a threshold without a reading is not met.
pub fn thresholds_met(
    all: &[Threshold],
    candidates: impl IntoIterator<Item = usize>,
    obs: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<usize> {
    candidates
        .into_iter()
        .filter(|&i| obs.get(&all[i].signal).is_some_and(|o| all[i].met(o.available, o.capacity, enforce_min_reclaim)))
        .collect()
}

/// kubelet's `mergeThresholds`: `a`, then what of `b` is not in it.
fn merge(mut a: Vec<usize>, b: Vec<usize>) -> Vec<usize> {
    for i in b {
        if !a.contains(&i) {
            a.push(i);
        }
    }
    a
}

/// kubelet's `thresholdsFirstObservedAt`: when each of `met` was first met, `now` for the
/// newly met; thresholds no longer met are forgotten.
pub fn first_observed_at(met: &[usize], last: &[(usize, SystemTime)], now: SystemTime) -> Vec<(usize, SystemTime)> {
    met.iter().map(|&i| (i, last.iter().find(|(j, _)| *j == i).map_or(now, |(_, at)| *at))).collect()
}

/// kubelet's `thresholdsMetGracePeriod`: the thresholds met for at least their grace period.
pub fn met_grace_period(all: &[Threshold], first_observed: &[(usize, SystemTime)], now: SystemTime) -> Vec<usize> {
    first_observed
        .iter()
        .filter(|(i, at)| now.duration_since(*at).unwrap_or_default() >= all[*i].grace_period)
        .map(|(i, _)| *i)
        .collect()
}

/// kubelet's `nodeConditions`: the conditions `met` thresholds drive, in the node's order.
pub fn node_conditions(all: &[Threshold], met: &[usize]) -> Vec<Pressure> {
    Pressure::ALL.into_iter().filter(|p| met.iter().any(|&i| all[i].signal.pressure() == *p)).collect()
}

/// kubelet's `nodeConditionsLastObservedAt`: `seen` now, the others when last seen.
pub fn conditions_last_observed_at(
    seen: &[Pressure],
    last: &BTreeMap<Pressure, SystemTime>,
    now: SystemTime,
) -> BTreeMap<Pressure, SystemTime> {
    let mut out = last.clone();
    for p in seen {
        out.insert(*p, now);
    }
    out
}

/// kubelet's `nodeConditionsObservedSince`: the conditions seen less than `period` ago.
pub fn observed_since(last: &BTreeMap<Pressure, SystemTime>, period: Duration, now: SystemTime) -> Vec<Pressure> {
    last.iter().filter(|(_, at)| now.duration_since(**at).unwrap_or_default() < period).map(|(p, _)| *p).collect()
}

/// kubelet's `thresholdsUpdatedStats`: the thresholds whose signal was read anew since the
/// last step (or has no time), so one reading is never acted on twice.
pub fn updated_stats(all: &[Threshold], met: &[usize], obs: &Observations, last: &Observations) -> Vec<usize> {
    met.iter()
        .copied()
        .filter(|&i| {
            let Some(o) = obs.get(&all[i].signal) else { return false };
            match (o.time, last.get(&all[i].signal).and_then(|l| l.time)) {
                (None, _) | (Some(_), None) => true,
                (Some(t), Some(l)) => t > l,
            }
        })
        .collect()
}

/// kubelet's `byEvictionPriority`: memory first, the rest in their order.
pub fn eviction_order(all: &[Threshold], mut met: Vec<usize>) -> Vec<usize> {
    met.sort_by_key(|&i| all[i].signal.resource() != Resource::Memory);
    met
}

/// kubelet's `buildSignalToNodeReclaimFuncs` (no split container filesystem): disk signals
/// reclaim dead containers and unused images, except `nodefs.*` with a dedicated image
/// filesystem (neither lives there); memory and PIDs have nothing to reclaim. The process
/// runtime has no images.
pub fn reclaim(threshold: &Threshold, obs: &Observations, node: &NodeInfo) -> Option<Reclaim> {
    let signal = threshold.signal;
    let disk = matches!(signal.resource(), Resource::EphemeralStorage | Resource::Inodes);
    if !disk || (node.dedicated_image_fs && !signal.is_image_fs()) {
        return None;
    }
    let to_free = obs.get(&signal).map_or(0, |o| {
        let mut want = threshold.value.quantity(o.capacity).value();
        if let Some(min) = &threshold.min_reclaim {
            want = want.saturating_add(min.quantity(o.capacity).value());
        }
        u64::try_from(want.saturating_sub(o.available)).unwrap_or(0)
    });
    Some(Reclaim { signal, unused_images: node.images, to_free })
}

/// The grace period of a pod evicted for `threshold`: 0 for a hard threshold; else the
/// pod's own, capped by `max` unless `max` is zero (kubelet's `evictionMaxPodGracePeriod`
/// of 0 leaves the pod's own).
pub fn grace_period(threshold: &Threshold, pod: &Pod, max: Duration) -> Duration {
    if threshold.is_hard() {
        return Duration::ZERO;
    }
    let own = pod.spec.termination_grace();
    if max.is_zero() {
        own
    } else {
        own.min(max)
    }
}
