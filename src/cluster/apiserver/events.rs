//! The apiserver as an event sink (`events::sink::EventSink`): client-go's
//! `recordToSink` decides create or patch and retries; this makes the calls. A transport
//! failure or a 5xx is transient (tried again); a 404 on a patch means the event is gone
//! (created again); any other refusal is final, as client-go treats a `StatusError`.

use super::client::{ApiClient, ApiError};
use crate::api::Event;
use crate::node::events::sink::{patch_body, EventSink, SinkError};
use std::sync::Arc;

/// Events written to the apiserver.
pub struct ApiEventSink {
    client: Arc<ApiClient>,
}

impl ApiEventSink {
    /// A sink over `client`.
    pub fn new(client: Arc<ApiClient>) -> ApiEventSink {
        ApiEventSink { client }
    }
}

/// The sink's reading of a failed request (client-go's: 404, transient, or final).
pub fn sink_error(e: &ApiError) -> SinkError {
    match e.code() {
        Some(404) => SinkError::NotFound,
        _ if e.is_unreachable() => SinkError::Transient(crate::base::errors::Chain(e).to_string()),
        _ => SinkError::Rejected(crate::base::errors::Chain(e).to_string()),
    }
}

fn namespace(event: &Event) -> &str {
    if event.metadata.namespace.is_empty() {
        "default"
    } else {
        &event.metadata.namespace
    }
}

impl ApiEventSink {
    /// `POST` of `event` (without a resourceVersion, as client-go clears it).
    pub fn create_raw(&mut self, event: &Event) -> Result<Event, ApiError> {
        let mut event = event.clone();
        event.metadata.resource_version.clear();
        let path = format!("/api/v1/namespaces/{}/events", namespace(&event));
        self.client.write("POST", &path, &event)
    }

    /// `PATCH` of `event`'s count, last timestamp and message (a strategic merge patch).
    pub fn patch_raw(&mut self, event: &Event) -> Result<Event, ApiError> {
        let path = format!("/api/v1/namespaces/{}/events/{}", namespace(event), event.metadata.name);
        let body = patch_body(event).to_string().into_bytes();
        let bytes = self.client.send("PATCH", &path, Some(("application/strategic-merge-patch+json", &body)))?;
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Decode {
            method: "PATCH",
            url: path,
            what: "Event",
            message: e.to_string(),
        })
    }
}

impl EventSink for ApiEventSink {
    fn create(&mut self, event: &Event) -> Result<Event, SinkError> {
        self.create_raw(event).map_err(|e| sink_error(&e))
    }

    fn patch(&mut self, event: &Event) -> Result<Event, SinkError> {
        self.patch_raw(event).map_err(|e| sink_error(&e))
    }
}

/// The event sink of cluster mode: every correlated event joins the link's spool, in order
/// with the statuses, and `fl-apisync` delivers it (create, or patch a repeat) with
/// client-go's retries; while the apiserver is away it waits there.
pub struct SpoolSink {
    link: Arc<super::link::Link>,
}

impl SpoolSink {
    /// A sink into `link`'s spool.
    pub fn new(link: Arc<super::link::Link>) -> SpoolSink {
        SpoolSink { link }
    }
}

impl EventSink for SpoolSink {
    fn create(&mut self, event: &Event) -> Result<Event, SinkError> {
        self.link.push(super::spool::Pending::Event(Box::new(event.clone())));
        Ok(event.clone())
    }

    fn patch(&mut self, event: &Event) -> Result<Event, SinkError> {
        self.create(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_as_client_go_reads_them() {
        assert_eq!(sink_error(&ApiError::with_code(404)), SinkError::NotFound);
        assert!(matches!(sink_error(&ApiError::with_code(503)), SinkError::Transient(_)));
        assert!(matches!(sink_error(&ApiError::with_code(429)), SinkError::Transient(_)));
        assert!(matches!(sink_error(&ApiError::with_code(422)), SinkError::Rejected(_)));
        assert!(matches!(sink_error(&ApiError::with_code(403)), SinkError::Rejected(_)));
    }
}
