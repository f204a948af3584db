//! A pod's directory on the node (`<state_dir>/pods/<uid>`, kubelet's
//! `/var/lib/kubelet/pods/<uid>`): its volumes, its containers' termination message files
//! and its hosts file. Made by the pod manager before the pod's containers, removed with the
//! pod.

use std::path::{Path, PathBuf};

/// The directory of pod `uid` under `pods_root`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDir(PathBuf);

impl PodDir {
    /// Pod `uid`'s directory under `pods_root` (`<state_dir>/pods`).
    pub fn new(pods_root: &Path, uid: &str) -> PodDir {
        PodDir(pods_root.join(uid))
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The pod's hosts file (kubelet's `etc-hosts`), mounted at `/etc/hosts`.
    pub fn etc_hosts(&self) -> PathBuf {
        self.0.join("etc-hosts")
    }
}
