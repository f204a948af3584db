//! The channel ends between the reactor and its workers.

use super::http::{Request, Response};
use crate::base::wake::Waker;
use crossbeam_channel::{Receiver, Sender};

/// Worker threads' end of the reactor: jobs in, replies out, and the wake-up.
pub struct WorkerEnds {
    /// Requests to answer.
    pub jobs: Receiver<(u64, Request)>,
    /// Answers.
    pub replies: Sender<(u64, Response)>,
    /// Woken after each answer so the reactor's `poll` returns.
    pub wake: Waker,
}
