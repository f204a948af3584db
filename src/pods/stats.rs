//! Which pods the stats thread measures, and where: a pure function from what the pod manager
//! publishes (each pod's spec and last status in the `StatusCache`) to `node::stats`' plain
//! `PodTarget`s. A pod counts while it runs (its phase is `Running`, or a container of it
//! runs); its running containers (init and sidecar containers too) by the ids and start
//! times of its status; its cgroups where `cm` puts them (a container's under its pod's: by
//! name on the process runtime, by id on a CRI runtime with the cgroupfs driver, as
//! containerd names it); its container logs where the pod manager has them written; its
//! `emptyDir`s on disk (not `medium: Memory`, a tmpfs) where `pods::dir` makes them.

use super::actor::pod_log_dir;
use super::dir::PodDir;
use crate::api::fields::RuntimeKind;
use crate::api::{ContainerStatus, Pod, PodPhase, PodStatus};
use crate::node::cm::{pod_path, CmSettings};
use crate::node::stats::target::{ContainerTarget, PodTarget, VolumeTarget};
use std::path::PathBuf;
use std::sync::Arc;

/// Where a pod's parts are on this node.
#[derive(Clone, Debug)]
pub struct TargetSettings {
    /// The cgroup layout, when pod cgroups are on.
    pub cgroups: Option<CmSettings>,
    /// Where the pods' log directories are (`Config::pod_logs_dir`).
    pub log_root: PathBuf,
    /// Where the pods' own directories are (`<state_dir>/pods`).
    pub pods_root: PathBuf,
    /// The runtime (how container cgroups are named).
    pub runtime: RuntimeKind,
}

/// The running container of a status: its id without the scheme (`containerd://`), and when
/// it started.
fn running(c: &ContainerStatus) -> Option<(&str, Option<std::time::SystemTime>)> {
    let run = c.state.running.as_ref()?;
    let id = c.container_id.split_once("://").map_or(c.container_id.as_str(), |(_, id)| id);
    (!id.is_empty()).then(|| (id, run.started_at.map(|t| t.0)))
}

/// What the stats thread measures of `pod`, given its last `status`; `None` when it does not
/// run.
pub fn pod_target(pod: &Pod, status: &PodStatus, s: &TargetSettings) -> Option<PodTarget> {
    let all = || status.init_container_statuses.iter().chain(&status.container_statuses);
    let runs = status.phase == PodPhase::Running || all().any(|c| running(c).is_some());
    if !runs {
        return None;
    }
    let cgroup = s.cgroups.as_ref().map(|cm| pod_path(cm, pod));
    let logs = pod_log_dir(&s.log_root, pod);
    let containers = all()
        .filter_map(|c| {
            let (id, start_time) = running(c)?;
            let leaf = match s.runtime {
                RuntimeKind::Process => c.name.as_str(),
                RuntimeKind::Cri => id,
            };
            Some(ContainerTarget {
                name: c.name.clone(),
                id: id.to_string(),
                start_time,
                cgroup: cgroup.as_ref().map(|p| format!("{p}/{leaf}")),
                log_dir: Some(logs.join(&c.name)),
            })
        })
        .collect();
    let dir = PodDir::new(&s.pods_root, &pod.metadata.uid);
    let volumes = pod
        .spec
        .volumes
        .iter()
        .filter(|v| v.empty_dir.as_ref().is_some_and(|e| e.medium != "Memory"))
        .map(|v| VolumeTarget { name: v.name.clone(), path: dir.volume_path(v) })
        .collect();
    Some(PodTarget {
        uid: pod.metadata.uid.clone(),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        start_time: status.start_time.map(|t| t.0),
        cgroup,
        containers,
        volumes,
    })
}

/// What the stats thread measures: every running pod of `pods` (the `StatusCache`'s), sorted
/// by namespace and name.
pub fn targets(pods: &[(Arc<Pod>, Arc<PodStatus>)], s: &TargetSettings) -> Vec<PodTarget> {
    let mut out: Vec<PodTarget> = pods.iter().filter_map(|(p, st)| pod_target(p, st, s)).collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::decode_pods;
    use crate::api::{ContainerState, ContainerStateRunning, Time};
    use std::path::Path;
    use std::time::{Duration, UNIX_EPOCH};

    fn pod(yaml_spec: &str) -> Pod {
        let y = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: shop\n  uid: u1\nspec:\n{yaml_spec}"
        );
        decode_pods("t.yaml", &y).remove(0).unwrap()
    }

    fn status(name: &str, id: &str, started: Option<u64>) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: id.into(),
            state: ContainerState {
                running: started
                    .map(|s| ContainerStateRunning { started_at: Some(Time(UNIX_EPOCH + Duration::from_secs(s))) }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn settings(runtime: RuntimeKind, cgroups: bool) -> TargetSettings {
        TargetSettings {
            cgroups: cgroups.then(|| CmSettings { root: "/ferrolet".into(), ..Default::default() }),
            log_root: "/var/log/pods".into(),
            pods_root: "/var/lib/ferrolet/pods".into(),
            runtime,
        }
    }

    const SPEC: &str = "  initContainers:\n  - name: side\n    image: x\n    restartPolicy: Always\n  containers:\n  - name: app\n    image: x\n    resources:\n      requests: {memory: 10Mi}\n  - name: done\n    image: x\n  volumes:\n  - name: cache\n    emptyDir: {}\n  - name: ram\n    emptyDir: {medium: Memory}\n  - name: conf\n    configMap: {name: c}\n";

    #[test]
    fn a_running_pod_is_measured_with_its_running_containers_cgroups_logs_and_disk_volumes() {
        let p = pod(SPEC);
        let st = PodStatus {
            phase: PodPhase::Running,
            start_time: Some(Time(UNIX_EPOCH + Duration::from_secs(5))),
            init_container_statuses: vec![status("side", "process://s1", Some(6))],
            container_statuses: vec![status("app", "process://a1", Some(7)), status("done", "process://d1", None)],
            ..Default::default()
        };
        let t = pod_target(&p, &st, &settings(RuntimeKind::Process, true)).unwrap();
        assert_eq!((t.uid.as_str(), t.name.as_str(), t.namespace.as_str()), ("u1", "web", "shop"));
        assert_eq!(t.start_time, Some(UNIX_EPOCH + Duration::from_secs(5)));
        assert_eq!(t.cgroup.as_deref(), Some("/ferrolet/kubepods/burstable/podu1"));
        let names: Vec<(&str, &str, Option<&str>)> =
            t.containers.iter().map(|c| (c.name.as_str(), c.id.as_str(), c.cgroup.as_deref())).collect();
        assert_eq!(
            names,
            [
                ("side", "s1", Some("/ferrolet/kubepods/burstable/podu1/side")),
                ("app", "a1", Some("/ferrolet/kubepods/burstable/podu1/app")),
            ],
            "the exited container is not measured"
        );
        assert_eq!(t.containers[1].start_time, Some(UNIX_EPOCH + Duration::from_secs(7)));
        assert_eq!(t.containers[1].log_dir.as_deref(), Some(Path::new("/var/log/pods/shop_web_u1/app")));
        assert_eq!(t.volumes.len(), 1, "the memory emptyDir and the configMap are not disk");
        assert_eq!(t.volumes[0].name, "cache");
        assert_eq!(t.volumes[0].path, Path::new("/var/lib/ferrolet/pods/u1/volumes/kubernetes.io~empty-dir/cache"));
    }

    #[test]
    fn on_cri_a_container_cgroup_is_named_by_its_id_and_without_pod_cgroups_there_are_none() {
        let p = pod(SPEC);
        let st = PodStatus {
            phase: PodPhase::Pending,
            init_container_statuses: vec![status("side", "containerd://abc123", Some(6))],
            ..Default::default()
        };
        let t = pod_target(&p, &st, &settings(RuntimeKind::Cri, true)).unwrap();
        assert_eq!(t.containers[0].id, "abc123");
        assert_eq!(t.containers[0].cgroup.as_deref(), Some("/ferrolet/kubepods/burstable/podu1/abc123"));
        let t = pod_target(&p, &st, &settings(RuntimeKind::Cri, false)).unwrap();
        assert_eq!((t.cgroup, t.containers[0].cgroup.clone()), (None, None), "the runtime's numbers then");
    }

    #[test]
    fn a_pod_that_does_not_run_is_not_measured() {
        let p = pod(SPEC);
        let s = settings(RuntimeKind::Process, true);
        for phase in [PodPhase::Pending, PodPhase::Succeeded, PodPhase::Failed] {
            let st = PodStatus {
                phase,
                container_statuses: vec![status("app", "process://a1", None)],
                ..Default::default()
            };
            assert_eq!(pod_target(&p, &st, &s), None, "{phase:?}");
        }
        // Running with every container restarting (back-off): its cgroup is still there.
        let st = PodStatus { phase: PodPhase::Running, ..Default::default() };
        assert!(pod_target(&p, &st, &s).is_some_and(|t| t.containers.is_empty()));
        let a = (Arc::new(pod(SPEC)), Arc::new(st.clone()));
        let mut other = pod(SPEC);
        other.metadata.name = "api".into();
        other.metadata.uid = "u2".into();
        let b = (Arc::new(other), Arc::new(st));
        let names: Vec<String> = targets(&[a, b], &s).into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["api", "web"]);
    }
}
