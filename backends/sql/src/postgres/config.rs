//! `postgres://` URLs and the options they carry.

use std::fmt;
use std::str::FromStr;

use forge_core::{Error, Result};
use sqlx::postgres::PgConnectOptions;

/// The application role queries run as when the URL's user is privileged.
pub const DEFAULT_APP_ROLE: &str = "forge_app";

/// How a [`crate::PostgresStore`] connects.
#[derive(Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// Server, user, database, TLS…: everything sqlx reads from the URL.
    pub connect: PgConnectOptions,
    /// The schema the tables live in; created if missing. Default `public`.
    pub schema: String,
    /// The non-superuser role queries run as (`SET ROLE`) when the URL's user is a
    /// superuser or has `BYPASSRLS`, which row-level security would not apply to.
    /// Created (`NOLOGIN`) if missing. Default [`DEFAULT_APP_ROLE`].
    pub app_role: String,
    /// Connections of the pool. Default 8.
    pub max_connections: u32,
    /// Whether the full-text search index is kept (`search=on`, the default) or not
    /// (`search=off`: nothing is indexed and a search fails as unsupported). Connecting
    /// with `on` to a schema without the index builds it from the rows; with `off` to a
    /// schema with one drops it. Every pool on a schema should say the same: the last
    /// connect decides.
    pub search: bool,
    /// The text search configuration (`regconfig`) the index is built with. Default
    /// [`DEFAULT_SEARCH_LANGUAGE`]. Connecting with another one than the index was built
    /// with rebuilds it.
    ///
    /// A search matches whole words whatever the configuration; one that stems
    /// (`english`) finds candidates by stems, which are then checked word by word, and
    /// one with stop words answers a query of stop words only by reading every part of
    /// the tenant (or session).
    pub search_language: String,
}

/// The text search configuration of the index when none is given: `simple`, which only
/// lowercases (no stemming, no stop words), so the index's lexemes are the words.
pub const DEFAULT_SEARCH_LANGUAGE: &str = "simple";

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the password.
        f.debug_struct("PostgresOptions")
            .field("host", &self.connect.get_host())
            .field("port", &self.connect.get_port())
            .field("user", &self.connect.get_username())
            .field("database", &self.connect.get_database())
            .field("schema", &self.schema)
            .field("app_role", &self.app_role)
            .field("max_connections", &self.max_connections)
            .field("search", &self.search)
            .field("search_language", &self.search_language)
            .finish()
    }
}

/// Checks that `name` is a plain SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63
/// bytes), so it can be written quoted into DDL without escaping.
pub(crate) fn identifier(what: &str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63;
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "postgres {what} {name:?} is not a plain identifier \
             (1-63 characters of A-Z a-z 0-9 _, not starting with a digit)"
        )))
    }
}

impl PostgresOptions {
    /// Parses `postgres://user[:password]@host[:port]/database[?key=value&…]`
    /// (`postgresql://` too).
    ///
    /// forge-store's keys are `schema` (default `public`), `app_role` (default
    /// `forge_app`), `max_connections` (default 8), `search` (`on` | `off`, default
    /// `on`) and `search_language` (a text search configuration, default `simple`,
    /// checked against the server on connect); every other key (`sslmode`,
    /// `application_name`, …) is passed to sqlx.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong: another scheme, a schema or role
    /// that is not a plain identifier, a malformed number, a key given twice, or what
    /// sqlx rejects.
    pub fn from_url(url: &str) -> Result<Self> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(Error::invalid(
                "not a postgres URL; expected postgres://user@host:port/database[?schema=NAME]",
            ));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut schema = None;
        let mut app_role = None;
        let mut max_connections = None;
        let mut search = None;
        let mut search_language = None;
        let mut passed = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match key {
                "schema" => &mut schema,
                "app_role" => &mut app_role,
                "max_connections" => &mut max_connections,
                "search" => &mut search,
                "search_language" => &mut search_language,
                _ => {
                    passed.push(pair);
                    continue;
                }
            };
            if slot.replace(value.to_owned()).is_some() {
                return Err(Error::invalid(format!(
                    "postgres option {key} is given twice"
                )));
            }
        }
        let schema = schema.unwrap_or_else(|| "public".to_owned());
        identifier("schema", &schema)?;
        let app_role = app_role.unwrap_or_else(|| DEFAULT_APP_ROLE.to_owned());
        identifier("app_role", &app_role)?;
        let max_connections = match max_connections {
            None => 8,
            Some(n) => n
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "postgres option max_connections={n:?} must be a number in 1..=1000"
                    ))
                })?,
        };
        let search = match search {
            None => true,
            Some(v) => crate::search::parse_switch("postgres", &v)?,
        };
        let search_language = search_language.unwrap_or_else(|| DEFAULT_SEARCH_LANGUAGE.to_owned());
        // Written into SQL as a quoted literal: plain identifiers only.
        let plain = !search_language.is_empty()
            && search_language.split('.').count() <= 2
            && search_language
                .split('.')
                .all(|part| identifier("", part).is_ok());
        if !plain {
            return Err(Error::invalid(format!(
                "postgres option search_language={search_language:?} is not a text search                  configuration name (a plain identifier, maybe schema-qualified: simple,                  english, pg_catalog.german)"
            )));
        }
        let rest = if passed.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", passed.join("&"))
        };
        // sqlx's message never contains the password; ours does not quote the URL.
        let connect = PgConnectOptions::from_str(&rest)
            .map_err(|e| Error::invalid(format!("malformed postgres URL: {e}")))?;
        Ok(Self {
            connect,
            schema,
            app_role,
            max_connections,
            search,
            search_language,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_our_keys_and_passes_the_rest_to_sqlx() {
        let o = PostgresOptions::from_url("postgres://u@db.local:5433/forge").unwrap();
        assert_eq!(o.schema, "public");
        assert_eq!(o.app_role, DEFAULT_APP_ROLE);
        assert_eq!(o.max_connections, 8);
        assert!(o.search);
        assert_eq!(o.search_language, DEFAULT_SEARCH_LANGUAGE);
        assert_eq!(o.connect.get_port(), 5433);
        assert_eq!(o.connect.get_database(), Some("forge"));

        let o = PostgresOptions::from_url(
            "postgresql://u:secret@h/d?schema=tenant_data&application_name=x&app_role=app&max_connections=3",
        )
        .unwrap();
        assert_eq!(o.schema, "tenant_data");
        assert_eq!(o.app_role, "app");
        assert_eq!(o.max_connections, 3);
        assert_eq!(o.connect.get_application_name(), Some("x"));
        let o = PostgresOptions::from_url(
            "postgres://h/d?search=Off&search_language=pg_catalog.english",
        )
        .unwrap();
        assert!(!o.search);
        assert_eq!(o.search_language, "pg_catalog.english");
        assert!(!format!("{o:?}").contains("secret"));

        for (bad, needle) in [
            ("mysql://h/d", "not a postgres URL"),
            ("postgres://h/d?schema=a;b", "\"a;b\""),
            ("postgres://h/d?schema=", "\"\""),
            ("postgres://h/d?schema=1x", "not a plain identifier"),
            ("postgres://h/d?app_role=x\"y", "app_role"),
            ("postgres://h/d?max_connections=0", "1..=1000"),
            ("postgres://h/d?schema=a&schema=b", "twice"),
            (
                "postgres://h/d?search=yes",
                "search=\"yes\" is not known; use search=on or search=off",
            ),
            (
                "postgres://h/d?search_language=en'glish",
                "search_language=\"en'glish\"",
            ),
            (
                "postgres://h/d?search_language=a.b.c",
                "search_language=\"a.b.c\"",
            ),
            ("postgres://h/d?search_language=", "search_language=\"\""),
        ] {
            let err = PostgresOptions::from_url(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidInput(_)), "{bad}: {err:?}");
            assert!(err.to_string().contains(needle), "{bad}: {err}");
        }
    }
}
