//! Images: kubelet's `imagePullPolicy` with its events and waiting reasons, pull back-off,
//! and pulls that never hold up the sync (answered here by the test, as the pull threads
//! would answer).

use super::*;
use crate::node::images::{PullDone, PullRequest, Pulled};
use crate::node::runtime::RuntimeError;

/// A container of `image` with `policy`.
fn with_image(name: &str, image: &str, policy: &str) -> Container {
    Container { image: image.into(), image_pull_policy: policy.into(), ..app(name) }
}

/// The images asked for since the last look.
fn requested(pulls: &Receiver<PullRequest>) -> Vec<String> {
    pulls.try_iter().map(|r| r.image).collect()
}

/// The pull threads' answer: `image` pulled in 1.5 s, 100 bytes.
fn pulled(image: &str) -> PodsCommand {
    let result = Ok(Pulled { image_ref: format!("sha256:{image}"), size: 100 });
    PodsCommand::Images(PullDone {
        image: image.into(),
        key: image.into(),
        result,
        pull_time: Duration::from_millis(1500),
    })
}

/// The pull threads' answer: the pull of `image` failed.
fn pull_failed(image: &str) -> PodsCommand {
    let source = std::io::Error::other("connection refused");
    let result = Err(RuntimeError::Process { action: format!("pulling {image}"), source });
    PodsCommand::Images(PullDone {
        image: image.into(),
        key: image.into(),
        result,
        pull_time: Duration::from_millis(3),
    })
}

fn ev(reason: &str, message: &str) -> (String, String) {
    (reason.into(), message.into())
}

#[test]
fn if_not_present_with_the_image_present_starts_without_a_pull() {
    let (mut node, pulls) = Node::new().with_images();
    node.rt.add_image("busybox:1.36", 10);
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "busybox:1.36", "IfNotPresent")]);
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), Vec::<String>::new());
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("app", 0), start("app")]);
    assert_eq!(
        node.events(),
        [
            ev("Pulled", "Container image \"busybox:1.36\" already present on machine"),
            ev("Created", "Created container app"),
            ev("Started", "Started container app"),
        ]
    );
}

#[test]
fn never_with_the_image_absent_waits_as_err_image_never_pull_until_it_is_imported() {
    let (mut node, pulls) = Node::new().with_images();
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "local/app:1", "Never")]);
    node.apply(&[&web]);
    let text = "Container image \"local/app:1\" is not present with pull policy of Never";
    assert_eq!(node.events(), [ev("ErrImageNeverPull", text), ev("Failed", "Error: ErrImageNeverPull")]);
    assert_eq!(node.waiting(&web, "app"), Some(("ErrImageNeverPull".into(), text.into())));
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into())]);
    node.advance(5);
    node.tick();
    assert_eq!((node.events(), node.calls()), (vec![], vec![]), "reported once, not at every sync");
    // Imported meanwhile: the next sync starts it.
    node.rt.add_image("local/app:1", 10);
    node.tick();
    assert_eq!(node.calls(), [create("app", 0), start("app")]);
    assert_eq!(node.reasons(), ["Pulled", "Created", "Started"]);
    assert_eq!(node.waiting(&web, "app"), None);
    assert_eq!(requested(&pulls), Vec::<String>::new(), "Never never pulls");
}

#[test]
fn an_image_name_that_does_not_parse_is_invalid_image_name_without_a_runtime_call() {
    let (mut node, pulls) = Node::new().with_images();
    let forged = "busybox\n2026-01-01T00:00:00.000Z [ERROR] forged";
    let huge = "a".repeat(4096);
    let web = pod(
        "web",
        RestartPolicy::Always,
        &[],
        &[
            with_image("app", "Local/Busy Box::x@@", "IfNotPresent"),
            with_image("log", forged, ""),
            with_image("big", &huge, ""),
        ],
    );
    node.apply(&[&web]);
    let text = "Failed to apply default image tag \"Local/Busy Box::x@@\": couldn't parse image name \"Local/Busy Box::x@@\": invalid reference format";
    assert_eq!(node.waiting(&web, "app"), Some(("InvalidImageName".into(), text.into())));
    assert_eq!(node.waiting(&web, "log").unwrap().0, "InvalidImageName");
    let big = node.waiting(&web, "big").unwrap();
    assert!(big.1.ends_with("repository name must not be more than 255 characters"), "{}", big.1);
    assert_eq!(node.events()[..2], [ev("InspectFailed", text), ev("Failed", "Error: InvalidImageName")]);
    assert_eq!(requested(&pulls), Vec::<String>::new(), "nothing pulled");
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into())], "nothing asked of the runtime for them");
    node.advance(5);
    node.tick();
    assert_eq!((node.events(), node.calls()), (vec![], vec![]), "reported once, not at every sync");
}

#[test]
fn an_absent_image_is_pulled_off_the_sync_and_the_container_starts_on_the_answer() {
    let (mut node, pulls) = Node::new().with_images();
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "app:1", "IfNotPresent")]);
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), ["app:1"]);
    assert_eq!(node.events(), [ev("Pulling", "Pulling image \"app:1\"")]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into())], "nothing is created while it is pulled");
    assert_eq!(node.waiting(&web, "app"), Some(("ContainerCreating".into(), String::new())));
    node.advance(3);
    node.tick();
    assert_eq!((requested(&pulls), node.events(), node.calls()), (vec![], vec![], vec![]), "one pull, asked once");
    node.rt.add_image("app:1", 100);
    node.pm.handle(pulled("app:1"));
    // The answer asks for a sync, run when the queue is empty.
    node.pm.on_deadline();
    assert_eq!(node.calls(), [create("app", 0), start("app")]);
    assert_eq!(
        node.events(),
        [
            ev("Pulled", "Successfully pulled image \"app:1\" in 1.5s (3s including waiting). Image size: 100 bytes."),
            ev("Created", "Created container app"),
            ev("Started", "Started container app"),
        ]
    );
}

#[test]
fn a_failed_pull_waits_as_err_image_pull_then_backs_off_from_10s_doubling() {
    let (mut node, pulls) = Node::new().with_images();
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "127.0.0.1:1/nothing:1", "")]);
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), ["127.0.0.1:1/nothing:1"], "a tag other than latest: IfNotPresent, absent");
    node.events();
    node.pm.handle(pull_failed("127.0.0.1:1/nothing:1"));
    let cause = "pulling 127.0.0.1:1/nothing:1 failed: connection refused";
    assert_eq!(
        node.events(),
        [
            ev("Failed", &format!("Failed to pull image \"127.0.0.1:1/nothing:1\": {cause}")),
            ev("Failed", "Error: ErrImagePull"),
        ]
    );
    node.pm.on_deadline();
    // The status shows the failure until the next sync, which sees the back-off.
    assert_eq!(
        node.events(),
        [ev("BackOff", "Back-off pulling image \"127.0.0.1:1/nothing:1\""), ev("Failed", "Error: ImagePullBackOff")]
    );
    let want = format!("Back-off pulling image \"127.0.0.1:1/nothing:1\": ErrImagePull: {cause}");
    assert_eq!(node.waiting(&web, "app"), Some(("ImagePullBackOff".into(), want)));
    // Retried after 10 s, then 20 s, then 40 s; nothing is reported in between.
    for delay in [10, 20, 40] {
        node.advance(delay - 1);
        node.tick();
        assert_eq!((requested(&pulls), node.events()), (vec![], vec![]), "still backing off {delay}s");
        node.advance(1);
        node.tick();
        assert_eq!(requested(&pulls), ["127.0.0.1:1/nothing:1"], "pulled again after {delay}s");
        assert_eq!(node.reasons(), ["Pulling"]);
        node.pm.handle(pull_failed("127.0.0.1:1/nothing:1"));
        node.pm.on_deadline();
        assert_eq!(node.reasons(), ["Failed", "Failed", "BackOff", "Failed"]);
    }
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into())], "no container is created meanwhile");
}

#[test]
fn always_pulls_a_present_image_and_starts_on_the_answer() {
    let (mut node, pulls) = Node::new().with_images();
    node.rt.add_image("busybox", 10);
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "busybox", "")]);
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), ["busybox"], "no tag: Always, which pulls even a present image");
    node.pm.handle(pulled("busybox"));
    node.pm.on_deadline();
    assert_eq!(node.reasons(), ["Pulling", "Pulled", "Created", "Started"]);
    // A restart pulls again, as kubelet's Always does.
    node.advance(1);
    node.rt.exit("app", 1);
    node.tick();
    assert_eq!(requested(&pulls), ["busybox"]);
}

#[test]
fn always_with_the_image_present_falls_back_to_it_when_the_pull_fails_and_while_pulls_back_off() {
    let (mut node, pulls) = Node::new().with_images();
    node.rt.add_image("localhost/app:latest", 10);
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "localhost/app:latest", "Always")]);
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), ["localhost/app:latest"]);
    node.events();
    node.pm.handle(pull_failed("localhost/app:latest"));
    node.pm.on_deadline();
    let events = node.events();
    assert_eq!(events[0].0, "Failed");
    assert!(events[0].1.starts_with("Failed to pull image \"localhost/app:latest\": "), "{events:?}");
    assert_eq!(
        events[1..],
        [
            ev(
                "Pulled",
                "Container image \"localhost/app:latest\" already present on machine; it is used, as the pull failed"
            ),
            ev("Created", "Created container app"),
            ev("Started", "Started container app"),
        ]
    );
    assert_eq!(node.waiting(&web, "app"), None);
    node.calls();
    // It crashes within the pull back-off: restarted from the present image, no pull.
    node.advance(1);
    node.rt.exit("app", 1);
    node.tick();
    assert_eq!(requested(&pulls), Vec::<String>::new());
    assert_eq!(node.calls(), [create("app", 1), start("app")]);
    assert_eq!(
        node.events()[0],
        ev("Pulled", "Container image \"localhost/app:latest\" already present on machine; it is used while pulls of it back off after a failure")
    );
}

#[test]
fn a_pull_in_flight_does_not_hold_up_another_pods_start() {
    let (mut node, pulls) = Node::new().with_images();
    node.rt.add_image("small:1", 1);
    let big = pod("big", RestartPolicy::Always, &[], &[with_image("app", "big:1", "IfNotPresent")]);
    let small = pod("small", RestartPolicy::Always, &[], &[with_image("app", "small:1", "IfNotPresent")]);
    node.apply(&[&big]);
    assert_eq!(requested(&pulls), ["big:1"]);
    node.calls();
    node.apply(&[&big, &small]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("small".into()), create("app", 0), start("app")]);
    assert_eq!(node.phase(&small), PodPhase::Running);
    assert_eq!(node.phase(&big), PodPhase::Pending);
}

#[test]
fn containers_waiting_for_one_image_share_one_pull() {
    let (mut node, pulls) = Node::new().with_images();
    let shared = |n| with_image(n, "app:1", "IfNotPresent");
    let a = pod("a", RestartPolicy::Always, &[], &[shared("x"), shared("y")]);
    let b = pod("b", RestartPolicy::Always, &[], &[shared("z")]);
    node.apply(&[&a, &b]);
    assert_eq!(requested(&pulls), ["app:1"], "one pull for three containers");
    assert_eq!(node.reasons(), ["Pulling", "Pulling", "Pulling"]);
    node.rt.add_image("app:1", 100);
    node.pm.handle(pulled("app:1"));
    node.pm.on_deadline();
    assert_eq!(node.rt.running(), ["x", "y", "z"]);
}

#[test]
fn a_pod_removed_while_its_image_is_pulled_leaves_nothing_behind() {
    let (mut node, pulls) = Node::new().with_images();
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "app:1", "IfNotPresent")]);
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), ["app:1"]);
    node.apply(&[]);
    node.tick();
    assert!(node.rt.sandboxes().is_empty());
    node.events();
    // The answer comes after the pod is gone: nobody is told, nothing is created.
    node.pm.handle(pulled("app:1"));
    node.pm.on_deadline();
    assert_eq!((node.events(), node.rt.containers().len()), (vec![], 0));
    assert_eq!(node.pm.images.as_ref().map(|i| i.tracked()), Some((0, 0, 0, 0)));
    assert!(node.pm.restarts.waiting.is_empty());
    // A failed pull of a removed pod leaves no back-off either.
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), ["app:1"]);
    node.apply(&[]);
    node.tick();
    node.pm.handle(pull_failed("app:1"));
    assert_eq!(node.pm.images.as_ref().map(|i| i.tracked()), Some((0, 0, 0, 0)));
}

#[test]
fn the_sandbox_image_is_pulled_before_the_sandbox_is_made() {
    let clock = FakeClock::new(t0());
    let rt = Arc::new(FakeRuntime::new(clock.clone()).with_sandbox_image("pause:3.9"));
    let (mut node, pulls) = Node::over(rt, clock).with_images();
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "app:1", "IfNotPresent")]);
    node.rt.add_image("app:1", 1);
    node.apply(&[&web]);
    assert_eq!(requested(&pulls), ["pause:3.9"]);
    assert_eq!(node.calls(), [], "no sandbox without its image");
    assert_eq!(node.events(), [ev("Pulling", "Pulling image \"pause:3.9\"")]);
    node.pm.handle(pull_failed("pause:3.9"));
    node.pm.on_deadline();
    assert_eq!(node.reasons(), ["Failed", "BackOff"], "on the pod; no container status names it");
    node.advance(10);
    node.tick();
    assert_eq!(requested(&pulls), ["pause:3.9"]);
    node.rt.add_image("pause:3.9", 1);
    node.pm.handle(pulled("pause:3.9"));
    node.pm.on_deadline();
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("app", 0), start("app")]);
    // Present from now on: the next sandbox needs no pull.
    assert_eq!(requested(&pulls), Vec::<String>::new());
}

#[test]
fn without_pull_threads_images_are_not_looked_at() {
    // The process runtime: the image is ignored, as before.
    let mut node = Node::new();
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "nowhere/app:1", "Never")]);
    node.apply(&[&web]);
    assert_eq!(node.calls(), [Call::RunPodSandbox("web".into()), create("app", 0), start("app")]);
    assert_eq!(node.reasons(), ["Created", "Started"]);
}

#[test]
fn a_pull_carries_the_credentials_of_the_pods_pull_secrets_that_match_the_registry() {
    use crate::node::objects::{Kind, Known, Object, ObjectRef, ObjectsView};
    let (mut node, pulls) = Node::new().with_images();
    let objects = ObjectsView::default();
    let config = br#"{"auths": {"registry.example.com:5000": {"username": "puller", "password": "s3cret"}, "other.example.com": {"auth": "eDp5"}}}"#;
    let secret = Object {
        data: [(".dockerconfigjson".to_string(), config.to_vec())].into(),
        type_: "kubernetes.io/dockerconfigjson".into(),
        ..Object::default()
    };
    let r = ObjectRef { kind: Kind::Secret, namespace: "default".into(), name: "regcred".into() };
    objects.set_object(&r, Some(Known::Found(Arc::new(secret))));
    node.pm = node.pm.with_objects(objects);
    let mut web =
        pod("web", RestartPolicy::Always, &[], &[with_image("app", "registry.example.com:5000/team/app:1", "")]);
    web.spec.image_pull_secrets =
        ["regcred", "gone"].iter().map(|n| crate::api::types::LocalObjectReference { name: n.to_string() }).collect();
    web.metadata.annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), "api".into());
    web.metadata.annotations.remove(CONFIG_HASH_ANNOTATION);
    let pods = vec![Arc::new(web)];
    node.pm.handle(PodsCommand::Update { source: crate::api::manifest::PodSource::Api, pods });
    let asked: Vec<PullRequest> = pulls.try_iter().collect();
    assert_eq!(asked.len(), 1);
    let auths: Vec<(&str, &str)> = asked[0].auths.iter().map(|a| (a.username.as_str(), a.password.as_str())).collect();
    assert_eq!(auths, [("puller", "s3cret")], "the matching registry's only");
    let text = "Unable to retrieve some image pull secrets (gone); attempting to pull the image may not succeed.";
    assert!(node.events().contains(&ev("FailedToRetrieveImagePullSecret", text)));
}

#[test]
fn without_pull_secrets_a_pull_carries_the_nodes_own_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, br#"{"auths": {"*.example.com": {"username": "node", "password": "n0de"}}}"#).unwrap();
    let (mut node, pulls) = Node::new().with_images();
    node.pm.act.cfg.registry_config = config;
    let web = pod("web", RestartPolicy::Always, &[], &[with_image("app", "registry.example.com/app:1", "")]);
    node.apply(&[&web]);
    let asked: Vec<PullRequest> = pulls.try_iter().collect();
    let auths: Vec<(&str, &str)> = asked[0].auths.iter().map(|a| (a.username.as_str(), a.password.as_str())).collect();
    assert_eq!(auths, [("node", "n0de")]);
    // Another registry gets none.
    let (mut node, pulls) = Node::new().with_images();
    node.pm.act.cfg.registry_config = dir.path().join("config.json");
    node.apply(&[&pod("web", RestartPolicy::Always, &[], &[with_image("app", "docker.io/library/app:1", "")])]);
    assert!(pulls.try_iter().all(|r| r.auths.is_empty()));
}
