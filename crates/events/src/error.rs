//! Why an event cannot be had, worded for the person who typed it; the
//! recorder turns each into its own error of the same kind.

/// Why `-e` (or `--filter`, `-G`) cannot be resolved.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// A bad value or combination, in words.
    #[error("{0}")]
    Usage(String),
    /// `-e` names nothing known.
    #[error("event '{name}' not found{}", .suggestion.as_ref().map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    Unknown {
        /// The name given.
        name: String,
        /// A close known name.
        suggestion: Option<String>,
    },
    /// tracefs could not be found, mounted or read.
    #[error("tracepoints need tracefs: {0}")]
    Tracefs(String),
    /// The kernel refused a filter for another reason than its text.
    #[error("cannot set the filter of {event}")]
    Filter {
        /// The event.
        event: String,
        /// The kernel's answer.
        source: std::io::Error,
    },
}
