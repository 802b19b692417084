//! How much the suite runs: case counts and the property filter.

use std::time::Duration;

use crate::Property;

/// Cases per property when `FORGE_PROPTEST_CASES` is not set.
///
/// Sized for CI on a 2-core machine: the whole suite on the memory backend takes a few
/// seconds, on redb (a fresh file per case) well under a minute.
pub const DEFAULT_CASES: u32 = 32;

/// The size of large cases when `FORGE_CONFORMANCE_SCALE` is not set (see
/// [`Config::scale`]).
pub const DEFAULT_SCALE: u32 = 1;

/// What the suite runs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Generated cases per property. Heavy properties (concurrency) run a quarter of
    /// them, at least two; every property runs at least one.
    pub cases: u32,
    /// Run only the property with this name, or the tests of this contract property
    /// (`bus` runs `bus` and `bus_resume`). `None` runs everything.
    pub only: Option<String>,
    /// Upper bound on shrinking a failure: iterations.
    pub max_shrink_iters: u32,
    /// Upper bound on shrinking a failure: wall time.
    pub max_shrink_time: Duration,
    /// How large the large cases are, a factor (`FORGE_CONFORMANCE_SCALE`): at 1 a
    /// batch carries up to 3,000 rows, a listing up to 2,500 entries, a text up to
    /// 4 MiB; at 2 twice that. 0 runs no large cases.
    pub scale: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            cases: DEFAULT_CASES,
            only: None,
            max_shrink_iters: 2_000,
            max_shrink_time: Duration::from_secs(30),
            scale: DEFAULT_SCALE,
        }
    }
}

impl Config {
    /// The defaults, with `cases` from `FORGE_PROPTEST_CASES` and `scale` from
    /// `FORGE_CONFORMANCE_SCALE` when they are set to a number.
    pub fn from_env() -> Self {
        let mut c = Self::default();
        let number = |name| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok())
        };
        if let Some(n) = number("FORGE_PROPTEST_CASES") {
            c.cases = n.max(1);
        }
        if let Some(n) = number("FORGE_CONFORMANCE_SCALE") {
            c.scale = n;
        }
        c
    }

    /// This config with large cases of size `scale` (0: none).
    #[must_use]
    pub fn with_scale(mut self, scale: u32) -> Self {
        self.scale = scale;
        self
    }

    /// This config with `cases` cases per property.
    #[must_use]
    pub fn with_cases(mut self, cases: u32) -> Self {
        self.cases = cases.max(1);
        self
    }

    /// This config running only `only` (a property name or a contract property's).
    #[must_use]
    pub fn with_only(mut self, only: impl Into<String>) -> Self {
        self.only = Some(only.into());
        self
    }

    /// Whether `property` is selected by `only`.
    pub fn selects(&self, property: Property) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| o == property.name() || o == property.group())
    }

    /// Checks that `only`, when set, names a property or heading.
    ///
    /// # Errors
    /// A message listing the known names.
    pub fn validate(&self) -> Result<(), String> {
        match self.only.as_deref() {
            Some(o) if !Property::ALL.iter().any(|p| self.selects(*p)) => Err(format!(
                "unknown property {o:?}; known: {}",
                Property::ALL.map(Property::name).join(", ")
            )),
            _ => Ok(()),
        }
    }

    /// Large cases for `property`, on top of [`Config::cases_for`]: one in sixteen of the
    /// cases, at least two (one for the heavy concurrency property), none at scale 0.
    pub(crate) fn large_cases_for(&self, property: Property) -> u32 {
        if self.scale == 0 {
            return 0;
        }
        match property {
            Property::Concurrency => (self.cases / 32).max(1),
            _ => (self.cases / 16).max(2),
        }
    }

    /// Cases for `property`: the heavy ones run fewer.
    pub(crate) fn cases_for(&self, property: Property) -> u32 {
        match property {
            Property::Concurrency => (self.cases / 4).max(2),
            Property::TenantIsolation | Property::BusResume | Property::Bus | Property::Fencing => {
                (self.cases / 2).max(1)
            }
            _ => self.cases.max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_a_name_or_a_heading() {
        let c = Config::default().with_only("bus");
        assert!(c.selects(Property::Bus));
        assert!(c.selects(Property::BusResume));
        assert!(!c.selects(Property::Upsert));
        let c = Config::default().with_only("bus_resume");
        assert!(!c.selects(Property::Bus));
        assert!(c.selects(Property::BusResume));
        assert!(Config::default().with_only("nope").validate().is_err());
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    fn heavy_properties_run_fewer_cases_but_never_none() {
        let c = Config::default().with_cases(1);
        assert_eq!(c.cases_for(Property::Concurrency), 2);
        assert_eq!(c.cases_for(Property::Upsert), 1);
        let c = Config::default().with_cases(64);
        assert_eq!(c.cases_for(Property::Concurrency), 16);
    }

    #[test]
    fn large_cases_grow_with_the_cases_and_stop_at_scale_zero() {
        let c = Config::default();
        assert_eq!(c.large_cases_for(Property::Upsert), 2);
        assert_eq!(c.large_cases_for(Property::Concurrency), 1);
        let c = c.with_cases(256);
        assert_eq!(c.large_cases_for(Property::Upsert), 16);
        assert_eq!(c.with_scale(0).large_cases_for(Property::Upsert), 0);
    }
}
