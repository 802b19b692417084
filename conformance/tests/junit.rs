//! The JUnit XML is valid XML whatever the backend name, messages and notes contain:
//! markup characters come back verbatim through a real parser, characters XML 1.0
//! cannot carry (and other control characters) come back as visible `\u{..}` escapes,
//! and the counts and outcomes match the report.

use std::time::Duration;

use forge_conformance::{junit_xml, Outcome, Property, PropertyResult, Report};

/// Markup, a CDATA terminator, quotes, and characters XML 1.0 forbids or parsers mangle:
/// NUL, U+0001, an ANSI colour sequence, tab, CR, DEL, a C1 control (CSI) and U+FFFE.
const HOSTILE: &str =
    "a<b>&c \"q\" 'a' ]]> \0\u{1}\u{1b}[31mred\u{1b}[0m\tx\ry\u{7f}\u{9b}\u{fffe}";
/// [`HOSTILE`] as it must read back: markup verbatim, every control character except a
/// line feed and the noncharacter as a visible escape, CR as a line feed.
const HOSTILE_BACK: &str =
    "a<b>&c \"q\" 'a' ]]> \\u{0}\\u{1}\\u{1b}[31mred\\u{1b}[0m\\u{9}x\ny\\u{7f}\\u{9b}\\u{fffe}";

fn result(property: Property, outcome: Outcome) -> PropertyResult {
    PropertyResult {
        property,
        outcome,
        cases: 7,
        shrink_steps: 3,
        duration: Duration::from_millis(12),
        notes: vec![format!("note {HOSTILE}")],
        exercised: forge_conformance::Exercised::default(),
    }
}

fn hostile_report() -> Report {
    Report {
        backend: format!("evil {HOSTILE}"),
        store: None,
        bus: None,
        cases: 7,
        results: vec![
            result(Property::Upsert, Outcome::Passed),
            result(
                Property::Pagination,
                Outcome::Failed {
                    message: format!("lost {HOSTILE}\nsecond line"),
                    minimal: Some(format!("Case {{ s: {HOSTILE:?}, raw: \"{HOSTILE}\" }}")),
                    regression: Some(format!("replay(r#\"{HOSTILE}\"#)")),
                },
            ),
            result(
                Property::Bus,
                Outcome::Skipped {
                    reason: format!("no bus {HOSTILE}"),
                },
            ),
            result(
                Property::BusResume,
                Outcome::ExpectedDivergence {
                    reason: format!("declared {HOSTILE}"),
                    failure: format!("diverged {HOSTILE}"),
                },
            ),
            result(Property::RoundTrip, Outcome::Passed),
        ],
        duration: Duration::from_millis(80),
    }
}

fn attr<'a>(node: roxmltree::Node<'a, '_>, name: &str) -> &'a str {
    node.attribute(name)
        .unwrap_or_else(|| panic!("<{}> has no {name}", node.tag_name().name()))
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children().find(|c| c.has_tag_name(tag))
}

fn text(node: roxmltree::Node<'_, '_>) -> String {
    node.children().filter_map(|c| c.text()).collect()
}

#[test]
fn hostile_names_and_messages_still_make_valid_junit() {
    let report = hostile_report();
    let xml = junit_xml(&report);
    let doc = roxmltree::Document::parse(&xml)
        .unwrap_or_else(|e| panic!("the JUnit XML does not parse: {e}\n{xml}"));

    let root = doc.root_element();
    assert!(root.has_tag_name("testsuites"), "{xml}");
    for node in [root, child(root, "testsuite").expect("a <testsuite>")] {
        assert_eq!(attr(node, "tests"), "5", "{xml}");
        assert_eq!(attr(node, "failures"), "1", "{xml}");
        assert_eq!(attr(node, "errors"), "0", "{xml}");
        // A skip and an expected divergence: neither passes nor fails.
        assert_eq!(attr(node, "skipped"), "2", "{xml}");
    }
    let suite = child(root, "testsuite").unwrap();
    let suite_name = format!("forge-conformance.evil {HOSTILE_BACK}");
    // Attribute values are read with whitespace normalised, as XML requires.
    let suite_name_attr = suite_name.replace('\n', " ");
    assert_eq!(attr(suite, "name"), suite_name_attr);

    let cases: Vec<_> = suite
        .children()
        .filter(|c| c.has_tag_name("testcase"))
        .collect();
    let names: Vec<&str> = cases.iter().map(|c| attr(*c, "name")).collect();
    assert_eq!(
        names,
        ["upsert", "pagination", "bus", "bus_resume", "round_trip"]
    );
    for case in &cases {
        assert_eq!(attr(*case, "classname"), suite_name_attr);
        let out = text(child(*case, "system-out").expect("<system-out>"));
        assert!(out.contains(&format!("note {HOSTILE_BACK}")), "{out:?}");
    }

    // Passes carry neither <failure> nor <skipped>.
    for case in [cases[0], cases[4]] {
        assert!(child(case, "failure").is_none() && child(case, "skipped").is_none());
    }

    let failure = child(cases[1], "failure").expect("pagination has a <failure>");
    assert!(child(cases[1], "skipped").is_none());
    assert_eq!(
        attr(failure, "message"),
        format!("lost {HOSTILE_BACK}").replace('\n', " ")
    );
    let body = text(failure);
    assert!(
        body.contains(&format!("lost {HOSTILE_BACK}\nsecond line")),
        "{body:?}"
    );
    assert!(
        body.contains(&format!("raw: \"{HOSTILE_BACK}\" }}")),
        "{body:?}"
    );
    assert!(
        body.contains(&format!("replay(r#\"{HOSTILE_BACK}\"#)")),
        "{body:?}"
    );

    let skipped = child(cases[2], "skipped").expect("bus is <skipped>");
    assert!(child(cases[2], "failure").is_none());
    assert!(
        attr(skipped, "message").contains(&format!("no bus {HOSTILE_BACK}").replace('\n', " ")),
        "{:?}",
        attr(skipped, "message")
    );

    let diverges = child(cases[3], "skipped").expect("an expected divergence is <skipped>");
    assert!(child(cases[3], "failure").is_none());
    assert!(
        attr(diverges, "message").starts_with("expected divergence: declared "),
        "{:?}",
        attr(diverges, "message")
    );
    assert!(
        text(diverges).contains(&format!("diverged {HOSTILE_BACK}")),
        "{:?}",
        text(diverges)
    );
}

#[test]
fn a_property_that_was_skipped_is_never_written_as_a_pass() {
    let mut report = hostile_report();
    report.results = vec![result(
        Property::Concurrency,
        Outcome::Skipped {
            reason: "store `x` declares concurrent_writers = false".into(),
        },
    )];
    let xml = junit_xml(&report);
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase"))
        .unwrap();
    assert_eq!(attr(case, "name"), "concurrency");
    assert!(child(case, "skipped").is_some(), "{xml}");
    assert_eq!(attr(doc.root_element(), "skipped"), "1", "{xml}");
    assert_eq!(attr(doc.root_element(), "tests"), "1", "{xml}");
}
