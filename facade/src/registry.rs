//! The registry of backend drivers: the ones compiled in by cargo feature, and any a
//! program installs at run time ([`install`]). Every way of opening a backend by URL
//! goes through it: [`crate::open`], the conformance command, the benchmark, the tests.
//!
//! A driver is a `static` that a backend crate exports ([`forge_core::driver::Driver`]);
//! a third-party backend installs its own the same way the built-in ones are listed.

use parking_lot::RwLock;

use forge_core::driver::{self, Driver};
use forge_core::url::redact;

use crate::clip::clip;
use crate::error::{Error, Result};

/// A backend that is a cargo feature of forge-store: its schemes, and its driver when
/// the feature is on (a URL of a compiled-out one is an error naming the feature).
struct Builtin {
    feature: &'static str,
    schemes: &'static [&'static str],
    driver: Option<&'static dyn Driver>,
}

/// One line per backend: its cargo feature, its URL schemes, its driver.
macro_rules! builtin {
    ($feature:literal, $schemes:expr, $driver:path) => {
        Builtin {
            feature: $feature,
            schemes: $schemes,
            driver: {
                #[cfg(feature = $feature)]
                let d: Option<&'static dyn Driver> = Some(&$driver);
                #[cfg(not(feature = $feature))]
                let d: Option<&'static dyn Driver> = None;
                d
            },
        }
    };
}

/// The backends of forge-store's cargo features. Adding a backend is one line here (and
/// its feature in `Cargo.toml`).
fn builtin() -> [Builtin; 4] {
    [
        builtin!("redb", &["redb"], forge_redb::DRIVER),
        builtin!("sqlite", &["sqlite"], forge_sql::SQLITE),
        builtin!("postgres", &["postgres", "postgresql"], forge_sql::POSTGRES),
        builtin!("redis", &["redis", "rediss"], forge_redis::DRIVER),
    ]
}

static INSTALLED: RwLock<Vec<&'static dyn Driver>> = RwLock::new(Vec::new());

/// Adds `driver` to the registry, so [`crate::open`] and every other door opens its
/// schemes. A driver installed later wins over an earlier one and over a built-in one
/// for the same scheme; installing the same driver twice changes nothing.
pub fn install(driver: &'static dyn Driver) {
    let mut installed = INSTALLED.write();
    installed.retain(|d| !std::ptr::addr_eq(*d, driver));
    installed.push(driver);
}

/// Every driver this process can open, the last installed first, then the built-in
/// ones.
pub fn drivers() -> Vec<&'static dyn Driver> {
    let mut all: Vec<&'static dyn Driver> = INSTALLED.read().iter().rev().copied().collect();
    all.extend(builtin().iter().filter_map(|b| b.driver));
    all.push(&driver::MEMORY);
    all
}

/// A backend scheme: its URL shape, and the cargo feature that compiles it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    /// The backend's name, e.g. `sqlite`.
    pub name: &'static str,
    /// The URL's shape, for help texts.
    pub shape: &'static str,
    /// The cargo feature of forge-store that compiles this backend in (`None`: always,
    /// or a driver installed at run time).
    pub feature: Option<&'static str>,
    /// Whether this build has it.
    pub enabled: bool,
}

/// Every backend this process knows: the drivers it can open, then the features it was
/// built without.
pub fn known() -> Vec<Scheme> {
    let builtin = builtin();
    let mut out: Vec<Scheme> = drivers()
        .iter()
        .map(|d| {
            let info = d.info();
            Scheme {
                name: info.name,
                shape: info.shape,
                feature: builtin
                    .iter()
                    .find(|b| b.driver.is_some_and(|b| std::ptr::addr_eq(b, *d)))
                    .map(|b| b.feature),
                enabled: true,
            }
        })
        .collect();
    out.extend(
        builtin
            .iter()
            .filter(|b| b.driver.is_none())
            .map(|b| Scheme {
                name: b.feature,
                shape: b.schemes[0],
                feature: Some(b.feature),
                enabled: false,
            }),
    );
    out
}

/// The backends this process can open.
pub fn schemes() -> Vec<Scheme> {
    known().into_iter().filter(|s| s.enabled).collect()
}

/// `url` as errors quote it: password hidden, cut short ([`clip`]) when long.
pub(crate) fn shown(url: &str) -> String {
    clip(&redact(url))
}

fn supported() -> String {
    let list: Vec<&str> = schemes().iter().map(|s| s.shape).collect();
    format!("this build supports {}", list.join(", "))
}

/// The driver that opens `url`.
///
/// # Errors
/// [`Error::Url`] when `url` is not `SCHEME://…` or no driver knows its scheme;
/// [`Error::FeatureDisabled`] when its backend is a feature this build lacks.
pub fn driver(url: &str) -> Result<&'static dyn Driver> {
    let Ok(scheme) = driver::scheme(url) else {
        return Err(Error::Url {
            url: shown(url),
            reason: format!("not a URL (expected SCHEME://…); {}", supported()),
        });
    };
    if let Some(d) = drivers().into_iter().find(|d| d.info().opens(scheme)) {
        return Ok(d);
    }
    let lower = scheme.to_ascii_lowercase();
    if let Some(b) = builtin()
        .iter()
        .find(|b| b.schemes.contains(&lower.as_str()))
    {
        return Err(Error::FeatureDisabled {
            url: shown(url),
            scheme: lower,
            feature: b.feature,
        });
    }
    Err(Error::Url {
        url: shown(url),
        reason: format!(
            "unknown backend scheme {}; {}",
            clip(&format!("{lower:?}")),
            supported()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_feature_backend_is_known_once() {
        let known = known();
        for feature in ["redb", "sqlite", "postgres", "redis"] {
            let n = known.iter().filter(|s| s.feature == Some(feature)).count();
            assert_eq!(n, 1, "{feature}: {known:?}");
        }
        assert!(known.iter().any(|s| s.name == "memory" && s.enabled));
    }

    #[test]
    fn schemes_are_found_case_insensitively_with_their_aliases() {
        assert_eq!(
            driver("MEMORY://").map(|d| d.info().name).ok(),
            Some("memory")
        );
        #[cfg(feature = "postgres")]
        assert_eq!(
            driver("postgresql://h/d").map(|d| d.info().name).ok(),
            Some("postgres")
        );
    }
}
