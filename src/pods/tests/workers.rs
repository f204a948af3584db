//! The pod workers as the pod manager drives them: each pod's runtime calls are one work,
//! held here until the test answers it as a worker thread would (`PodsCommand::Work`), in
//! any order. A pod with work in flight is not synced; its answer syncs it again; the
//! workers are never handed more than they take, and what needs no worker never waits for
//! one.

use super::*;
use crate::base::manager::JobError;
use crate::pods::workers::{self, PodWork, WorkSink};
use parking_lot::Mutex;

/// Keeps every work submitted until the test runs it; holds at most `capacity`.
struct Held {
    works: Mutex<Vec<PodWork>>,
    capacity: usize,
}

impl WorkSink for Held {
    fn submit(&self, work: PodWork) -> Result<(), JobError> {
        let mut works = self.works.lock();
        assert!(works.len() < self.capacity, "the pod manager asked past the workers' capacity");
        assert!(works.iter().all(|w| w.uid != work.uid), "two works in flight for pod {}", work.uid);
        works.push(work);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

impl Held {
    /// The pods whose work is held, in the order it came.
    fn pods(&self) -> Vec<String> {
        self.works.lock().iter().map(|w| w.uid.trim_start_matches("uid-").to_string()).collect()
    }

    /// What the work of pod `name` asks.
    fn asks(&self, name: &str) -> String {
        let works = self.works.lock();
        works.iter().find(|w| w.uid == format!("uid-{name}")).map(PodWork::describe).unwrap_or_default()
    }
}

/// A node whose pod manager hands its works to a `Held` of `capacity`.
fn node_with_workers(capacity: usize) -> (Node, Arc<Held>) {
    let node = Node::new();
    let held = Arc::new(Held { works: Mutex::default(), capacity });
    let pm = node.pm.with_workers(held.clone());
    (Node { pm, ..node }, held)
}

/// A worker thread makes pod `name`'s work and answers; the manager's loop then syncs.
fn answer(node: &mut Node, held: &Held, name: &str) {
    let work = {
        let mut works = held.works.lock();
        let i = works.iter().position(|w| w.uid == format!("uid-{name}")).expect("the pod has work in flight");
        works.remove(i)
    };
    let done = workers::run(&*node.rt, work, &|| false);
    node.pm.handle(PodsCommand::from(done));
    assert!(node.pm.next_deadline().is_some(), "an answer asks for a sync");
    node.pm.on_deadline();
}

fn web(name: &str) -> Pod {
    pod(name, RestartPolicy::Always, &[], &[app("web")])
}

#[test]
fn pods_written_at_once_get_their_sandboxes_side_by_side_and_each_its_containers_after_its_answer() {
    let (mut node, held) = node_with_workers(8);
    let (a, b, c) = (web("a"), web("b"), web("c"));
    node.apply(&[&a, &b, &c]);
    assert_eq!(node.calls(), [], "nothing is made on the sync thread");
    assert_eq!(held.pods(), ["a", "b", "c"]);
    assert_eq!(held.asks("a"), "a sandbox");
    // Answers come in any order; each pod goes on alone.
    answer(&mut node, &held, "b");
    assert_eq!(node.calls(), [Call::RunPodSandbox("b".into())]);
    assert_eq!(held.pods(), ["a", "c", "b"], "b's containers follow its sandbox; a and c still wait");
    assert_eq!(held.asks("b"), "1 container start(s)");
    answer(&mut node, &held, "b");
    assert_eq!(node.calls(), [create("web", 0), start("web")]);
    assert_eq!(node.phase(&b), PodPhase::Running);
    assert_eq!(node.reasons(), ["Created", "Started"]);
    assert_eq!(node.phase(&a), PodPhase::Pending);
    for name in ["a", "c", "a", "c"] {
        answer(&mut node, &held, name);
    }
    assert!(held.pods().is_empty());
    assert_eq!([node.phase(&a), node.phase(&c)], [PodPhase::Running, PodPhase::Running]);
    assert_eq!(node.rt.sandboxes().len(), 3, "one sandbox each");
}

#[test]
fn a_pod_with_work_in_flight_is_not_synced_again_until_its_answer() {
    let (mut node, held) = node_with_workers(8);
    let a = web("a");
    node.apply(&[&a]);
    for _ in 0..3 {
        node.advance(1);
        node.tick();
    }
    assert_eq!((held.pods(), node.calls()), (vec!["a".to_string()], vec![]), "one work, asked once");
    answer(&mut node, &held, "a");
    assert_eq!(held.asks("a"), "1 container start(s)");
    node.tick();
    assert_eq!(held.pods(), ["a"], "still one");
}

#[test]
fn a_pod_removed_while_its_sandbox_is_made_is_removed_after_the_answer_and_nothing_is_left() {
    let (mut node, held) = node_with_workers(8);
    let a = web("a");
    node.apply(&[&a]);
    node.apply(&[]);
    node.tick();
    assert_eq!(held.pods(), ["a"], "its termination waits for the sandbox");
    assert!(node.statuses.status(&a.metadata.uid).is_some(), "not forgotten meanwhile");
    answer(&mut node, &held, "a");
    assert_eq!(held.asks("a"), "its removal", "no container is started in a pod being removed");
    answer(&mut node, &held, "a");
    assert_eq!(
        node.calls(),
        [Call::RunPodSandbox("a".into()), Call::StopPodSandbox("a".into()), Call::RemovePodSandbox("a".into())]
    );
    assert!(node.rt.sandboxes().is_empty() && node.rt.containers().is_empty());
    assert!(node.statuses.status(&a.metadata.uid).is_none(), "forgotten once removed");
    node.tick();
    assert!(held.pods().is_empty(), "no orphan is found after it");
}

#[test]
fn with_every_worker_busy_a_pod_waits_for_room_and_one_already_begun_goes_first() {
    let (mut node, held) = node_with_workers(2);
    let (a, b, c) = (web("a"), web("b"), web("c"));
    node.apply(&[&a, &b, &c]);
    assert_eq!(held.pods(), ["a", "b"], "c waits for room");
    node.tick();
    assert_eq!(held.pods(), ["a", "b"]);
    answer(&mut node, &held, "a");
    assert_eq!(held.pods(), ["b", "a"], "a's containers take the room before c");
    answer(&mut node, &held, "a");
    assert_eq!(held.pods(), ["b", "c"]);
    assert_eq!(held.asks("c"), "a sandbox");
    for name in ["b", "c", "b", "c"] {
        answer(&mut node, &held, name);
    }
    assert_eq!(node.rt.running().len(), 3);
}

#[test]
fn a_failed_sandbox_answers_with_its_event_and_the_next_waits_out_the_back_off() {
    let (mut node, held) = node_with_workers(8);
    let a = web("a");
    node.rt.fail_sandboxes(1);
    node.apply(&[&a]);
    answer(&mut node, &held, "a");
    assert_eq!(node.reasons(), ["FailedCreatePodSandBox"]);
    // The failed one is left not ready; a new one waits 10 s, and replaces it.
    node.advance(5);
    node.tick();
    assert!(held.pods().is_empty(), "nothing asked within the back-off");
    node.advance(6);
    node.tick();
    assert_eq!(held.asks("a"), "a sandbox in place of its dead one");
    answer(&mut node, &held, "a");
    assert_eq!(node.rt.sandboxes().len(), 1, "the dead one went first");
}

#[test]
fn a_post_start_hook_starts_with_the_answer_and_holds_back_the_next_container() {
    use crate::api::{ExecAction, Lifecycle, LifecycleHandler};
    use crate::node::lifecycle::{HookError, HookRequest, HookSink};

    #[derive(Default)]
    struct Hooks(Mutex<Vec<String>>);
    impl HookSink for Hooks {
        fn submit(&self, req: HookRequest) -> Result<(), HookError> {
            self.0.lock().push(req.container.name.clone());
            Ok(())
        }
    }
    let (node, held) = node_with_workers(8);
    let hooks = Arc::new(Hooks::default());
    let mut node = Node { pm: node.pm.with_hooks(hooks.clone()), ..node };
    let hook = LifecycleHandler { exec: Some(ExecAction { command: vec!["hook".into()] }), ..Default::default() };
    let first = Container { lifecycle: Some(Lifecycle { post_start: Some(hook), pre_stop: None }), ..app("first") };
    let a = pod("a", RestartPolicy::Always, &[], &[first, app("second")]);
    node.apply(&[&a]);
    answer(&mut node, &held, "a");
    assert_eq!(held.asks("a"), "1 container start(s)", "the second waits for the first's hook");
    assert!(hooks.0.lock().is_empty(), "not before the container runs");
    answer(&mut node, &held, "a");
    assert_eq!(*hooks.0.lock(), ["first"]);
    assert!(held.pods().is_empty(), "nothing else starts while the hook runs");
}

#[test]
fn a_pod_that_asks_nothing_of_the_workers_is_synced_while_they_are_busy() {
    let (mut node, held) = node_with_workers(1);
    let a = web("a");
    node.apply(&[&a]);
    answer(&mut node, &held, "a");
    answer(&mut node, &held, "a");
    node.calls();
    let b = web("b");
    node.apply(&[&a, &b]);
    assert_eq!(held.pods(), ["b"], "b's sandbox takes the only worker");
    node.advance(1);
    node.tick();
    assert_eq!(node.calls(), []);
    // a is removed from its source: its stop is asked at once (stops are not a worker's).
    node.apply(&[&b]);
    assert_eq!(node.calls(), [stop("web", 30)], "a's stop while b's sandbox is being made");
    answer(&mut node, &held, "b");
    assert_eq!(held.pods(), ["a"], "a (begun) is removed before b's containers start");
    assert_eq!(held.asks("a"), "its removal");
}

#[test]
fn a_pod_waiting_for_a_worker_or_for_its_sandbox_has_its_images_pulled_meanwhile_and_said_only_when_used() {
    let (node, held) = node_with_workers(1);
    let (mut node, pulls) = node.with_images();
    node.rt.add_image("busybox:1.36", 10);
    let with_image = |name: &str, image: &str| {
        let c = Container { image: image.into(), image_pull_policy: "IfNotPresent".into(), ..app("web") };
        pod(name, RestartPolicy::Always, &[], &[c])
    };
    let (a, b, c) = (with_image("a", "busybox:1.36"), with_image("b", "app:1"), with_image("c", "app:2"));
    node.apply(&[&a, &b, &c]);
    assert_eq!(held.pods(), ["a"], "one worker: a's sandbox");
    // b and c wait for the worker, their pulls do not; a's image is there and not yet used.
    let requested: Vec<String> = pulls.try_iter().map(|r| r.image).collect();
    assert_eq!(requested, ["app:1", "app:2"]);
    assert_eq!(node.reasons(), ["Pulling", "Pulling"]);
    answer(&mut node, &held, "a");
    assert_eq!(held.asks("a"), "1 container start(s)");
    assert_eq!(node.reasons(), ["Pulled"], "said when a's container is started");
    node.tick();
    assert_eq!((node.reasons(), pulls.try_iter().count()), (vec![], 0), "each pull asked and said once");
}

#[test]
fn a_pod_waiting_for_a_worker_has_its_images_looked_at_once_not_at_every_sync() {
    let (node, held) = node_with_workers(1);
    let (mut node, pulls) = node.with_images();
    node.rt.add_image("busybox:1.36", 10);
    let c = Container { image: "busybox:1.36".into(), image_pull_policy: "IfNotPresent".into(), ..app("web") };
    let (a, b) =
        (pod("a", RestartPolicy::Always, &[], std::slice::from_ref(&c)), pod("b", RestartPolicy::Always, &[], &[c]));
    node.apply(&[&a, &b]);
    let looks = |node: &Node| node.pm.images.as_ref().map(|i| i.tracked().2);
    assert_eq!(looks(&node), Some(3), "a's container (its sandbox is being made), b's sandbox and container");
    for _ in 0..3 {
        node.tick();
    }
    assert_eq!(looks(&node), Some(3));
    answer(&mut node, &held, "a");
    assert_eq!(looks(&node), Some(2), "a's start looked for itself");
    assert_eq!(pulls.try_iter().count(), 0);
}
