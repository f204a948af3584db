//! Image garbage collection, kubelet's `image_gc_manager.go` as pure decisions over plain
//! data: which images the node knows and since when (`detect`), the order they go in
//! (`eviction_order`), how much to free (`amount_to_free`), which images a pass removes
//! (`space_candidates`, `old_images`) and why an image is kept (`keep_reason`). The
//! `fl-imagegc` thread (`manager`) makes the runtime calls, reads the filesystem, records
//! the events and removes every unused image when the eviction manager asks (`DeleteUnused`,
//! kubelet's `DeleteUnusedImages`); `store` persists when each image was first seen and last used, so an
//! agent restart does not make old images look new (kubelet forgets them).

pub mod manager;
pub mod store;

pub use manager::{DeleteUnusedError, ImageGc, ImageGcClient, ImageGcCommand, ImageGcSettings, ImageView, ImagesView};

use crate::node::runtime::ImageInfo;
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime};

/// What the node knows of one image.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageRecord {
    /// The runtime's id.
    pub id: String,
    /// Its names (for the keep-list and `ferrolet get images`).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Bytes.
    #[serde(default)]
    pub size: u64,
    /// The runtime asks that it never be removed.
    #[serde(default)]
    pub pinned: bool,
    /// When the node first saw it.
    pub first_detected: SystemTime,
    /// When a container last used it (the first detection until then).
    pub last_used: SystemTime,
}

/// The thresholds and ages (kubelet's `ImageGCPolicy`, and ferrolet's absolute ones).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// GC starts at this usage (percent).
    pub high_percent: u8,
    /// ... and frees down to this usage.
    pub low_percent: u8,
    /// Images younger than this (since first seen) are never removed.
    pub min_age: Duration,
    /// Unused longer than this, an image is removed whatever the disk; zero: off.
    pub max_age: Duration,
    /// GC also starts when fewer bytes than this are free ...
    pub high_bytes_free: Option<u64>,
    /// ... and frees until this many are.
    pub low_bytes_free: Option<u64>,
}

impl Policy {
    /// Whether the periodic GC runs at all (kubelet: not with high 100 and no maximum age).
    pub fn periodic(&self) -> bool {
        self.high_percent < 100 || !self.max_age.is_zero() || self.high_bytes_free.is_some()
    }
}

/// The records after a detection at `now`: every listed image, new ones first seen now,
/// those in use (`in_use`: ids) last used now; images no longer listed are forgotten.
pub fn detect(
    previous: &BTreeMap<String, ImageRecord>,
    listed: &[ImageInfo],
    in_use: &HashSet<String>,
    now: SystemTime,
) -> BTreeMap<String, ImageRecord> {
    listed
        .iter()
        .map(|i| {
            let mut r = previous.get(&i.id).cloned().unwrap_or_else(|| ImageRecord {
                id: i.id.clone(),
                tags: Vec::new(),
                size: 0,
                pinned: false,
                first_detected: now,
                last_used: now,
            });
            if in_use.contains(&i.id) {
                r.last_used = now;
            }
            r.size = i.size;
            r.pinned = i.pinned;
            r.tags = i.repo_tags.clone();
            (i.id.clone(), r)
        })
        .collect()
}

/// The ids of the listed images that `refs` (containers' image references: ids, digests or
/// names) name.
pub fn images_in_use<'a>(listed: &[ImageInfo], refs: impl IntoIterator<Item = &'a str>) -> HashSet<String> {
    let refs: HashSet<&str> = refs.into_iter().collect();
    listed
        .iter()
        .filter(|i| {
            refs.contains(i.id.as_str()) || i.repo_tags.iter().chain(&i.repo_digests).any(|n| refs.contains(n.as_str()))
        })
        .map(|i| i.id.clone())
        .collect()
}

/// Why an image is never removed, whatever the disk; `None`: it may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// A container the runtime knows (running or exited) uses it.
    InUse,
    /// The runtime pinned it.
    Pinned,
    /// It is the pod sandbox (pause) image.
    Sandbox,
    /// It is on `image_gc_keep`.
    KeepList,
}

impl Kept {
    /// As `ferrolet get images` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kept::InUse => "in use",
            Kept::Pinned => "pinned",
            Kept::Sandbox => "sandbox image",
            Kept::KeepList => "on image_gc_keep",
        }
    }
}

/// What keeps every image of a pass: the ids in use, and the names never removed (the
/// sandbox image, the keep-list).
#[derive(Clone, Debug, Default)]
pub struct Protected {
    /// Ids of images in use.
    pub in_use: HashSet<String>,
    /// The sandbox image's name.
    pub sandbox: Option<String>,
    /// `image_gc_keep`: names (`registry/repo:tag`) or ids.
    pub keep: Vec<String>,
}

/// Whether a name matches an image named `name`: equal, or equal once a short Docker Hub
/// name is written out (`busybox:1.36` is `docker.io/library/busybox:1.36`).
fn names_match(image: &str, name: &str) -> bool {
    let full = |n: &str| {
        let with_tag = if n.rsplit('/').next().is_some_and(|last| last.contains(':') || last.contains('@')) {
            n.to_string()
        } else {
            format!("{n}:latest")
        };
        match with_tag.split_once('/') {
            Some((host, _)) if host.contains('.') || host.contains(':') || host == "localhost" => with_tag,
            Some(_) => format!("docker.io/{with_tag}"),
            None => format!("docker.io/library/{with_tag}"),
        }
    };
    image == name || full(image) == full(name)
}

/// Why `r` is never removed, if it is not removable.
pub fn keep_reason(r: &ImageRecord, p: &Protected) -> Option<Kept> {
    let named = |name: &str| r.id == name || r.tags.iter().any(|t| names_match(t, name));
    if p.in_use.contains(&r.id) {
        Some(Kept::InUse)
    } else if r.pinned {
        Some(Kept::Pinned)
    } else if p.sandbox.as_deref().is_some_and(named) {
        Some(Kept::Sandbox)
    } else if p.keep.iter().any(|k| named(k)) {
        Some(Kept::KeepList)
    } else {
        None
    }
}

/// The removable images, in the order GC removes them: least recently used first, ties by
/// first detection (kubelet's `imagesInEvictionOrder`).
pub fn eviction_order<'a>(records: &'a BTreeMap<String, ImageRecord>, p: &Protected) -> Vec<&'a ImageRecord> {
    let mut out: Vec<&ImageRecord> = records.values().filter(|r| keep_reason(r, p).is_none()).collect();
    out.sort_by(|a, b| {
        a.last_used.cmp(&b.last_used).then(a.first_detected.cmp(&b.first_detected)).then(a.id.cmp(&b.id))
    });
    out
}

/// The image filesystem, as the GC sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsStats {
    /// Bytes.
    pub capacity: u64,
    /// Bytes free (clamped to the capacity).
    pub available: u64,
}

/// Usage in percent as kubelet computes it: `100 - available*100/capacity`.
pub fn usage_percent(fs: FsStats) -> u64 {
    100 - (fs.available.min(fs.capacity) * 100 / fs.capacity.max(1))
}

/// How many bytes a space pass must free (0: none), kubelet's
/// `capacity*(100-low)/100 - available` once usage reaches the high threshold, and with
/// absolute thresholds `low_bytes_free - available` once fewer than `high_bytes_free` are
/// free; the larger of the two.
pub fn amount_to_free(fs: FsStats, p: &Policy) -> u64 {
    let available = fs.available.min(fs.capacity);
    let by_percent = if usage_percent(fs) >= u64::from(p.high_percent) && p.high_percent < 100 {
        (fs.capacity * (100 - u64::from(p.low_percent)) / 100).saturating_sub(available)
    } else {
        0
    };
    let by_bytes = match (p.high_bytes_free, p.low_bytes_free) {
        (Some(high), Some(low)) if available < high => low.saturating_sub(available),
        _ => 0,
    };
    by_percent.max(by_bytes)
}

/// The images a space pass that began at `began` may remove, in order: removable ones
/// (`eviction_order`) not used since the pass began and at least `min_age` old since first
/// seen. The pass removes them in this order until it freed what it wants.
pub fn space_candidates<'a>(order: &[&'a ImageRecord], began: SystemTime, min_age: Duration) -> Vec<&'a ImageRecord> {
    order
        .iter()
        .filter(|r| r.last_used < began)
        .filter(|r| began.duration_since(r.first_detected).unwrap_or_default() >= min_age)
        .copied()
        .collect()
}

/// The images an age pass at `now` removes: unused for longer than `max_age`, once the
/// agent has run for longer than `max_age` (`up_since`); none when `max_age` is zero.
pub fn old_images(order: &[&ImageRecord], now: SystemTime, up_since: SystemTime, max_age: Duration) -> Vec<String> {
    let older = |t: SystemTime| now.duration_since(t).unwrap_or_default() > max_age;
    if max_age.is_zero() || !older(up_since) {
        return Vec::new();
    }
    order.iter().filter(|r| older(r.last_used)).map(|r| r.id.clone()).collect()
}

#[cfg(test)]
mod tests;
