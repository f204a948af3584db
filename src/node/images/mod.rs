//! Container images: kubelet's `imagePullPolicy` (`EnsureImageExists` in
//! `pkg/kubelet/images/image_manager.go`) as a pure decision, kubelet's event wording, and
//! the pull threads (`puller`). The pod manager asks `decide` before it creates a container
//! (or a pod's sandbox), acts on the answer, and hands pulls to `puller`, whose results come
//! back to it as `PullDone`: it never waits for a pull itself. `keyring` decides which
//! registry credentials a pull may send (for `imagePullSecrets`; nothing uses it yet).
//!
//! One deliberate difference from kubelet: a container with `Always` whose image is present
//! starts from the present image when the pull fails, or while pulls of it back off, unless
//! its pod pulls with credentials (`imagePullSecrets`, where `Always` is how a pod proves it
//! may use the image). Kubelet leaves such a container in `ImagePullBackOff` for as long as
//! the registry cannot be reached, which stops `:latest` (and untagged) images, imported on
//! a device without a registry, from ever starting. The failed pull is still reported
//! (`Failed`, with its cause) and backs off as kubelet's does.

pub mod keyring;
pub mod puller;
pub mod reference;

pub use puller::{ImagePuller, PullDone, PullRequest, Pulled, PullerSettings};

use crate::base::timefmt::go_duration_millis;
use std::time::Duration;

/// A container's `imagePullPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull at every container start.
    Always,
    /// Pull only when the image is absent.
    #[default]
    IfNotPresent,
    /// Never pull: the image must be on the node.
    Never,
}

impl PullPolicy {
    /// The policy a container asks for. Validation admits only the three names; an empty
    /// one (a pod that was not defaulted) gets kubelet's default from the image's tag.
    pub fn of(policy: &str, image: &str) -> PullPolicy {
        let policy = if policy.is_empty() { crate::api::defaults::default_pull_policy(image) } else { policy };
        match policy {
            "Always" => PullPolicy::Always,
            "Never" => PullPolicy::Never,
            _ => PullPolicy::IfNotPresent,
        }
    }
}

/// What the pod manager knows of one container's image as it is about to start it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageState {
    /// The container's pull policy.
    pub policy: PullPolicy,
    /// The runtime has the image (not read when `pulled` or `waiting_for_pull`).
    pub present: bool,
    /// A pull for this start has answered: the container may start.
    pub pulled: bool,
    /// This container waits for a pull in flight.
    pub waiting_for_pull: bool,
    /// A pull of the image runs or is queued (for another container or pod).
    pub pull_in_flight: bool,
    /// The pod's last pull of the image failed and its back-off has not passed.
    pub in_backoff: bool,
    /// The pod pulls with credentials: it never falls back to a present image.
    pub credentials: bool,
}

/// What to do about a container's image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageAction {
    /// Start the container: the image is present and the policy does not pull it (the
    /// `Pulled` event "already present on machine").
    UsePresent,
    /// Start the container: a pull for this start has answered (its events are out).
    UsePulled,
    /// `Always`, pulls back off, the image is present, no credentials: start from the
    /// present image (ferrolet's difference from kubelet, see the module's documentation).
    UsePresentInBackOff,
    /// `Never` and absent: wait as `ErrImageNeverPull` (the image may be imported later).
    NeverPull,
    /// Pulls of the image back off: wait as `ImagePullBackOff`.
    BackOff,
    /// Wait for the pull this container waits for.
    Wait,
    /// A pull of the image is in flight: wait for it too (`Pulling`).
    Join,
    /// Pull the image (`Pulling`).
    Pull,
}

/// kubelet's `EnsureImageExists` and `shouldPullImage`, for an answer that may come later.
pub fn decide(s: &ImageState) -> ImageAction {
    if s.pulled {
        return ImageAction::UsePulled;
    }
    if s.waiting_for_pull {
        return ImageAction::Wait;
    }
    match s.policy {
        PullPolicy::Never if s.present => ImageAction::UsePresent,
        PullPolicy::Never => ImageAction::NeverPull,
        PullPolicy::IfNotPresent if s.present => ImageAction::UsePresent,
        _ if s.in_backoff && s.present && !s.credentials => ImageAction::UsePresentInBackOff,
        _ if s.in_backoff => ImageAction::BackOff,
        _ if s.pull_in_flight => ImageAction::Join,
        _ => ImageAction::Pull,
    }
}

/// kubelet's event reasons and waiting reasons for images.
pub mod reason {
    /// Normal: a pull starts.
    pub const PULLING: &str = "Pulling";
    /// Normal: the image is there (pulled, or already present).
    pub const PULLED: &str = "Pulled";
    /// Warning: a pull failed (also kubelet's `Error: …` event of a container that cannot
    /// be created).
    pub const FAILED: &str = "Failed";
    /// Normal: pulls back off.
    pub const BACK_OFF: &str = "BackOff";
    /// Warning: `Never` and absent; also the waiting reason.
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    /// Warning: the runtime cannot tell whether the image is present.
    pub const INSPECT_FAILED: &str = "InspectFailed";
    /// Waiting reason: the last pull failed.
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    /// Waiting reason: pulls back off.
    pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
    /// Waiting reason: the image cannot be inspected.
    pub const IMAGE_INSPECT_ERROR: &str = "ImageInspectError";
    /// Waiting reason: the image reference does not parse (no runtime call is made).
    pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";
}

/// kubelet's event messages.
pub mod message {
    use super::*;

    /// `InspectFailed` and the waiting message of an image reference that does not parse.
    pub fn invalid_name(image: &str, why: &str) -> String {
        format!("Failed to apply default image tag {image:?}: couldn't parse image name {image:?}: {why}")
    }

    /// `Pulled`, when no pull is needed.
    pub fn already_present(image: &str) -> String {
        format!("Container image {image:?} already present on machine")
    }

    /// `Pulled`, when an `Always` pull backs off and the present image is used.
    pub fn present_in_backoff(image: &str) -> String {
        format!(
            "Container image {image:?} already present on machine; it is used while pulls of it back off after a failure"
        )
    }

    /// `Pulled`, when an `Always` pull failed and the present image is used.
    pub fn present_after_failure(image: &str) -> String {
        format!("Container image {image:?} already present on machine; it is used, as the pull failed")
    }

    /// `ErrImageNeverPull`, also the waiting message.
    pub fn never_pull(image: &str) -> String {
        format!("Container image {image:?} is not present with pull policy of Never")
    }

    /// `BackOff`.
    pub fn back_off(image: &str) -> String {
        format!("Back-off pulling image {image:?}")
    }

    /// The `ImagePullBackOff` waiting message: the back-off with the last failure, as
    /// kubelet 1.32 shows it.
    pub fn back_off_status(image: &str, last_failure: Option<&str>) -> String {
        match last_failure {
            Some(cause) => format!("{}: {}: {cause}", back_off(image), reason::ERR_IMAGE_PULL),
            None => back_off(image),
        }
    }

    /// `Pulling`.
    pub fn pulling(image: &str) -> String {
        format!("Pulling image {image:?}")
    }

    /// `Pulled` after a pull: the pull's own time, the time since the container asked for
    /// it (with the queue), and the image's size.
    pub fn pulled(image: &str, pull: Duration, total: Duration, size: u64) -> String {
        format!(
            "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
            go_duration_millis(pull),
            go_duration_millis(total)
        )
    }

    /// `Failed`, for a pull.
    pub fn pull_failed(image: &str, cause: &str) -> String {
        format!("Failed to pull image {image:?}: {cause}")
    }

    /// `InspectFailed`, also the waiting message.
    pub fn inspect_failed(image: &str, cause: &str) -> String {
        format!("Failed to inspect image {image:?}: {cause}")
    }

    /// kubelet's `Failed` event of a container that cannot start: `Error: <reason>`.
    pub fn error(waiting_reason: &str) -> String {
        format!("Error: {waiting_reason}")
    }
}

#[cfg(test)]
mod tests {
    use super::ImageAction::*;
    use super::PullPolicy::*;
    use super::*;

    fn state(policy: PullPolicy, present: bool) -> ImageState {
        ImageState { policy, present, ..Default::default() }
    }

    #[test]
    fn each_policy_decides_as_kubelets_should_pull_image() {
        for (policy, present, want) in [
            (Never, true, UsePresent),
            (Never, false, NeverPull),
            (IfNotPresent, true, UsePresent),
            (IfNotPresent, false, Pull),
            // Always pulls even when the image is present.
            (Always, true, Pull),
            (Always, false, Pull),
        ] {
            assert_eq!(decide(&state(policy, present)), want, "{policy:?} present={present}");
        }
    }

    #[test]
    fn back_off_holds_pulls_but_never_a_present_image() {
        let backing_off = |policy, present| ImageState { in_backoff: true, ..state(policy, present) };
        assert_eq!(decide(&backing_off(IfNotPresent, false)), BackOff);
        assert_eq!(decide(&backing_off(Always, false)), BackOff);
        assert_eq!(decide(&backing_off(IfNotPresent, true)), UsePresent);
        assert_eq!(decide(&backing_off(Never, false)), NeverPull);
        // ferrolet's difference: Always with the image present starts from it meanwhile ...
        assert_eq!(decide(&backing_off(Always, true)), UsePresentInBackOff);
        // ... unless the pod pulls with credentials, where Always proves access.
        assert_eq!(decide(&ImageState { credentials: true, ..backing_off(Always, true) }), BackOff);
    }

    #[test]
    fn a_pull_in_flight_is_joined_or_waited_for_and_its_answer_used() {
        let flying = ImageState { pull_in_flight: true, ..state(IfNotPresent, false) };
        assert_eq!(decide(&flying), Join);
        assert_eq!(decide(&ImageState { waiting_for_pull: true, ..flying }), Wait);
        assert_eq!(decide(&ImageState { pulled: true, ..state(Always, true) }), UsePulled);
        // An answered pull is used even if the image went away since (the create reports it).
        assert_eq!(decide(&ImageState { pulled: true, in_backoff: true, ..state(Always, false) }), UsePulled);
        // Back-off comes before joining, as kubelet checks it before pulling.
        assert_eq!(decide(&ImageState { in_backoff: true, ..flying }), BackOff);
    }

    #[test]
    fn an_empty_policy_gets_kubelets_default() {
        assert_eq!(PullPolicy::of("", "busybox"), Always);
        assert_eq!(PullPolicy::of("", "busybox:1.36"), IfNotPresent);
        assert_eq!(PullPolicy::of("Never", "busybox"), Never);
        assert_eq!(PullPolicy::of("IfNotPresent", "busybox:latest"), IfNotPresent);
    }

    #[test]
    fn messages_use_kubelets_wording() {
        let ms = Duration::from_millis;
        assert_eq!(
            message::pulled("busybox:1.36", ms(1234), ms(2500), 4_261_550),
            "Successfully pulled image \"busybox:1.36\" in 1.234s (2.5s including waiting). Image size: 4261550 bytes."
        );
        assert_eq!(message::already_present("a"), "Container image \"a\" already present on machine");
        assert_eq!(message::never_pull("a"), "Container image \"a\" is not present with pull policy of Never");
        assert_eq!(message::back_off_status("a", Some("boom")), "Back-off pulling image \"a\": ErrImagePull: boom");
        assert_eq!(message::pull_failed("a", "boom"), "Failed to pull image \"a\": boom");
    }
}
