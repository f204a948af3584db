//! Pulls with credentials from a real registry: Debian's `docker-registry` on 127.0.0.1 with
//! TLS and htpasswd basic auth (`common::registry`), an image pushed into it offline, and the
//! harness's containerd trusting its CA through `$FERROLET_CRI_CERTS_D` (its `config_path`).
//! The pulls go through `CriRuntime::pull_image`, as the agent's do: with a pod's
//! `imagePullSecrets` as CRI's `AuthConfig`, or without. The failures' text is what the agent
//! shows as `ErrImagePull`'s message. Without `FERROLET_CRI_ENDPOINT`, or without
//! docker-registry, each test skips with the reason.

use crate::common;

use common::cri::{client, endpoint, var};
use common::registry::{mkimage, Registry};
use ferrolet::base::errors::Chain;
use ferrolet::base::manager::{Cancel, Health};
use ferrolet::node::runtime::cri::CriRuntime;
use ferrolet::node::runtime::{ContainerRuntime, PullAuth};
use std::path::Path;
use std::time::Duration;

/// The node the tests' runtimes make their objects for.
const NODE: &str = "cri-registry-test";
const PULL_TIMEOUT: Duration = Duration::from_secs(60);

/// A registry holding busybox (`mkimage.py`'s docker archive) as `test/busybox:1`, and the
/// harness's containerd.
struct Setup {
    rt: CriRuntime,
    endpoint: String,
    registry: Registry,
    busybox: String,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Option<Setup> {
        let endpoint = endpoint()?;
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::start(&dir.path().join("registry"))?;
        let tar = dir.path().join("busybox.tar");
        mkimage(
            &tar,
            &["--name", "test/busybox:1", "--format", "docker", "--busybox", "/bin/busybox", "--cmd", "/bin/sh"],
        );
        let busybox = registry.push("test/busybox", "1", &tar);
        let rt = CriRuntime::new(client(&endpoint), &var("FERROLET_CRI_PAUSE_IMAGE"), NODE, &Health::default());
        Some(Setup { rt, endpoint, registry, busybox, dir })
    }

    /// The registry's CA, trusted by the harness's containerd.
    fn trust(&self) {
        self.registry.trust(Path::new(&var("FERROLET_CRI_CERTS_D")));
    }

    fn auth(&self, password: &str) -> PullAuth {
        PullAuth { username: self.registry.user.clone(), password: password.into(), ..Default::default() }
    }

    /// A pull of busybox that must fail: its error as the agent shows it, which starts as
    /// every failed pull's.
    fn pull_fails(&self, auth: Option<&PullAuth>) -> String {
        let (_keep, mut cancel) = Cancel::pair();
        let e = match self.rt.pull_image(&self.busybox, auth, PULL_TIMEOUT, &mut cancel) {
            Ok(id) => {
                let _ = self.rt.remove_image(&self.busybox);
                panic!("the pull of {} succeeded ({id})", self.busybox);
            }
            Err(e) => e,
        };
        let text = Chain(&e).to_string();
        let head = format!("image {}: container runtime endpoint {}: PullImage: ", self.busybox, self.endpoint);
        assert!(text.starts_with(&head), "{text}");
        // Shown with --nocapture: the message an ErrImagePull of this kind carries.
        eprintln!("{text}");
        text
    }
}

/// Removes an image when dropped.
struct Pulled<'a>(&'a CriRuntime, &'a str);

impl Drop for Pulled<'_> {
    fn drop(&mut self) {
        let _ = self.0.remove_image(self.1);
    }
}

#[test]
fn a_pull_with_the_registry_s_credentials_gets_a_docker_image_and_an_oci_image() {
    let Some(s) = Setup::new() else { return };
    let tar = s.dir.path().join("pause.tar");
    mkimage(&tar, &["--name", "test/pause:1", "--format", "oci", "--file", "/usr/bin/catatonit:/usr/bin/catatonit"]);
    let pause = s.registry.push("test/pause", "1", &tar);
    s.trust();
    let auth = s.auth(&s.registry.password);
    for image in [&s.busybox, &pause] {
        let (_keep, mut cancel) = Cancel::pair();
        let id = s.rt.pull_image(image, Some(&auth), PULL_TIMEOUT, &mut cancel).unwrap();
        let _pulled = Pulled(&s.rt, image);
        assert!(id.starts_with("sha256:"), "{id}");
        let info = s.rt.image_status(image).unwrap().expect("the pulled image has a status");
        assert_eq!(info.id, id);
        assert!(info.repo_tags.contains(image), "{info:?}");
        assert!(info.size > 0, "{info:?}");
    }
    // Removing them left the harness's busybox, made of the same files (another image id).
    assert!(s.rt.image_status(&var("FERROLET_CRI_BUSYBOX_IMAGE")).unwrap().is_some());
}

#[test]
fn a_pull_without_credentials_is_refused_as_unauthorized() {
    let Some(s) = Setup::new() else { return };
    s.trust();
    let text = s.pull_fails(None);
    assert!(text.ends_with(": 401 Unauthorized"), "{text}");
}

#[test]
fn a_pull_with_a_wrong_password_is_refused_as_unauthorized() {
    let Some(s) = Setup::new() else { return };
    s.trust();
    let text = s.pull_fails(Some(&s.auth("not-the-password")));
    assert!(text.ends_with(": 401 Unauthorized"), "{text}");
}

#[test]
fn a_pull_from_a_registry_whose_ca_containerd_does_not_trust_fails_on_the_certificate() {
    let Some(s) = Setup::new() else { return };
    s.registry.hosts_toml(Path::new(&var("FERROLET_CRI_CERTS_D")), None);
    let text = s.pull_fails(Some(&s.auth(&s.registry.password)));
    assert!(text.ends_with("x509: certificate signed by unknown authority"), "{text}");
}

#[test]
fn without_a_hosts_toml_containerd_speaks_plain_http_to_a_loopback_registry_and_fails() {
    let Some(s) = Setup::new() else { return };
    let text = s.pull_fails(Some(&s.auth(&s.registry.password)));
    // The registry answers plain HTTP on its TLS port with 400.
    assert!(text.ends_with(": 400 Bad Request"), "{text}");
}
