//! Error text that quotes the input, made safe to print: short and on one line.
//!
//! An input error quotes what it got, and the input may be anything: a 5 MB string
//! where a number belongs, a type name of 10 KB, a newline inside an id. serde's own
//! messages quote whole values (`invalid type: string "…", expected u64`, ``unknown
//! field `…` ``). [`clip`] is applied to every input error the facade builds.

use std::fmt::Write as _;

/// The longest prefix of one quoted value an input error keeps, in bytes.
pub const QUOTE_MAX: usize = 300;

/// The longest input error text, in bytes (for a message quoting many values).
pub const MESSAGE_MAX: usize = 2000;

/// `text` (an error message) made safe to print on one line:
///
/// - every quoted value — `"…"` with backslash escapes, as `{:?}` and serde write
///   strings, or `` `…` ``, as serde writes field and variant names — and every
///   stretch of text between them keeps at most [`QUOTE_MAX`] bytes; a longer one is
///   cut with `…` and followed by its length, e.g. `"AAAA…" (5242880 bytes)`;
/// - control characters and the Unicode line separators are escaped (`\n`,
///   `\u{1b}`), so the text is one line;
/// - the whole is cut at [`MESSAGE_MAX`] bytes.
///
/// Text that needs none of this is returned unchanged.
pub fn clip(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MESSAGE_MAX + 64));
    let mut run = String::new();
    // The delimiter of the quoted value being read, if any.
    let mut quote: Option<char> = None;
    // Inside `"…"`: the previous character was an unescaped backslash.
    let mut escaped = false;
    for c in text.chars() {
        match quote {
            None if c == '"' || c == '`' => {
                push_run(&mut out, &run, None);
                run.clear();
                quote = Some(c);
                escaped = false;
            }
            None => run.push(c),
            Some(q) if c == q && !escaped => {
                push_run(&mut out, &run, Some(q));
                run.clear();
                quote = None;
            }
            Some(q) => {
                escaped = q == '"' && c == '\\' && !escaped;
                run.push(c);
            }
        }
    }
    if let Some(q) = quote {
        // Unterminated: shown with its opening delimiter only.
        out.push(q);
    }
    push_run(&mut out, &run, None);
    if out.len() <= MESSAGE_MAX {
        return out;
    }
    let total = out.len();
    let mut cut = prefix(&out, MESSAGE_MAX).to_owned();
    let _ = write!(cut, "… (cut from {total} bytes)");
    cut
}

/// Appends one run, escaped and cut to [`QUOTE_MAX`] bytes, inside `quote` if given.
fn push_run(out: &mut String, run: &str, quote: Option<char>) {
    let escaped = escape(run);
    if let Some(q) = quote {
        out.push(q);
    }
    let long = escaped.len() > QUOTE_MAX;
    if long {
        out.push_str(prefix(&escaped, QUOTE_MAX));
        out.push('…');
    } else {
        out.push_str(&escaped);
    }
    if let Some(q) = quote {
        out.push(q);
    }
    if long {
        let _ = write!(out, " ({} bytes)", run.len());
    }
}

/// `s` with control characters and line separators escaped.
fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    let needs = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
    if !s.chars().any(needs) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.into()
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary
/// and not on a lone backslash (which would escape the closing quote).
fn prefix(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let p = &s[..end];
    let backslashes = p.len() - p.trim_end_matches('\\').len();
    if backslashes % 2 == 1 {
        &p[..p.len() - 1]
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged() {
        for text in [
            "",
            "line 3: text-delta event: missing field `text`",
            r#"unknown event type "text-delat": not a replay line"#,
            r#"add {"type":"crash"} to leave it open"#,
            "ünïcödé \"with \\\"escapes\\\"\" and `ticks`",
        ] {
            assert_eq!(clip(text), text);
        }
    }

    #[test]
    fn a_long_quoted_value_keeps_a_prefix_and_its_length() {
        let big = "A".repeat(5 << 20);
        let msg = format!("invalid type: string {big:?}, expected u64");
        let c = clip(&msg);
        assert!(c.len() <= QUOTE_MAX + 100, "{} bytes", c.len());
        assert!(c.starts_with("invalid type: string \"AAAA"), "{c}");
        assert!(
            c.ends_with(&format!("A…\" ({} bytes), expected u64", big.len())),
            "{c}"
        );
    }

    #[test]
    fn a_long_backtick_name_is_cut_too() {
        let kind = "x".repeat(10 * 1024);
        let c = clip(&format!(
            "unknown variant `{kind}`, expected one of `a`, `b`"
        ));
        assert!(c.len() <= QUOTE_MAX + 100, "{} bytes: {c}", c.len());
        assert!(
            c.contains("x…` (10240 bytes), expected one of `a`, `b`"),
            "{c}"
        );
    }

    #[test]
    fn control_characters_are_escaped_so_the_text_is_one_line() {
        let c = clip("unknown field `a\nb\r\tc\u{1b}[31m\u{2028}`, expected `x`");
        assert_eq!(
            c,
            "unknown field `a\\nb\\r\\tc\\u{1b}[31m\\u{2028}`, expected `x`"
        );
        assert!(!c.contains('\n'));
        // Outside quotes as well.
        assert_eq!(clip("at\nline"), "at\\nline");
    }

    #[test]
    fn a_cut_never_splits_a_character_or_leaves_a_lone_backslash() {
        let value = format!("{}é{}", "a".repeat(QUOTE_MAX - 1), "b".repeat(400));
        let c = clip(&format!("`{value}`"));
        assert!(
            c.starts_with(&format!("`{}…`", "a".repeat(QUOTE_MAX - 1))),
            "{c}"
        );
        let value = format!("{}\\\"{}", "a".repeat(QUOTE_MAX - 1), "b".repeat(400));
        let c = clip(&format!("\"{value}\""));
        assert!(
            c.starts_with(&format!("\"{}…\"", "a".repeat(QUOTE_MAX - 1))),
            "{c}"
        );
    }

    #[test]
    fn escaped_quotes_do_not_end_a_value() {
        let value = format!("{:?}", format!("{}\"{}", "q".repeat(10), "z".repeat(500)));
        let c = clip(&format!("got {value} here"));
        assert!(c.starts_with("got \"qqqqqqqqqq\\\"zzz"), "{c}");
        assert!(
            c.ends_with(&format!("z…\" ({} bytes) here", value.len() - 2)),
            "{c}"
        );
    }

    #[test]
    fn many_values_are_bounded_as_a_whole() {
        let many = "`ab` ".repeat(5000);
        let c = clip(&many);
        assert!(c.len() <= MESSAGE_MAX + 40, "{} bytes", c.len());
        assert!(c.ends_with("… (cut from 25000 bytes)"), "{c}");
        // An unterminated quote is cut like any other run.
        let c = clip(&format!("got \"{}", "u".repeat(1000)));
        assert!(c.len() < QUOTE_MAX + 40, "{c}");
    }
}
