//! How errors are shown to people: one rule for the whole crate.
//!
//! Our error types keep their cause as a typed `#[source]` and their message
//! does not repeat it; whoever prints an error prints the chain once, with
//! [`Chain`]: `main` for the error that ends the process, log lines for the
//! rest (`error = %Chain(&error)`).
//!
//! Some library errors both embed their cause in their message and return
//! it as the source (kube's `ServiceError: {0}`, kube-runtime's watcher
//! errors), and some hide it entirely (hyper's `client error (Connect)`
//! says nothing of the refused connection underneath). [`Chain`] walks the
//! whole chain, so the cause is shown, and skips a cause whose message the
//! text already contains, so it is shown once.
//!
//! Errors that hold another error as part of their own message rather than
//! as its cause (`model::FieldError`: "field: problem") have no source, so
//! nothing is printed twice either.

use std::error::Error;
use std::fmt;

/// Displays an error and its causes, `message: cause: cause`, each message
/// once.
#[derive(Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(error) = cause {
            let message = error.to_string();
            if !message.is_empty() && !text.contains(&message) {
                text.push_str(": ");
                text.push_str(&message);
            }
            cause = error.source();
        }
        f.write_str(&text)
    }
}

impl fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Embedding);

    /// The library habit: the cause is in the message and is the source.
    #[derive(Debug, thiserror::Error)]
    #[error("embedding: {0}")]
    struct Embedding(#[source] std::io::Error);

    #[test]
    fn every_cause_is_shown_once() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let error = Outer(Embedding(io));
        assert_eq!(
            Chain(&error).to_string(),
            "outer: embedding: connection refused"
        );
    }
}
