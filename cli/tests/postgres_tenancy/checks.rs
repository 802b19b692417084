//! The library's view as the login role, and its attempts to switch row-level security
//! off.

use forge_store::sql::PostgresStore;
use forge_store::{SessionId, TenantId};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Connection};

use crate::deployment::Deployment;
use crate::SAME_SESSION;

/// Counts the checks a test makes, so the figure it prints is the number it made.
#[derive(Debug, Default)]
pub(crate) struct Checks(pub(crate) usize);

impl Checks {
    /// Fails the test with `what` unless `ok`; counts one check.
    #[track_caller]
    pub(crate) fn that(&mut self, ok: bool, what: impl std::fmt::Display) {
        assert!(ok, "{what}");
        self.0 += 1;
    }

    /// Fails the test unless `got == want`; counts one check.
    #[track_caller]
    pub(crate) fn eq<T: PartialEq + std::fmt::Debug + ?Sized>(
        &mut self,
        got: &T,
        want: &T,
        what: impl std::fmt::Display,
    ) {
        assert_eq!(got, want, "{what}");
        self.0 += 1;
    }
}

/// The library as the login role: `forge_store::open` and `PostgresStore`.
pub(crate) async fn library_checks(d: &Deployment, a_doc: &Value, b_doc: &Value, c: &mut Checks) {
    let (a, b, t_c) = (
        TenantId::new("A").unwrap(),
        TenantId::new("B").unwrap(),
        TenantId::new("C").unwrap(),
    );
    let sid = SessionId::from(SAME_SESSION);
    let forge = forge_store::open(&d.url()).await.unwrap();
    let export = |t| {
        let forge = &forge;
        let sid = &sid;
        async move { serde_json::to_value(forge.export(t, sid).await.unwrap()).unwrap() }
    };
    c.eq(&export(&a).await, a_doc, "A's export through the library");
    c.eq(&export(&b).await, b_doc, "B's export through the library");
    c.that(
        forge.export(&t_c, &sid).await.is_err(),
        "C exports A's and B's session id",
    );
    c.that(
        forge.sessions(&t_c).await.unwrap().is_empty(),
        "C lists sessions",
    );

    // PostgresStore runs as the login role itself (no SET ROLE: it is not privileged).
    let store = PostgresStore::connect(&d.url()).await.unwrap();
    c.eq(
        &store.current_role().await.unwrap(),
        &d.login,
        "PostgresStore's role",
    );
    store.close().await;

    // A URL presetting the tenant setting for the whole connection: every transaction
    // sets its own tenant, so tenant A's calls still read A and C's read nothing.
    let preset = forge_store::open(&d.url_with("&options=-c%20forge.tenant%3DB"))
        .await
        .unwrap();
    c.eq(
        &serde_json::to_value(preset.export(&a, &sid).await.unwrap()).unwrap(),
        a_doc,
        "A's export on a URL presetting tenant B",
    );
    c.that(
        preset.sessions(&t_c).await.unwrap().is_empty(),
        "C lists sessions on a URL presetting tenant B",
    );

    // Tenant ids that try to smuggle SQL or another tenant are refused before any query.
    for bad in ["A' OR 'x'='x", "A;SET ROLE postgres", "", "B\0", "*", "A B"] {
        c.that(TenantId::new(bad).is_err(), format_args!("{bad:?}"));
    }
}

/// Raw SQL as the login role, and URLs asking the server for more: every way to get
/// past row-level security fails.
pub(crate) async fn switch_off_attempts(d: &Deployment, c: &mut Checks) {
    let mut conn = d.login_connection().await;
    let forbidden = [
        "ALTER TABLE sessions DISABLE ROW LEVEL SECURITY",
        "ALTER TABLE messages NO FORCE ROW LEVEL SECURITY",
        "DROP POLICY tenant_isolation ON parts",
        "CREATE POLICY everything ON sessions USING (true)",
        "SET ROLE postgres",
        "SET SESSION AUTHORIZATION postgres",
    ];
    for sql in forbidden {
        let res = sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await;
        c.that(res.is_err(), format_args!("{sql} succeeded"));
        if let Err(err) = res {
            eprintln!("refused as expected: {sql}: {err}");
        }
    }
    let res = sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER ROLE \"{}\" BYPASSRLS",
        d.login
    )))
    .execute(&mut conn)
    .await;
    c.that(res.is_err(), "ALTER ROLE … BYPASSRLS succeeded");
    if let Err(err) = res {
        eprintln!("refused as expected: ALTER ROLE BYPASSRLS: {err}");
    }

    // Without the tenant setting nothing is visible.
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    c.eq(&count, &0, "rows visible without forge.tenant");
    // row_security = off makes a query that RLS would filter fail, not bypass.
    sqlx::raw_sql("SET row_security = off")
        .execute(&mut conn)
        .await
        .unwrap();
    let res = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sessions")
        .fetch_one(&mut conn)
        .await;
    c.that(res.is_err(), "row_security = off must make the query fail");
    let err = res.map_or_else(|e| e.to_string(), |_| String::new());
    c.that(err.contains("row-level security"), &err);
    conn.close().await.unwrap();

    // The same through the library: a URL switching row_security off gets errors, never
    // another tenant's rows; a URL asking for the postgres role does not connect.
    let a = TenantId::new("A").unwrap();
    // (The migration's first read already fails: `forge_meta` has forced policies.)
    let err = match forge_store::open(&d.url_with("&options=-c%20row_security%3Doff")).await {
        Err(e) => e.to_string(),
        Ok(off) => off
            .sessions(&a)
            .await
            .expect_err("row_security=off URL")
            .to_string(),
    };
    c.that(err.contains("row-level security"), &err);
    eprintln!("refused as expected: URL with row_security=off: {err}");
    let res = forge_store::open(&d.url_with("&options=-c%20role%3Dpostgres")).await;
    c.that(res.is_err(), "a role=postgres URL connected");
    if let Err(err) = res {
        eprintln!("refused as expected: URL with role=postgres: {err}");
    }

    // The limit of database-side isolation: whoever holds the role's credentials and
    // writes raw SQL chooses the tenant setting. Row-level security separates the
    // tenants of forge-store's API (the tenant is an argument of every call, validated);
    // it is not an authentication boundary between tenants sharing one role.
    let mut conn = d.login_connection().await;
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT set_config('forge.tenant', 'B', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let visible: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    c.eq(&visible, &2, "the setting selects the tenant");
    tx.rollback().await.unwrap();
    conn.close().await.unwrap();
}
