//! The deployment: an admin-provisioned schema and a plain login role, and the CLI
//! processes run against it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use forge_testkit::process::KillOnDrop;
use forge_testkit::runtime;
use serde_json::Value;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use crate::common::{command, spawn_piped, stderr, stdout, with_param};
use crate::PROCESS_TIMEOUT;

/// A schema provisioned by the admin and a login role granted on it; both dropped when
/// the value is (the schema first, then the roles).
pub(crate) struct Deployment {
    pub(crate) admin: String,
    pub(crate) schema: String,
    pub(crate) login: String,
    pub(crate) app_role: String,
    pub(crate) dir: tempfile::TempDir,
}

impl Deployment {
    /// Provisions it: the migration through the CLI as admin, then the login role with
    /// `grants` ("explicit" or "membership").
    pub(crate) fn provision(admin: &str, explicit_grants: bool) -> Self {
        let unique = forge_store::id::ascending("t").to_lowercase();
        let d = Self {
            admin: admin.to_owned(),
            schema: format!("forge_tenancy_{unique}"),
            login: format!("forge_login_{unique}"),
            app_role: format!("forge_app_{unique}"),
            dir: tempfile::tempdir().unwrap(),
        };
        let admin_url = with_param(admin, "schema", &d.schema) + "&app_role=" + &d.app_role;
        // What a platform team runs once with the admin's URL: the migration.
        let out = d.cli_at(&admin_url, "default", &["sessions", "--json"]);
        assert!(out.status.success(), "migration as admin: {}", stderr(&out));

        let (s, l, a) = (&d.schema, &d.login, &d.app_role);
        let grants = if explicit_grants {
            format!(
                "GRANT USAGE ON SCHEMA \"{s}\" TO \"{l}\";
                 GRANT SELECT, INSERT, UPDATE, DELETE
                     ON \"{s}\".sessions, \"{s}\".messages, \"{s}\".parts, \"{s}\".fences
                     TO \"{l}\";
                 GRANT SELECT ON \"{s}\".forge_meta TO \"{l}\";"
            )
        } else {
            format!("GRANT \"{a}\" TO \"{l}\";")
        };
        d.admin_sql(&format!(
            "CREATE ROLE \"{l}\" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
             {grants}"
        ));
        d
    }

    /// The login role's URL: the admin URL with the user replaced.
    pub(crate) fn url(&self) -> String {
        self.url_with("")
    }

    /// The login role's URL with extra query pairs (`&k=v…`).
    pub(crate) fn url_with(&self, extra: &str) -> String {
        let (scheme, rest) = self.admin.split_once("://").unwrap();
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let sep = if host.contains('?') { '&' } else { '?' };
        format!(
            "{scheme}://{}@{host}{sep}schema={}{extra}",
            self.login, self.schema
        )
    }

    /// A raw connection as the login role, its search path on the schema.
    pub(crate) async fn login_connection(&self) -> PgConnection {
        let mut conn = PgConnection::connect(&self.url()).await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SET search_path TO \"{}\"",
            self.schema
        )))
        .execute(&mut conn)
        .await
        .unwrap();
        conn
    }

    pub(crate) fn admin_sql(&self, sql: &str) {
        let admin = self.admin.clone();
        let sql = sql.to_owned();
        std::thread::spawn(move || {
            runtime().block_on(async {
                let mut conn = PgConnection::connect(&admin).await.unwrap();
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                conn.close().await.unwrap();
            });
        })
        .join()
        .unwrap();
    }

    /// `forge-store --backend URL --tenant T ARGS…` with a timeout.
    pub(crate) fn cli_at(&self, url: &str, tenant: &str, args: &[&str]) -> Output {
        let mut all = vec!["--backend", url, "--tenant", tenant];
        all.extend_from_slice(args);
        wait(spawn(&all, self.dir.path()))
    }

    /// As the login role; expects success and returns stdout parsed as JSON.
    pub(crate) fn json(&self, tenant: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.cli_at(&self.url(), tenant, &all);
        assert!(
            out.status.success(),
            "forge-store --tenant {tenant} {args:?}: {}",
            stderr(&out)
        );
        serde_json::from_str(&stdout(&out)).unwrap()
    }

    /// `export` as the login role, parsed.
    pub(crate) fn export(&self, tenant: &str, session: &str) -> Value {
        let out = self.cli_at(&self.url(), tenant, &["export", session]);
        assert!(
            out.status.success(),
            "export {tenant}/{session}: {}",
            stderr(&out)
        );
        serde_json::from_str(&stdout(&out)).unwrap()
    }

    /// The ids `sessions` lists for a tenant, as the login role.
    pub(crate) fn session_ids(&self, tenant: &str) -> BTreeSet<String> {
        self.json(tenant, &["sessions"])
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["info"]["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let sql = format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE;
             DROP ROLE IF EXISTS \"{}\";
             DROP ROLE IF EXISTS \"{}\";",
            self.schema, self.login, self.app_role
        );
        let admin = self.admin.clone();
        let done = std::thread::spawn(move || {
            runtime().block_on(async {
                let mut conn = PgConnection::connect(&admin).await?;
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(done, Ok(Ok(()))) {
            eprintln!(
                "could not drop schema {} and roles {}, {}: {done:?}",
                self.schema, self.login, self.app_role
            );
        }
    }
}

/// `forge-store ARGS…` in `cwd` without the environment's defaults, killed when
/// dropped.
pub(crate) fn spawn(args: &[&str], cwd: &Path) -> KillOnDrop {
    KillOnDrop::new(spawn_piped(&mut command(args, cwd)))
}

/// Waits for the process, killing it (and failing) after [`PROCESS_TIMEOUT`].
pub(crate) fn wait(running: KillOnDrop) -> Output {
    running.output_within(PROCESS_TIMEOUT)
}
