//! One connection type for a single server and for a Redis Cluster.
//!
//! [`Conn`] is what every command of the backend goes through. On a single server it
//! is a [`ConnectionManager`] (or, for blocking reads, a multiplexed connection of its
//! own); on a cluster it is the redis crate's cluster connection, which routes each
//! command to the node serving its key's slot and follows `MOVED` / `ASK` redirects.
//! Which one [`RedisOptions::connect`](crate::RedisOptions) returns is found by asking
//! the server (`INFO cluster`), so the same `redis://` URL works on both.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use forge_core::{Error, Result};

use crate::error::map;

/// A connection to a single server or to a cluster. Cheap to clone: clones share the
/// underlying multiplexed connection(s).
#[derive(Clone)]
pub(crate) enum Conn {
    /// A single server, reconnecting by itself.
    Single(ConnectionManager),
    /// A single server, for blocking reads (no response timeout).
    Dedicated(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// The `host:port` of every master of the cluster (for commands that each node
    /// answers for its own keys only, such as `SCAN`); empty on a single server.
    pub(crate) async fn masters(&mut self) -> Result<Vec<(String, u16)>> {
        let Self::Cluster(c) = self else {
            return Ok(Vec::new());
        };
        let nodes = c
            .route_command(
                redis::cmd("CLUSTER").arg("NODES").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
            )
            .await
            .map_err(map)?;
        let text: String =
            redis::from_redis_value(nodes).map_err(|e| Error::codec("CLUSTER NODES reply", e))?;
        Ok(parse_masters(&text))
    }

    /// Runs `cmd` on the node at `host:port` of the cluster, or on the single server.
    pub(crate) async fn on_node<T: redis::FromRedisValue>(
        &mut self,
        node: Option<&(String, u16)>,
        cmd: &Cmd,
    ) -> Result<T> {
        let value = match (self, node) {
            (Self::Cluster(c), Some((host, port))) => c
                .route_command(
                    cmd.clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port: *port,
                    }),
                )
                .await
                .map_err(map)?,
            (conn, _) => cmd.query_async::<Value>(conn).await.map_err(map)?,
        };
        redis::from_redis_value(value).map_err(|e| Error::codec("redis reply", e))
    }
}

/// The masters in a `CLUSTER NODES` reply that are not failing:
/// `<id> <ip:port@cport[,hostname]> <flags> <master> …`.
pub(crate) fn parse_masters(text: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_id), Some(addr), Some(flags)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
            continue;
        }
        let hostport = addr.split(['@', ',']).next().unwrap_or(addr);
        if let Some((host, port)) = hostport.rsplit_once(':') {
            if let Ok(port) = port.parse() {
                if !host.is_empty() {
                    out.push((host.to_owned(), port));
                }
            }
        }
    }
    out.sort();
    out
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Dedicated(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Dedicated(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Dedicated(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let text = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002,node-b master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7003@17003 slave b2 0 1 2 connected
d4 127.0.0.1:7004@17004 master,fail - 0 1 4 disconnected
e5 :0@0 master,noaddr - 0 1 5 disconnected
";
        assert_eq!(
            parse_masters(text),
            vec![
                ("127.0.0.1".to_owned(), 7001),
                ("127.0.0.1".to_owned(), 7002)
            ]
        );
    }
}
