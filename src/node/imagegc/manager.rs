//! The `fl-imagegc` thread (CRI runtime only): the executor of `imagegc`'s decisions.
//!
//! Every `DETECT_PERIOD` (30 s) it lists the runtime's images and containers (exited ones
//! too: their images are in use, as kubelet counts them) and updates the records and the
//! view `/images` serves. Every `image_gc_period` (kubelet's 5 min) it runs a pass: images
//! unused past `image_maximum_gc_age`, then, when the image filesystem is fuller than the
//! high threshold, least recently used images until it is down to the low one. On
//! `ImageGcCommand::DeleteUnused` (the eviction manager reclaiming the image filesystem,
//! which alone decides imagefs pressure) it removes every unused image at once, kubelet's
//! `DeleteUnusedImages`. Removal failures do not stop a pass. Events on the node, in
//! kubelet's words: `InvalidDiskCapacity`, `FreeDiskSpaceFailed` (not again while the bytes
//! eligible stay the same), `ImageGCFailed` (a second failed pass in a row).

use super::store::Store;
use super::{
    amount_to_free, detect, eviction_order, images_in_use, keep_reason, old_images, space_candidates, FsStats,
    ImageRecord, Policy, Protected,
};
use crate::base::clock::Clock;
use crate::base::errors::Chain;
use crate::base::metrics::{Encoder, Kind};
use crate::node::events::{EventRecorder, Reference, WARNING};
use crate::node::runtime::{ContainerRuntime, RuntimeError};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often images and their use are detected (kubelet refreshes its list every 30 s).
pub const DETECT_PERIOD: Duration = Duration::from_secs(30);
/// What the image GC is configured with.
#[derive(Clone, Debug)]
pub struct ImageGcSettings {
    /// This node (events go on it).
    pub node_name: String,
    /// Thresholds and ages.
    pub policy: Policy,
    /// Images never removed (names or ids), besides the sandbox image.
    pub keep: Vec<String>,
    /// How often a pass runs.
    pub period: Duration,
}

/// What `fl-imagegc` is asked to do.
#[derive(Debug)]
pub enum ImageGcCommand {
    /// Remove every image no container uses and old enough (kubelet's `DeleteUnusedImages`,
    /// what the eviction manager asks under imagefs pressure). `reply` gets the bytes freed;
    /// it needs room for the answer (`bounded(1)`), as `fl-imagegc` never waits on it.
    DeleteUnused {
        /// Where the answer goes.
        reply: Sender<Result<u64, DeleteUnusedError>>,
    },
}

/// How many commands may wait for `fl-imagegc`. The eviction manager asks at most once per
/// stats period; more waiting means the thread is inside a long pass.
pub const MAX_QUEUED: usize = 4;

/// `fl-imagegc`'s command channel, bounded by `MAX_QUEUED`.
pub fn command_channel() -> (Sender<ImageGcCommand>, Receiver<ImageGcCommand>) {
    crossbeam_channel::bounded(MAX_QUEUED)
}

/// Why removing the unused images failed, or got no answer.
#[derive(Debug, thiserror::Error)]
pub enum DeleteUnusedError {
    /// Listing the images or the containers failed: nothing was removed.
    #[error("failed to list images")]
    ListImages {
        /// The runtime's error.
        #[source]
        source: RuntimeError,
    },
    /// Some images could not be removed; the others were.
    #[error("freed {freed} bytes, but failed to remove {}", images.join(", "))]
    RemoveImages {
        /// Bytes freed by the removals that worked.
        freed: u64,
        /// The ids of the images that are still there.
        images: Vec<String>,
        /// The first removal's error.
        #[source]
        source: RuntimeError,
    },
    /// `fl-imagegc` is not running (the agent is stopping).
    #[error("image garbage collection is not running")]
    NotRunning,
    /// `MAX_QUEUED` commands are already waiting.
    #[error("image garbage collection has {MAX_QUEUED} requests waiting already")]
    QueueFull,
    /// No answer within the time the caller gave (the removal goes on all the same).
    #[error("no answer from image garbage collection within {waited:?}")]
    NoReply {
        /// How long the caller waited.
        waited: Duration,
    },
}

/// How another thread (the eviction manager's) asks `fl-imagegc` for work; cloneable.
#[derive(Clone, Debug)]
pub struct ImageGcClient {
    commands: Sender<ImageGcCommand>,
}

impl ImageGcClient {
    /// A client sending to `commands` (`fl-imagegc`'s channel, from `command_channel`).
    pub fn new(commands: Sender<ImageGcCommand>) -> ImageGcClient {
        ImageGcClient { commands }
    }

    /// Asks for every unused image to be removed (`ImageGcCommand::DeleteUnused`) and waits
    /// up to `timeout` for the bytes freed. Never blocks on a full queue.
    pub fn delete_unused(&self, timeout: Duration) -> Result<u64, DeleteUnusedError> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        match self.commands.try_send(ImageGcCommand::DeleteUnused { reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(DeleteUnusedError::QueueFull),
            Err(TrySendError::Disconnected(_)) => return Err(DeleteUnusedError::NotRunning),
        }
        match answer.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(DeleteUnusedError::NoReply { waited: timeout }),
            // The thread stopped with the command unanswered.
            Err(RecvTimeoutError::Disconnected) => Err(DeleteUnusedError::NotRunning),
        }
    }
}

/// One image as `/images` and `ferrolet get images` show it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageView {
    /// The runtime's id.
    pub id: String,
    /// Its names.
    pub tags: Vec<String>,
    /// Bytes.
    pub size: u64,
    /// When the node first saw it (RFC 3339).
    pub first_detected: String,
    /// When a container last used it (RFC 3339).
    pub last_used: String,
    /// Why GC never removes it now (`in use`, `pinned`, `sandbox image`,
    /// `on image_gc_keep`, `younger than image_minimum_gc_age`); `None`: it may.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

#[derive(Debug, Default)]
struct ViewState {
    images: Vec<ImageView>,
    fs: Option<FsStats>,
    collected_age: u64,
    collected_space: u64,
}

/// What the API reads: the images, the image filesystem, the GC counters. Only
/// `fl-imagegc` writes it.
#[derive(Clone, Debug, Default)]
pub struct ImagesView(Arc<RwLock<ViewState>>);

impl ImagesView {
    /// The images, largest first.
    pub fn images(&self) -> Vec<ImageView> {
        self.0.read().images.clone()
    }

    /// The GC's metrics, in the Prometheus text format.
    pub fn render_metrics(&self, out: &mut String) {
        let st = self.0.read();
        let mut enc = Encoder::new(out);
        enc.family(
            "kubelet_image_garbage_collected_total",
            Kind::Counter,
            "Images removed by image garbage collection, by reason (age: unused past image_maximum_gc_age; space: over the disk threshold).",
        );
        enc.sample("kubelet_image_garbage_collected_total", &[("reason", "age")], st.collected_age);
        enc.sample("kubelet_image_garbage_collected_total", &[("reason", "space")], st.collected_space);
        if let Some(fs) = st.fs {
            enc.single(
                "ferrolet_imagefs_capacity_bytes",
                Kind::Gauge,
                "Capacity of the filesystem holding the runtime's images.",
                fs.capacity,
            );
            enc.single(
                "ferrolet_imagefs_available_bytes",
                Kind::Gauge,
                "Bytes available on the filesystem holding the runtime's images.",
                fs.available,
            );
        }
    }
}

/// Why a pass removed an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    Age,
    Space,
}

/// An image that could not be removed: its id and the runtime's error.
type Failure = (String, RuntimeError);

/// A failure as a pass's error text says it.
fn failure_text((id, e): &Failure) -> String {
    format!("image {id}: {}", Chain(e))
}

/// Reads the capacity and free space of the filesystem holding a path.
pub type FsReader = Box<dyn Fn(&Path) -> std::io::Result<FsStats> + Send>;

/// The image GC's state and its executor.
pub struct ImageGc {
    settings: ImageGcSettings,
    runtime: Arc<dyn ContainerRuntime>,
    recorder: EventRecorder,
    clock: Arc<dyn Clock>,
    fs: FsReader,
    store: Store,
    records: BTreeMap<String, ImageRecord>,
    /// When this agent started (age removal waits until it has run past the maximum age).
    up_since: SystemTime,
    next_detect: SystemTime,
    /// Set at the first detection: a pass comes a whole period after it, as kubelet's first
    /// comes 5 minutes after its first detection.
    next_pass: Option<SystemTime>,
    /// Passes that failed in a row.
    failures: u32,
    /// The bytes eligible at the last `FreeDiskSpaceFailed`: not said again while they stay
    /// the same (what is wanted moves with every byte written to the disk).
    last_shortfall: Option<u64>,
    view: ImagesView,
}

impl ImageGc {
    /// The image GC over `runtime`, its records kept in `state_dir`.
    pub fn new(
        settings: ImageGcSettings,
        runtime: Arc<dyn ContainerRuntime>,
        recorder: EventRecorder,
        clock: Arc<dyn Clock>,
        state_dir: &Path,
    ) -> ImageGc {
        let now = clock.now();
        let store = Store::new(state_dir);
        let records = store.load();
        ImageGc {
            next_pass: None,
            settings,
            runtime,
            recorder,
            clock,
            fs: Box::new(statvfs),
            store,
            records,
            up_since: now,
            next_detect: now,
            failures: 0,
            last_shortfall: None,
            view: ImagesView::default(),
        }
    }

    /// With `fs` reading the image filesystem (tests script it).
    pub fn with_fs(mut self, fs: FsReader) -> ImageGc {
        self.fs = fs;
        self
    }

    /// What the API reads.
    pub fn view(&self) -> ImagesView {
        self.view.clone()
    }

    fn event(&self, reason: &str, message: &str) {
        self.recorder.event(&Reference::node(&self.settings.node_name), WARNING, reason, message);
    }

    /// Lists images and containers and updates the records (kept on disk when the set of
    /// images changed, or at a pass) and the view; returns what protects images now.
    pub fn detect(&mut self, now: SystemTime, persist: bool) -> Result<Protected, RuntimeError> {
        let listed = self.runtime.list_images()?;
        let refs = self.runtime.images_in_use()?;
        let in_use = images_in_use(&listed, refs.iter().map(String::as_str));
        let records = detect(&self.records, &listed, &in_use, now);
        let changed = records.keys().ne(self.records.keys());
        self.records = records;
        if changed || persist {
            if let Err(e) = self.store.save(&self.records) {
                log::warn!("imagegc: cannot keep image ages: {}", Chain(&e));
            }
        }
        let protected = Protected {
            in_use,
            sandbox: self.runtime.sandbox_image().map(str::to_string),
            keep: self.settings.keep.clone(),
        };
        self.publish(&protected, now);
        Ok(protected)
    }

    fn publish(&self, p: &Protected, now: SystemTime) {
        let min_age = self.settings.policy.min_age;
        let mut images: Vec<ImageView> = self
            .records
            .values()
            .map(|r| {
                let young = now.duration_since(r.first_detected).unwrap_or_default() < min_age;
                let kept = keep_reason(r, p)
                    .map(|k| k.as_str().to_string())
                    .or_else(|| young.then(|| "younger than image_minimum_gc_age".to_string()));
                ImageView {
                    id: r.id.clone(),
                    tags: r.tags.clone(),
                    size: r.size,
                    first_detected: crate::base::timefmt::rfc3339(r.first_detected),
                    last_used: crate::base::timefmt::rfc3339(r.last_used),
                    kept,
                }
            })
            .collect();
        images.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
        self.view.0.write().images = images;
    }

    /// The image filesystem's numbers, from the runtime's `ImageFsInfo` mount point.
    fn fs_stats(&self) -> Result<FsStats, String> {
        let info = self.runtime.image_fs_info().map_err(|e| format!("failed to get imageFs info: {}", Chain(&e)))?;
        let Some(first) = info.first() else { return Err("the runtime reports no image filesystem".into()) };
        let fs = (self.fs)(&first.mount_point)
            .map_err(|e| format!("cannot read the filesystem of {}: {e}", first.mount_point.display()))?;
        let fs = FsStats { capacity: fs.capacity, available: fs.available.min(fs.capacity) };
        self.view.0.write().fs = Some(fs);
        Ok(fs)
    }

    /// Removes `ids` in order until `want` bytes are freed (each counted under `reason` and
    /// forgotten when it goes); returns the bytes freed and the failures (id, error).
    fn remove(&mut self, ids: &[(String, u64)], want: Option<u64>, reason: Reason) -> (u64, Vec<Failure>) {
        let mut freed = 0u64;
        let mut errors = Vec::new();
        for (id, size) in ids {
            if want.is_some_and(|w| freed >= w) {
                break;
            }
            match self.runtime.remove_image(id) {
                Ok(()) => {
                    log::info!("imagegc: removed image {id} ({size} bytes, {reason:?})");
                    freed = freed.saturating_add(*size);
                    self.records.remove(id);
                    let mut v = self.view.0.write();
                    match reason {
                        Reason::Age => v.collected_age += 1,
                        Reason::Space => v.collected_space += 1,
                    }
                }
                Err(e) => errors.push((id.clone(), e)),
            }
        }
        (freed, errors)
    }

    /// Removes the unused images, least recently used first, until `want` bytes are freed
    /// (kubelet's `freeSpace`); returns the bytes freed, the bytes eligible, the failures.
    fn free_space(&mut self, want: u64, began: SystemTime, p: &Protected) -> (u64, u64, Vec<Failure>) {
        let order = eviction_order(&self.records, p);
        let candidates: Vec<(String, u64)> = space_candidates(&order, began, self.settings.policy.min_age)
            .into_iter()
            .map(|r| (r.id.clone(), r.size))
            .collect();
        let eligible = candidates.iter().map(|(_, s)| *s).fold(0u64, u64::saturating_add);
        let (freed, errors) = self.remove(&candidates, Some(want), Reason::Space);
        (freed, eligible, errors)
    }

    /// One pass (kubelet's `GarbageCollect`): the age removal, then the space one.
    pub fn garbage_collect(&mut self, now: SystemTime) -> Result<(), String> {
        let p = self.detect(now, true).map_err(|e| format!("failed to list images: {}", Chain(&e)))?;
        let mut errors = Vec::new();
        let order = eviction_order(&self.records, &p);
        let old: Vec<(String, u64)> = old_images(&order, now, self.up_since, self.settings.policy.max_age)
            .into_iter()
            .map(|id| {
                let size = self.records.get(&id).map_or(0, |r| r.size);
                (id, size)
            })
            .collect();
        errors.extend(self.remove(&old, None, Reason::Age).1.iter().map(failure_text));
        let fs = self.fs_stats()?;
        if fs.capacity == 0 {
            let message = "invalid capacity 0 on image filesystem";
            self.event("InvalidDiskCapacity", message);
            return Err(message.into());
        }
        let want = amount_to_free(fs, &self.settings.policy);
        if want > 0 {
            log::info!(
                "imagegc: image filesystem {}% used ({} of {} bytes free); freeing {want} bytes",
                super::usage_percent(fs),
                fs.available,
                fs.capacity
            );
            let (freed, eligible, failed) = self.free_space(want, now, &p);
            errors.extend(failed.iter().map(failure_text));
            if freed < want {
                let message = format!("Failed to garbage collect required amount of images. Attempted to free {want} bytes, but only found {eligible} bytes eligible to free.");
                // Said again only when what could be freed changed (kubelet says it every pass).
                if self.last_shortfall != Some(eligible) {
                    self.event("FreeDiskSpaceFailed", &message);
                    self.last_shortfall = Some(eligible);
                }
                errors.push(message);
            } else {
                self.last_shortfall = None;
            }
        } else {
            // Below the threshold: a later shortfall is news again, whatever its size.
            self.last_shortfall = None;
        }
        self.publish(&p, now);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// A pass and kubelet's rule for its failures: the first is logged, a second in a row is
    /// an `ImageGCFailed` event.
    pub fn run_pass(&mut self, now: SystemTime) {
        match self.garbage_collect(now) {
            Ok(()) => self.failures = 0,
            Err(e) => {
                self.failures += 1;
                if self.failures >= 2 {
                    self.event("ImageGCFailed", &e);
                } else {
                    log::info!("imagegc: image garbage collection failed once: {e}");
                }
            }
        }
    }

    /// kubelet's `DeleteUnusedImages`, on the eviction manager's request: detects, then
    /// removes every image no container uses, old enough and not used since `now` (a pass's
    /// removal with no limit); returns the bytes freed. Freeing "everything" is never short,
    /// so it says no `FreeDiskSpaceFailed`: whether it was enough is the eviction manager's
    /// to judge.
    pub fn delete_unused(&mut self, now: SystemTime) -> Result<u64, DeleteUnusedError> {
        let p = self.detect(now, false).map_err(|source| DeleteUnusedError::ListImages { source })?;
        let (freed, eligible, failures) = self.free_space(u64::MAX, now, &p);
        self.publish(&p, now);
        // Asked again every stats period while the pressure lasts: quiet once nothing is left.
        let level = if freed > 0 || !failures.is_empty() { log::Level::Info } else { log::Level::Debug };
        log::log!(
            level,
            "imagegc: eviction asked for every unused image to go: freed {freed} of {eligible} bytes eligible{}",
            if failures.is_empty() { String::new() } else { format!(", {} removals failed", failures.len()) }
        );
        let mut failures = failures.into_iter();
        match failures.next() {
            None => Ok(freed),
            Some((first, source)) => Err(DeleteUnusedError::RemoveImages {
                freed,
                images: std::iter::once(first).chain(failures.map(|(id, _)| id)).collect(),
                source,
            }),
        }
    }

    /// What is due at `now`: a detection, a pass.
    pub fn tick(&mut self, now: SystemTime) {
        if self.next_pass.is_some_and(|t| now >= t) {
            self.next_pass = Some(now + self.settings.period);
            if self.settings.policy.periodic() {
                self.run_pass(now);
                return;
            }
        }
        if now >= self.next_detect {
            self.next_detect = now + DETECT_PERIOD.min(self.settings.period);
            match self.detect(now, false) {
                Ok(_) => {
                    self.next_pass.get_or_insert(now + self.settings.period);
                }
                Err(e) => log::debug!("imagegc: cannot list images: {}", Chain(&e)),
            }
        }
    }
}

impl crate::base::manager::Manager for ImageGc {
    type Command = ImageGcCommand;

    fn handle(&mut self, cmd: ImageGcCommand) {
        match cmd {
            ImageGcCommand::DeleteUnused { reply } => {
                let result = self.delete_unused(self.clock.now());
                // A caller that gave up waiting gets nothing; the images are gone all the same.
                let _ = reply.try_send(result);
            }
        }
    }

    fn on_tick(&mut self) {
        let now = self.clock.now();
        self.tick(now);
    }

    fn tick_interval(&self) -> Duration {
        DETECT_PERIOD.min(self.settings.period)
    }
}

/// The capacity and free space (for unprivileged users, as `df`) of the filesystem
/// holding `path`.
pub fn statvfs(path: &Path) -> std::io::Result<FsStats> {
    crate::node::stats::disk::statvfs(path).map(|t| FsStats { capacity: t.capacity, available: t.available })
}

#[cfg(test)]
mod tests;
