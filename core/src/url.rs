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

/// `url` with its password (the `user:password@` part, and secret query values such as
/// `password=`) replaced by `***`. Anything that is not a URL is returned unchanged.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // The authority ends at the query or fragment; the userinfo ends at the last `@`
    // before it (a password may itself contain `@` or `/`).
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (before_query, after) = rest.split_at(end);
    let head = match before_query.rfind('@') {
        Some(at) => {
            let (userinfo, host) = before_query.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***{host}"),
                None => before_query.to_owned(),
            }
        }
        None => before_query.to_owned(),
    };
    format!("{scheme}://{head}{}", redact_query(after))
}

fn redact_query(tail: &str) -> String {
    let Some(query) = tail.strip_prefix('?') else {
        return tail.to_owned();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if SECRET_KEYS.iter().any(|s| k.eq_ignore_ascii_case(s)) => {
                format!("{k}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    let mut out = format!("?{}", pairs.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
