//! What real data looks like and the suite's friendly data did not: sizes past every
//! internal limit, text over all of Unicode, ids shaped as generated ids (and ids that
//! are prefixes, near-duplicates or canonical equivalents of one another), numbers
//! over their whole range.
//!
//! Large values are built from compact specs (a length and a seed), so a failing case
//! prints, shrinks and replays as a few numbers.

use std::ops::RangeInclusive;

use proptest::prelude::*;
use serde::{Deserialize, Serialize};

/// The sizes of large cases at a scale factor (`Config::scale`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// The factor (1 by default).
    pub scale: u32,
}

impl Sizes {
    /// Sizes at `scale` (at least 1).
    pub fn new(scale: u32) -> Self {
        Self {
            scale: scale.max(1),
        }
    }

    /// Entries of a long listing (sessions of a tenant, open items, a history): always
    /// past 1,024, the largest power of two an implementation might page by.
    pub fn listing(self) -> RangeInclusive<u16> {
        let s = self.scale.min(26) as u16;
        1_250 * s..=2_500 * s
    }

    /// Bytes of a long text: from 2 MiB (past a 1 MiB limit) to 4 MiB.
    pub fn text(self) -> RangeInclusive<u32> {
        let s = self.scale.min(256);
        (2 << 20) * s..=(4 << 20) * s
    }
}

/// A page size for large cases: 101-1,000 (up to the cap) four times in six, else
/// exactly the cap or far above it.
pub(crate) fn large_page() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => 101u16..=1000,
        1 => Just(1000u16),
        1 => Just(5_000u16),
    ]
}

/// A small deterministic generator (splitmix64), so large values come from a seed.
#[derive(Clone, Debug)]
pub struct Mix(u64);

impl Mix {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Sequences a careless store changes: NUL and other controls, line and paragraph
/// separators, a BOM, noncharacters, the ends of the BMP and of Unicode, astral
/// characters, and combining marks whose NFC form differs (`e` + U+0301 is `é`; U+212B
/// ANGSTROM SIGN normalizes to U+00C5).
pub const TRICKY: &[&str] = &[
    "\0",
    "a\0b",
    "\u{1}\u{1f}\u{7f}",
    "\u{80}\u{9f}",
    "\t\r\n",
    "\u{2028}\u{2029}",
    "\u{feff}",
    "\u{fffe}\u{ffff}",
    "\u{d7ff}\u{e000}",
    "\u{10ffff}",
    "🦀",
    "𝄞",
    "e\u{301}",
    "é",
    "A\u{30a}",
    "\u{212b}",
    "\u{1e9b}\u{323}",
    "\u{300}",
    "\\\"'",
    "\u{200b}",
];

/// One character of any kind: mostly printable ASCII, then every plane of Unicode.
fn any_char(mix: &mut Mix) -> char {
    loop {
        let c = match mix.below(16) {
            0..=7 => char::from(32 + mix.below(95) as u8),
            8 => char::from(mix.below(32) as u8),
            9 => char::from_u32(0x300 + mix.below(0x70) as u32).unwrap_or('x'),
            10..=11 => char::from_u32(0x80 + mix.below(0xd780) as u32).unwrap_or('x'),
            12 => char::from_u32(0xe000 + mix.below(0x2000) as u32).unwrap_or('x'),
            13..=14 => char::from_u32(0x1_0000 + mix.below(0x10_0000) as u32).unwrap_or('x'),
            _ => '\u{10ffff}',
        };
        if char::from_u32(u32::from(c)).is_some() {
            return c;
        }
    }
}

/// A string of about `bytes` bytes (never more) from `seed`, over all of Unicode and
/// with [`TRICKY`] sequences sprinkled in, incompressible enough that storage cannot
/// shortcut it.
pub fn text_of(seed: u64, bytes: usize) -> String {
    let mut mix = Mix::new(seed);
    let mut s = String::with_capacity(bytes);
    while s.len() < bytes {
        if mix.below(64) == 0 {
            let t = TRICKY[mix.below(TRICKY.len() as u64) as usize];
            if s.len() + t.len() <= bytes {
                s.push_str(t);
            }
            continue;
        }
        let c = any_char(&mut mix);
        if s.len() + c.len_utf8() > bytes {
            break;
        }
        s.push(c);
    }
    // Pad with ASCII to the exact length.
    while s.len() < bytes {
        s.push('.');
    }
    s
}

/// A long text, as a spec: `bytes` bytes from `seed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BigText {
    /// The seed.
    pub seed: u64,
    /// The length in bytes.
    pub bytes: u32,
}

impl BigText {
    /// The text.
    pub fn text(self) -> String {
        text_of(self.seed, self.bytes as usize)
    }
}

/// Long texts of `sizes`.
pub fn big_text(sizes: Sizes) -> impl Strategy<Value = BigText> {
    (any::<u64>(), sizes.text()).prop_map(|(seed, bytes)| BigText { seed, bytes })
}

/// A string over all of Unicode: any scalar value, [`TRICKY`] sequences, and mixes.
pub fn unicode(max_chars: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::collection::vec(any::<char>(), 0..=max_chars)
            .prop_map(|v| v.into_iter().collect::<String>()),
        2 => (any::<u64>(), 0..=max_chars * 2).prop_map(|(seed, n)| text_of(seed, n)),
        2 => proptest::sample::select(TRICKY.to_vec()).prop_map(str::to_owned),
        1 => proptest::collection::vec(proptest::sample::select(TRICKY.to_vec()), 1..4)
            .prop_map(|v| v.concat()),
    ]
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// An id as `forge_core::id::ascending` makes it: `prefix_` + the 16 hex digits of
/// `ms * 4096 + counter` + 10 base62 characters from `tail`.
pub fn real_id(prefix: &str, ms: u64, counter: u16, tail: u64) -> String {
    use std::fmt::Write as _;
    let mut s = format!("{prefix}_");
    let _ = write!(s, "{:016x}", ms * 4096 + u64::from(counter % 4096));
    let mut mix = Mix::new(tail);
    for _ in 0..10 {
        s.push(char::from(BASE62[mix.below(62) as usize]));
    }
    s
}

/// Printable characters without whitespace (what `check_external` admits), from all of
/// Unicode: astral characters and combining marks included.
fn id_char(mix: &mut Mix) -> char {
    loop {
        let c = any_char(mix);
        if !c.is_control() && !c.is_whitespace() {
            return c;
        }
    }
}

/// Valid external ids (1–256 bytes, printable, no whitespace), `n` of them from
/// `seed`, built to trip a store that compares ids loosely: real ids minted in one
/// millisecond (a counter apart, as several threads make them); ids that are prefixes of
/// one another; ids differing only in their last character or only in case; canonically
/// equivalent ids (`é` vs `e` + U+0301); 256-byte ids differing only at the end; ids
/// over all of Unicode.
pub fn id_family(prefix: &str, seed: u64, n: usize) -> Vec<String> {
    let mut mix = Mix::new(seed);
    let ms = 1_700_000_000_000 + mix.below(1 << 40);
    let mut out: Vec<String> = Vec::with_capacity(n);
    let push = |out: &mut Vec<String>, id: String| {
        if !id.is_empty() && id.len() <= 256 && !out.contains(&id) {
            out.push(id);
        }
    };
    while out.len() < n {
        let base = real_id(prefix, ms, mix.below(4096) as u16, mix.next_u64());
        match mix.below(8) {
            0 => {
                // The next ids of the same millisecond, as another thread draws them.
                let c = mix.below(4000) as u16;
                for k in 0..3 {
                    push(&mut out, real_id(prefix, ms, c + k, mix.next_u64()));
                }
            }
            1 => {
                push(&mut out, base[..base.len() - 1].to_owned());
                push(&mut out, base.clone());
                push(&mut out, format!("{base}0"));
            }
            2 => {
                let mut last = base.clone();
                last.pop();
                push(&mut out, format!("{last}a"));
                push(&mut out, format!("{last}b"));
                push(&mut out, format!("{last}A"));
            }
            3 => {
                push(&mut out, base.to_uppercase());
                push(&mut out, base.to_lowercase());
                push(&mut out, base.clone());
            }
            4 => {
                push(&mut out, format!("{prefix}_\u{e9}"));
                push(&mut out, format!("{prefix}_e\u{301}"));
                push(&mut out, format!("{prefix}_\u{212b}"));
                push(&mut out, format!("{prefix}_\u{c5}"));
            }
            5 => {
                // 255 bytes, then one more: 256-byte ids equal but for the last byte.
                let mut long = base.clone();
                while long.len() < 255 {
                    long.push(id_char(&mut mix));
                }
                while long.len() > 255 {
                    long.pop();
                }
                while long.len() < 255 {
                    long.push('z');
                }
                push(&mut out, format!("{long}x"));
                push(&mut out, format!("{long}y"));
            }
            _ => {
                let len = 1 + mix.below(40) as usize;
                let id: String = (0..len).map(|_| id_char(&mut mix)).collect();
                push(&mut out, id);
            }
        }
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_have_their_length_and_every_kind_of_character() {
        for bytes in [0, 1, 7, 1000, 70_000] {
            assert_eq!(text_of(bytes as u64, bytes).len(), bytes);
        }
        let t = text_of(3, 200_000);
        assert!(t.contains('\0'));
        assert!(t.chars().any(|c| u32::from(c) > 0xffff));
        assert!(t.chars().any(|c| ('\u{300}'..='\u{36f}').contains(&c)));
    }

    #[test]
    fn id_families_are_valid_external_ids_and_hold_near_duplicates() {
        let ids = id_family("msg", 7, 200);
        assert_eq!(ids.len(), 200);
        for id in &ids {
            forge_core::id::check_external("id", id).unwrap();
        }
        let lower: std::collections::HashSet<String> =
            ids.iter().map(|s| s.to_lowercase()).collect();
        assert!(lower.len() < ids.len(), "no ids differing only in case");
        assert!(ids
            .iter()
            .any(|a| ids.iter().any(|b| a != b && b.starts_with(a.as_str()))));
        let id = real_id("prt", 1, 2, 3);
        assert_eq!(id.len(), 4 + 16 + 10);
        assert!(id.starts_with("prt_0000000000001002"));
    }
}
