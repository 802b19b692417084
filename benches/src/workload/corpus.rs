//! The real text W2 streams: prose from this project's Markdown documentation and code
//! from its Rust sources, embedded when the benchmark is built. A coding agent's session
//! is mostly that: an explanation in prose, and files read by tools.
//!
//! The corpus is the files of the commit the benchmark was built from, so W2's content
//! moves a little as they change; its kind (English prose with code spans and tables,
//! Rust source) is what matters to a compressor, and that stays.

use rand::rngs::StdRng;
use rand::Rng;

/// Markdown documentation: the prose of W2's user messages, reasoning and text.
const PROSE: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../README.md")),
    ("docs/design.md", include_str!("../../../docs/design.md")),
    (
        "docs/backends.md",
        include_str!("../../../docs/backends.md"),
    ),
    (
        "docs/reliability.md",
        include_str!("../../../docs/reliability.md"),
    ),
    ("docs/scaling.md", include_str!("../../../docs/scaling.md")),
    ("docs/serve.md", include_str!("../../../docs/serve.md")),
    (
        "docs/replay-format.md",
        include_str!("../../../docs/replay-format.md"),
    ),
];

/// Rust sources: what W2's tools read.
const CODE: &[(&str, &str)] = &[
    (
        "core/src/stream.rs",
        include_str!("../../../core/src/stream.rs"),
    ),
    (
        "core/src/projector.rs",
        include_str!("../../../core/src/projector.rs"),
    ),
    (
        "core/src/event.rs",
        include_str!("../../../core/src/event.rs"),
    ),
    (
        "core/src/memory.rs",
        include_str!("../../../core/src/memory.rs"),
    ),
    (
        "core/src/codec.rs",
        include_str!("../../../core/src/codec.rs"),
    ),
    (
        "core/src/retry.rs",
        include_str!("../../../core/src/retry.rs"),
    ),
    (
        "backends/redb/src/store.rs",
        include_str!("../../../backends/redb/src/store.rs"),
    ),
    (
        "backends/redb/src/write.rs",
        include_str!("../../../backends/redb/src/write.rs"),
    ),
    (
        "backends/redb/src/journal.rs",
        include_str!("../../../backends/redb/src/journal.rs"),
    ),
    ("benches/src/run.rs", include_str!("../run.rs")),
];

/// One of the corpus's two kinds of text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Markdown documentation.
    Prose,
    /// Rust source.
    Code,
}

impl Kind {
    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Prose => PROSE,
            Self::Code => CODE,
        }
    }
}

/// A place in one file of the corpus, read forward (wrapping to the file's start).
pub(crate) struct Cursor {
    text: &'static str,
    at: usize,
}

impl Cursor {
    /// A random file of `kind` at a random character; its path.
    pub(crate) fn random(kind: Kind, rng: &mut StdRng) -> (Self, &'static str) {
        let files = kind.files();
        let (path, text) = files[rng.random_range(0..files.len())];
        let mut at = rng.random_range(0..text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        (Self { text, at }, path)
    }

    /// The next characters that fit in `n` bytes, padded with spaces to exactly `n`
    /// bytes (a character that would not fit is left for the next call).
    pub(crate) fn take(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n);
        loop {
            if self.at >= self.text.len() {
                self.at = 0;
            }
            let Some(c) = self.text[self.at..].chars().next() else {
                break; // an empty file: all padding
            };
            if out.len() + c.len_utf8() > n {
                break;
            }
            out.push(c);
            self.at += c.len_utf8();
        }
        while out.len() < n {
            out.push(' ');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn takes_are_exactly_n_bytes_of_the_file_in_order() {
        let mut rng = StdRng::seed_from_u64(3);
        for kind in [Kind::Prose, Kind::Code] {
            for _ in 0..50 {
                let (mut c, path) = Cursor::random(kind, &mut rng);
                for n in [8, 400, 4000] {
                    let start = c.at;
                    let piece = c.take(n);
                    assert_eq!(piece.len(), n, "{path}");
                    // What was read, then padding: the file's next text (past its end,
                    // from its start again).
                    let read = if c.at >= start {
                        c.text[start..c.at].to_owned()
                    } else {
                        format!("{}{}", &c.text[start..], &c.text[..c.at])
                    };
                    assert!(piece.starts_with(&read), "{path}: {piece:?} / {read:?}");
                    assert!(piece[read.len()..].bytes().all(|b| b == b' '), "{path}");
                    assert!(
                        n - read.len() < 4,
                        "{path}: padding only for a wide character"
                    );
                }
            }
        }
        assert!(PROSE.iter().all(|(_, t)| t.len() > 2_000));
        assert!(CODE.iter().all(|(_, t)| t.len() > 4_000));
    }

    #[test]
    fn a_character_that_does_not_fit_waits_for_the_next_take() {
        let mut c = Cursor {
            text: "ab×cd",
            at: 0,
        };
        // "ab" + "×" (2 bytes) is 4 bytes: 3 bytes hold "ab" and a space.
        assert_eq!(c.take(3), "ab ");
        assert_eq!(c.take(3), "×c");
        assert_eq!(c.take(4), "dab ");
    }
}
