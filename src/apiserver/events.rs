//! The apiserver as an event sink (`events::sink::EventSink`): client-go's
//! `recordToSink` decides create or patch and retries; this makes the calls. A transport
//! failure or a 5xx is transient (tried again); a 404 on a patch means the event is gone
//! (created again); any other refusal is final, as client-go treats a `StatusError`.

use super::client::{ApiClient, ApiError};
use crate::api::Event;
use crate::events::sink::{patch_body, EventSink, SinkError};
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

/// The sink's reading of a failed request.
fn sink_error(e: ApiError) -> SinkError {
    match e.code() {
        Some(404) => SinkError::NotFound,
        _ if e.is_unreachable() => SinkError::Transient(crate::util::Chain(&e).to_string()),
        _ => SinkError::Rejected(crate::util::Chain(&e).to_string()),
    }
}

fn namespace(event: &Event) -> &str {
    if event.metadata.namespace.is_empty() {
        "default"
    } else {
        &event.metadata.namespace
    }
}

impl EventSink for ApiEventSink {
    fn create(&mut self, event: &Event) -> Result<Event, SinkError> {
        let mut event = event.clone();
        // A create never carries a resourceVersion (client-go clears it).
        event.metadata.resource_version.clear();
        let path = format!("/api/v1/namespaces/{}/events", namespace(&event));
        self.client.write("POST", &path, &event).map_err(sink_error)
    }

    fn patch(&mut self, event: &Event) -> Result<Event, SinkError> {
        let path = format!("/api/v1/namespaces/{}/events/{}", namespace(event), event.metadata.name);
        let body = patch_body(event).to_string().into_bytes();
        let bytes = self
            .client
            .send("PATCH", &path, Some(("application/strategic-merge-patch+json", &body)))
            .map_err(sink_error)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| SinkError::Rejected(format!("PATCH {path}: the answer is not an Event: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> ApiError {
        ApiError::Status { method: "PATCH", url: "u".into(), code, reason: String::new(), message: String::new() }
    }

    #[test]
    fn failures_read_as_client_go_reads_them() {
        assert_eq!(sink_error(status(404)), SinkError::NotFound);
        assert!(matches!(sink_error(status(503)), SinkError::Transient(_)));
        assert!(matches!(sink_error(status(429)), SinkError::Transient(_)));
        assert!(matches!(sink_error(status(422)), SinkError::Rejected(_)));
        assert!(matches!(sink_error(status(403)), SinkError::Rejected(_)));
    }
}
