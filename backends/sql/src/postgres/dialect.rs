//! Postgres's side of [`crate::dialect`]: JSON rows are `json` (cast on the way in and
//! out), and the tenant is also the transaction's `forge.tenant` setting, which the
//! row-level security policies read.

use async_trait::async_trait;
use forge_core::{Result, Tenancy, TenantId};
use sqlx::error::DatabaseError;
use sqlx::postgres::PgQueryResult;
use sqlx::{PgConnection, Postgres, QueryBuilder};

use crate::dialect::Dialect;
use crate::plan::PartRow;
use crate::search::Candidates;
use crate::stats::Tally;

#[async_trait]
impl Dialect for Postgres {
    const BACKEND: &'static str = "postgres";
    const TENANCY: Tenancy = Tenancy::RowLevelSecurity;
    const BODY: &'static str = "body::text";
    const JSON_CAST: &'static str = "::json";
    /// Rows written before schema 3 keep a NULL checksum until written again when a
    /// role bound by row-level security ran the upgrade: it cannot see every tenant's
    /// rows to compute it (a privileged upgrade fills every row in).
    const UNCHECKED_ROWS: bool = true;
    /// `parts.search` ([`super::search`]).
    const SEARCH_IN_ROW: bool = true;

    /// Class 08 (connection exception), 40001 (serialization failure), 40P01
    /// (deadlock), 55P03 (lock not available), 53300 (too many connections), 57P01–03
    /// (server shutting down or not yet accepting connections).
    fn retryable(err: &dyn DatabaseError) -> bool {
        let code = err.code().unwrap_or_default();
        code.starts_with("08")
            || matches!(
                code.as_ref(),
                "40001" | "40P01" | "55P03" | "53300" | "57P01" | "57P02" | "57P03"
            )
    }

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    fn push_search(q: &mut QueryBuilder<Postgres>, tenant: &TenantId, row: &PartRow, config: &str) {
        super::search::push_search(q, tenant, row, config);
    }

    async fn index_parts(
        conn: &mut PgConnection,
        tenant: &TenantId,
        rows: &[PartRow],
        config: &str,
        tally: &mut Tally,
    ) -> Result<()> {
        super::search::index_parts(conn, tenant, rows, config, tally).await
    }

    fn search_candidates(c: &Candidates<'_>) -> QueryBuilder<Postgres> {
        super::search::candidates(c)
    }

    /// `is_local = true`: the setting ends with the transaction.
    async fn set_tenant(conn: &mut PgConnection, tenant: &TenantId) -> Result<bool> {
        sqlx::query("SELECT set_config('forge.tenant', $1, true)")
            .bind(tenant.as_str())
            .execute(&mut *conn)
            .await
            .map_err(Self::map)?;
        Ok(true)
    }
}
