//! Backend URLs as they may be shown: [`redact`] hides passwords, so no error,
//! log line or `Debug` output of forge-store ever carries one.

/// Query keys whose values are secrets.
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "pass",
    "sslpassword",
    "token",
    "secret",
    "auth",
];

/// `url` as an error may quote it: password hidden ([`redact`]), at most 200
/// characters, in quotes.
pub fn quoted(url: &str) -> String {
    let redacted = redact(url);
    let mut out: String = redacted.chars().take(200).collect();
    if out.len() < redacted.len() {
        out.push('…');
    }
    format!("{out:?}")
}

/// `url` with its password (the `user:password@` part, and secret query values such as
/// `password=`) replaced by `***`, for showing it. Text that is not a well-formed URL
/// (a mistyped one) is redacted conservatively: a `user:password@` shape and a secret
/// `key=value` are hidden wherever they stand, so a `://` or `?` in the wrong place
/// never exposes what it would have hidden in the right one.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    // The authority ends at the query or fragment; the userinfo ends at the last `@`
    // before it (a password may itself contain `@` or `/`).
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (before_query, after) = rest.split_at(end);
    format!(
        "{}{}{}",
        redact_query(scheme),
        // A `://` inside the query makes the query look like the authority.
        redact_query(&hide_userinfo(before_query)),
        redact_query(after)
    )
}

/// `text` with what stands between its first `:` and its last `@` (the password of a
/// `user:password@host`) replaced by `***`; unchanged without both.
fn hide_userinfo(text: &str) -> String {
    match text.rfind('@') {
        Some(at) => {
            let (userinfo, host) = text.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***{host}"),
                None => text.to_owned(),
            }
        }
        None => text.to_owned(),
    }
}

/// `server HOST:PORT` of a networked backend's URL, for errors: no user, no password,
/// no options; the scheme's default port when the URL names none.
pub fn server_label(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    // As in `redact`: the userinfo ends at the last `@` before the query (a password
    // may hold `@` or `/`); the host ends at the path.
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let before_query = &rest[..end];
    let after_user = before_query
        .rfind('@')
        .map_or(before_query, |at| &before_query[at + 1..]);
    let host = after_user.split('/').next().unwrap_or_default();
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => Some(5432),
        "redis" | "rediss" => Some(6379),
        _ => None,
    };
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match (host.is_empty(), has_port, default_port) {
        (true, _, _) => "server (local socket)".to_owned(),
        (false, false, Some(port)) => format!("server {host}:{port}"),
        _ => format!("server {host}"),
    }
}

/// `tail` (the query and fragment, or the text after a `?`) with the value of every
/// `key=value` whose key is secret replaced by `***`, wherever it stands: in the query,
/// or after a `#` (a stray `#` turns the rest of a URL into its fragment).
fn redact_query(tail: &str) -> String {
    let mut out = String::with_capacity(tail.len());
    for piece in tail.split_inclusive(['?', '&', '#']) {
        let (pair, sep) = match piece.char_indices().last() {
            Some((i, '?' | '&' | '#')) => (&piece[..i], &piece[i..]),
            _ => (piece, ""),
        };
        match pair.split_once('=') {
            Some((k, _)) if SECRET_KEYS.iter().any(|s| k.eq_ignore_ascii_case(s)) => {
                out.push_str(k);
                out.push_str("=***");
            }
            // A `user:password@` after a misplaced `?` or `#`.
            _ => out.push_str(&hide_userinfo(pair)),
        }
        out.push_str(sep);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_after_a_stray_hash_is_hidden() {
        let url = "postgresql://#u@h/d?sslmode=disable&application_name=x&password=Pw0rdXyZ";
        let shown = redact(url);
        assert!(!shown.contains("Pw0rdXyZ"), "{shown}");
        assert!(
            shown.ends_with("application_name=x&password=***"),
            "{shown}"
        );
        assert_eq!(redact("redis://h?password=a#b"), "redis://h?password=***#b");
    }

    #[test]
    fn redact_hides_passwords_and_keeps_the_rest() {
        let cases = [
            (
                "postgres://app:s3cret@db.internal:5432/forge",
                "postgres://app:***@db.internal:5432/forge",
            ),
            (
                "redis://:hunter2@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            (
                "postgres://app:p@ss/w0rd@db/forge?sslmode=require",
                "postgres://app:***@db/forge?sslmode=require",
            ),
            (
                "postgres://db/forge?user=app&password=s3cret&sslmode=disable",
                "postgres://db/forge?user=app&password=***&sslmode=disable",
            ),
            ("postgres://app@db/forge", "postgres://app@db/forge"),
            (
                "redb://./forge.redb?durability=none",
                "redb://./forge.redb?durability=none",
            ),
            ("redb://./dir@2/f.redb", "redb://./dir@2/f.redb"),
            ("memory://", "memory://"),
            ("not a url", "not a url"),
            // Found by fuzzing: a mistyped separator kept the password of the query.
            (
                "postgresql;//u@h/d?sslmode=disable&password=s3cret",
                "postgresql;//u@h/d?sslmode=disable&password=***",
            ),
            // Found by fuzzing (a million inputs): a `://` inside the query was taken
            // for the scheme's, and the query for the authority.
            (
                "postgresql\0//u@h/d?://sslmode=disable&password=s3cret",
                "postgresql\0//u@h/d?://sslmode=disable&password=***",
            ),
            // Found by the same run after a first fix: a `#` before the scheme.
            (
                "#redis://:s3cret@127.0.0.1:6379/0?prefix=forge",
                "#redis://:***@127.0.0.1:6379/0?prefix=forge",
            ),
            ("redis://?:s3cret@h:6379", "redis://?:***@h:6379"),
            ("x?password=s3cret://h", "x?password=***h"),
            // Not a URL, but a password all the same.
            ("app:s3cret@db:5432/forge", "app:***@db:5432/forge"),
        ];
        for (url, want) in cases {
            assert_eq!(redact(url), want, "{url}");
        }
    }

    #[test]
    fn redacted_urls_never_contain_the_secret() {
        for url in [
            "ftp://u:topsecret@h",
            "x://u:topsecret@h/p?q=1#frag",
            "x://h/p?TOKEN=topsecret#frag",
        ] {
            assert!(
                !redact(url).contains("topsecret"),
                "{url} -> {}",
                redact(url)
            );
        }
    }

    #[test]
    fn the_server_label_names_host_and_port_and_never_the_user_or_password() {
        for (url, label) in [
            (
                "postgres://u:pw@127.0.0.1:55432/db?schema=s",
                "server 127.0.0.1:55432",
            ),
            ("postgresql://db.local/forge", "server db.local:5432"),
            ("redis://127.0.0.1:6390?prefix=x", "server 127.0.0.1:6390"),
            ("redis://:secret@cache/2", "server cache:6379"),
            ("postgres://u:p/w@d@h:1/db", "server h:1"),
            ("postgres:///db?host=/tmp", "server (local socket)"),
        ] {
            assert_eq!(server_label(url), label, "{url}");
        }
    }
}
