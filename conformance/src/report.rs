//! The suite's report: one result per property and a human-readable table (JUnit XML
//! is in `junit.rs`).

use std::fmt::{self, Write as _};
use std::time::Duration;

use forge_core::{BusCapabilities, Capabilities};

use crate::{Exercised, Property};

/// How one property ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every case held.
    Passed,
    /// A case failed.
    Failed {
        /// What did not hold.
        message: String,
        /// The shrunk minimal failing case (`Debug`), if the failure came from a case.
        minimal: Option<String>,
        /// A regression test reproducing the case, ready to paste.
        regression: Option<String>,
    },
    /// The property does not apply to this backend.
    Skipped {
        /// Why (the missing capability).
        reason: String,
    },
    /// The property failed and the backend declared this divergence.
    ExpectedDivergence {
        /// The declared reason.
        reason: String,
        /// What failed.
        failure: String,
    },
}

impl Outcome {
    /// `passed`, `FAILED`, `skipped` or `diverges`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed { .. } => "FAILED",
            Outcome::Skipped { .. } => "skipped",
            Outcome::ExpectedDivergence { .. } => "diverges",
        }
    }

    /// Whether this outcome fails the suite.
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failed { .. })
    }
}

/// The result of one property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PropertyResult {
    /// Which property.
    pub property: Property,
    /// How it ended.
    pub outcome: Outcome,
    /// Generated cases run (not counting shrinking).
    pub cases: u32,
    /// Cases run while shrinking a failure.
    pub shrink_steps: u32,
    /// Wall time.
    pub duration: Duration,
    /// Parts of the property that did not apply, and other remarks.
    pub notes: Vec<String>,
    /// What the cases reached: the largest batch, text, listing and history.
    pub exercised: Exercised,
}

impl PropertyResult {
    /// The full failure text: message, minimal case and regression test. Empty unless
    /// the property failed.
    pub fn failure_text(&self) -> String {
        let Outcome::Failed {
            message,
            minimal,
            regression,
        } = &self.outcome
        else {
            return String::new();
        };
        let mut s = format!(
            "property `{}` failed after {} case(s): {message}",
            self.property.name(),
            self.cases
        );
        if let Some(m) = minimal {
            let _ = write!(
                s,
                "\n\nminimal failing case ({} shrink steps):\n{m}",
                self.shrink_steps
            );
        }
        if let Some(r) = regression {
            let _ = write!(s, "\n\nregression test (paste into your tests):\n{r}");
        }
        s
    }

    fn summary_line(&self) -> String {
        match &self.outcome {
            Outcome::Passed => String::new(),
            Outcome::Failed { message, .. } => first_line(message),
            Outcome::Skipped { reason } => reason.clone(),
            Outcome::ExpectedDivergence { reason, .. } => format!("declared: {reason}"),
        }
    }
}

pub(crate) fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > 100 {
        let cut: String = line.chars().take(100).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

/// The suite's result for one backend.
#[derive(Clone, Debug)]
pub struct Report {
    /// The factory's name.
    pub backend: String,
    /// The store's capabilities, if a store could be opened.
    pub store: Option<Capabilities>,
    /// The bus's capabilities, if the backend has a bus.
    pub bus: Option<BusCapabilities>,
    /// Cases per property asked for.
    pub cases: u32,
    /// One result per property run.
    pub results: Vec<PropertyResult>,
    /// Wall time of the whole run.
    pub duration: Duration,
}

impl Report {
    /// Whether no property failed (skips and expected divergences do not fail).
    pub fn is_success(&self) -> bool {
        !self.results.iter().any(|r| r.outcome.is_failure())
    }

    /// `(passed, failed, skipped, expected divergences)`.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let count = |f: fn(&Outcome) -> bool| self.results.iter().filter(|r| f(&r.outcome)).count();
        (
            count(|o| matches!(o, Outcome::Passed)),
            count(Outcome::is_failure),
            count(|o| matches!(o, Outcome::Skipped { .. })),
            count(|o| matches!(o, Outcome::ExpectedDivergence { .. })),
        )
    }

    /// The result of `property`, if it ran.
    pub fn result(&self, property: Property) -> Option<&PropertyResult> {
        self.results.iter().find(|r| r.property == property)
    }
}

impl fmt::Display for Report {
    /// One line per property (outcome, cases, time), a summary line, then the full text
    /// of every failure.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = self.store.as_ref().map_or("unavailable", |c| c.name);
        let bus = match &self.bus {
            Some(b) if b.durable => format!("{} (durable)", b.name),
            Some(b) => format!("{} (live only)", b.name),
            None => "none".to_owned(),
        };
        writeln!(
            f,
            "forge-conformance: backend {} (store {store}, bus {bus}), {} cases per property",
            self.backend, self.cases
        )?;
        for r in &self.results {
            let detail = r.summary_line();
            let reached = if r.exercised.is_empty() || r.cases == 0 {
                String::new()
            } else {
                format!("  ({} large; {})", r.exercised.large_cases, r.exercised)
            };
            writeln!(
                f,
                "  {:<18} {:<8} {:>5} cases {:>8.2}s{reached}{}{}",
                r.property.name(),
                r.outcome.label(),
                r.cases,
                r.duration.as_secs_f64(),
                if detail.is_empty() { "" } else { "  " },
                detail
            )?;
        }
        let (passed, failed, skipped, diverges) = self.counts();
        writeln!(
            f,
            "summary: {passed} passed, {failed} failed, {skipped} skipped, {diverges} expected \
             divergences in {:.2}s",
            self.duration.as_secs_f64()
        )?;
        for r in self.results.iter().filter(|r| r.outcome.is_failure()) {
            writeln!(f, "\n{}", r.failure_text())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let r = |property, outcome| PropertyResult {
            property,
            outcome,
            cases: 3,
            shrink_steps: 0,
            duration: Duration::from_millis(5),
            notes: vec![],
            exercised: Exercised::default(),
        };
        Report {
            backend: "x<y>".into(),
            store: None,
            bus: None,
            cases: 3,
            results: vec![
                r(Property::Upsert, Outcome::Passed),
                r(
                    Property::Pagination,
                    Outcome::Failed {
                        message: "lost \"m\" & <more>\nsecond line".into(),
                        minimal: Some("Case { n: 1 }".into()),
                        regression: Some("replay(…)".into()),
                    },
                ),
                r(
                    Property::Bus,
                    Outcome::Skipped {
                        reason: "no bus\0".into(),
                    },
                ),
            ],
            duration: Duration::from_millis(20),
        }
    }

    #[test]
    fn display_has_one_line_per_property_and_a_summary() {
        let text = report().to_string();
        assert!(text.contains("upsert"), "{text}");
        assert!(text.contains("FAILED"), "{text}");
        assert!(
            text.contains("summary: 1 passed, 1 failed, 1 skipped"),
            "{text}"
        );
        assert!(text.contains("Case { n: 1 }"), "{text}");
        assert!(!report().is_success());
    }
}
