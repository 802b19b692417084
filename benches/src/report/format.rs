//! Numbers as the reports print them: bytes, rates, factors, durations, counts.

use super::NONE;

/// Bytes in decimal units with three significant digits: `512 B`, `17.7 kB`, `1.77 MB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 999.5 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{} {}", sig3(v), UNITS[unit])
}

/// A rate with a k/M/G suffix and three significant digits: `950`, `81.2k`, `812k`,
/// `1.23M`; `–` when not a finite, non-negative number.
pub fn human_rate(rate: f64) -> String {
    const SUFFIXES: [&str; 5] = ["", "k", "M", "G", "T"];
    if !rate.is_finite() || rate < 0.0 {
        return NONE.to_owned();
    }
    if rate < 999.5 {
        return if rate < 10.0 {
            format!("{rate:.1}")
        } else {
            format!("{rate:.0}")
        };
    }
    let mut v = rate;
    let mut unit = 0;
    while v >= 999.5 && unit + 1 < SUFFIXES.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{}{}", sig3(v), SUFFIXES[unit])
}

/// Three significant digits for `0 <= v < 999.5`.
pub(super) fn sig3(v: f64) -> String {
    if (v * 100.0).round() < 1000.0 {
        format!("{v:.2}")
    } else if (v * 10.0).round() < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// A write-amplification factor: `3.41×`, `15.7×`, `1097×`.
pub(super) fn fmt_factor(x: f64) -> String {
    if x >= 99.95 {
        format!("{x:.0}×")
    } else if x >= 9.995 {
        format!("{x:.1}×")
    } else {
        format!("{x:.2}×")
    }
}

/// Microseconds, switching to ms or s as the value grows.
pub(super) fn fmt_us(us: f64) -> String {
    if us < 9.95 {
        format!("{us:.1} µs")
    } else if us < 999.5 {
        format!("{us:.0} µs")
    } else if us < 999_500.0 {
        format!("{} ms", sig3(us / 1000.0))
    } else {
        format!("{} s", sig3(us / 1_000_000.0))
    }
}

pub(super) fn fmt_ms(ms: f64) -> String {
    if ms == 0.0 {
        "0 ms".to_owned()
    } else if ms < 9.95 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// An integer with thousands separators: `1,234,567`.
pub(super) fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
