//! The report as JUnit XML, written with `quick-junit`.
//!
//! Every string the XML carries goes through [`xml_text`] first. `quick-junit` escapes
//! markup (`<`, `&`, quotes, and `>` so `]]>` cannot occur) but silently deletes control
//! characters, tabs and carriage returns and strips whole ANSI sequences; escaping them
//! visibly beforehand keeps a failure message readable and lossless instead.

use std::fmt::Write as _;

use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};

use crate::report::{first_line, Outcome, PropertyResult, Report};

/// `s` with every character that XML 1.0 cannot carry, or that a JUnit consumer would
/// drop or interpret, written as a visible Rust-style escape (`\u{1b}`).
///
/// Escaped: every control character (C0, DEL, C1) except line feed, and the
/// noncharacters U+FFFE and U+FFFF. A carriage return is read as a line end, as XML
/// parsers do (CRLF and a lone CR become LF). Everything else is kept as it is.
fn xml_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => out.push('\n'),
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push('\n');
            }
            c if c.is_control() || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// [`xml_text`] of the first line of `s`, shortened, for a `message` attribute.
fn xml_line(s: &str) -> String {
    xml_text(&first_line(s))
}

fn status(r: &PropertyResult) -> TestCaseStatus {
    match &r.outcome {
        Outcome::Passed => TestCaseStatus::success(),
        Outcome::Failed { message, .. } => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(xml_line(message))
                .set_type("PropertyFailed")
                .set_description(xml_text(&r.failure_text()));
            s
        }
        Outcome::Skipped { reason } => {
            let mut s = TestCaseStatus::skipped();
            let (line, full) = (xml_line(reason), xml_text(reason));
            if line != full {
                s.set_description(full);
            }
            s.set_message(line).set_type("Unsupported");
            s
        }
        Outcome::ExpectedDivergence { reason, failure } => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(xml_line(&format!("expected divergence: {reason}")))
                .set_type("ExpectedDivergence")
                .set_description(xml_text(failure));
            s
        }
    }
}

fn test_case(suite: &str, r: &PropertyResult) -> TestCase {
    let mut case = TestCase::new(xml_text(r.property.name()), status(r));
    let mut out = format!(
        "{} cases, {} shrink steps. {}",
        r.cases,
        r.shrink_steps,
        r.property.description()
    );
    let x = &r.exercised;
    if !x.is_empty() {
        let _ = write!(
            out,
            "\nexercised: {} cases ({} large); {x}",
            x.cases, x.large_cases
        );
    }
    for (name, value) in [
        ("cases", u64::from(x.cases)),
        ("large_cases", u64::from(x.large_cases)),
        ("largest_batch_rows", x.largest_batch),
        ("longest_text_bytes", x.longest_text),
        ("longest_listing", x.longest_listing),
        ("longest_history", x.longest_history),
    ] {
        case.add_property((name, value.to_string().as_str()));
    }
    for n in &r.notes {
        let _ = write!(out, "\nnote: {n}");
    }
    case.set_classname(suite)
        .set_time(r.duration)
        .set_system_out(xml_text(&out));
    case
}

/// The report as JUnit XML: one `<testsuite>` for the backend, one `<testcase>` per
/// property, `<failure>` / `<skipped>` where they apply. Expected divergences are
/// reported as skipped with their reason.
///
/// Control characters in names and messages are written as visible escapes
/// (`\u{1b}`), so the XML is always valid XML 1.0.
pub fn junit_xml(report: &Report) -> String {
    let name = xml_text(&format!("forge-conformance.{}", report.backend));
    let mut suite = TestSuite::new(name.as_str());
    suite
        .set_time(report.duration)
        .add_property(("cases", report.cases.to_string().as_str()));
    if let Some(store) = &report.store {
        suite.add_property(("store", xml_text(store.name).as_str()));
    }
    if let Some(bus) = &report.bus {
        let durable = if bus.durable { "durable" } else { "live only" };
        suite.add_property((
            "bus",
            xml_text(&format!("{} ({durable})", bus.name)).as_str(),
        ));
    }
    suite.add_test_cases(report.results.iter().map(|r| test_case(&name, r)));
    let mut junit = quick_junit::Report::new("forge-conformance");
    junit.set_time(report.duration).add_test_suite(suite);
    junit
        .to_string()
        .unwrap_or_else(|e| unreachable!("writing JUnit XML to memory cannot fail: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible_escapes() {
        assert_eq!(xml_text("a\0b\u{1}\u{1b}[1m"), "a\\u{0}b\\u{1}\\u{1b}[1m");
        assert_eq!(
            xml_text("t\tu\u{7f}\u{9b}\u{fffe}\u{ffff}"),
            "t\\u{9}u\\u{7f}\\u{9b}\\u{fffe}\\u{ffff}"
        );
        assert_eq!(xml_text("a\r\nb\rc\nd"), "a\nb\nc\nd");
        assert_eq!(xml_text("<&\"'>]]> é 🦀"), "<&\"'>]]> é 🦀");
    }
}
