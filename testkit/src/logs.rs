//! Recording what was logged, to check a warning or a span in a test.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// What was logged: span names and event messages, in order.
#[derive(Default)]
pub struct Log {
    /// Names of the spans opened.
    pub spans: Vec<&'static str>,
    /// Messages of the events.
    pub events: Vec<String>,
    /// The events in full: the message, then each other field as ` name=value`.
    pub records: Vec<String>,
}

/// A subscriber that enables everything and records it into a [`Log`]; install it with
/// `tracing::subscriber::set_default(recorder.clone())` (for the current thread).
#[derive(Clone, Default)]
pub struct Recorder {
    log: Arc<Mutex<Log>>,
    next: Arc<AtomicU64>,
}

impl Recorder {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What was logged since the last take.
    pub fn take(&self) -> Log {
        std::mem::take(&mut *self.log())
    }
}

/// An event's message, and its other fields as ` name=value`.
#[derive(Default)]
struct Message {
    message: String,
    fields: String,
}

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.log().spans.push(span.metadata().name());
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut message = Message::default();
        event.record(&mut message);
        let mut log = self.log();
        log.records
            .push(format!("{}{}", message.message, message.fields));
        log.events.push(message.message);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
