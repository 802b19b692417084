//! The CLI on Redis: a separate `recover` process rebuilds interrupted text from the
//! durable Streams bus, and `project` copies the stream into another store, failing
//! when events went to the dead-letter stream instead.

mod common;

use common::{example, stderr, stdout, Env, OnRedis};
use redis::streams::{StreamInfoGroupsReply, StreamRangeReply};
use redis::Commands;

#[test]
fn recover_in_another_process_rebuilds_text_from_the_stream_and_project_copies_it() {
    let Some(redis) = OnRedis::new("test") else {
        return;
    };
    let env = &redis.env;
    let (_, sid) = env.replay(&example("crash.jsonl"));
    let report = env.json(&["recover", &sid]);
    assert_eq!(report["report"]["text_from_bus"], 1, "{report}");
    assert_eq!(report["report"]["tools_closed"], 2, "{report}");

    let copy = format!("sqlite://{}", env.dir.path().join("copy.db").display());
    let out = env.ok(&["project", "--from", &env.url, "--to", &copy, "--until-idle"]);
    assert!(out.contains("0 dead-lettered"), "{out}");
    let exported = env.ok(&["export", &sid]);
    let copy_env = Env {
        dir: tempfile::tempdir().unwrap(),
        url: copy,
    };
    assert_eq!(
        copy_env.ok(&["export", &sid]),
        exported,
        "the projected copy differs"
    );
}

/// The last entry id delivered to `group` on `stream`.
fn last_delivered(conn: &mut redis::Connection, stream: &str, group: &str) -> String {
    let reply: StreamInfoGroupsReply = conn.xinfo_groups(stream).unwrap();
    reply
        .groups
        .into_iter()
        .find(|g| g.name == group)
        .expect("the group")
        .last_delivered_id
}

/// The number in `text` right before `label`, e.g. `3` in "3 refused by".
fn count_before(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {text}"));
    text[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("no count before {label:?} in {text}"))
}

#[test]
fn project_fails_naming_the_dead_letter_stream_when_events_were_not_projected() {
    let Some(redis) = OnRedis::new("dead") else {
        return;
    };
    let (env, prefix) = (&redis.env, &redis.prefix);
    env.replay(&example("crash.jsonl"));
    let copy = format!("sqlite://{}", env.dir.path().join("copy.db").display());
    let project = ["project", "--from", &env.url, "--to", &copy, "--until-idle"];
    let out = env.ok(&project);
    assert!(out.contains("0 dead-lettered"), "{out}");

    // While no worker runs, a second session is streamed and the first four entries
    // the group has not received are trimmed by hand (as a bounded stream would trim
    // them): they are lost to the copy, and so is the second session's creation, so
    // the copy refuses the session's later events.
    env.replay(&example("multi-turn-tools.jsonl"));
    let mut conn = redis::Client::open(redis.base.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let stream = format!("{prefix}:t:{{default}}:bus");
    let last = last_delivered(&mut conn, &stream, "forge-projector");
    let next: StreamRangeReply = redis::cmd("XRANGE")
        .arg(&stream)
        .arg(format!("({last}"))
        .arg("+")
        .arg("COUNT")
        .arg(5)
        .query(&mut conn)
        .unwrap();
    let cut = &next.ids[4].id;
    let _: u64 = redis::cmd("XTRIM")
        .arg(&stream)
        .arg("MINID")
        .arg(cut)
        .query(&mut conn)
        .unwrap();

    let run = env.run(&project);
    let (summary, error) = (stdout(&run), stderr(&run));
    assert!(
        !run.status.success(),
        "project exited 0 with events dead-lettered:\n{summary}{error}"
    );
    let dead = format!("{prefix}:t:{{default}}:dead");
    assert!(
        error.contains(&format!("dead-letter stream {dead}")),
        "{error}"
    );
    let trimmed = count_before(&summary, "trimmed before they were applied");
    let refused = count_before(&summary, "refused by the store");
    let total = count_before(&summary, "dead-lettered");
    assert_eq!(trimmed, 4, "{summary}");
    assert!(refused > 0, "the second session's later events: {summary}");
    assert_eq!(total, trimmed + refused, "{summary}");
    assert!(
        error.contains(&format!("{total} event(s) were not projected")),
        "{error}"
    );
    let letters: u64 = redis::cmd("XLEN").arg(&dead).query(&mut conn).unwrap();
    assert_eq!(
        letters,
        refused + 1,
        "one per refused event, one for the gap"
    );
    println!(
        "project: exit {:?}, {trimmed} trimmed + {refused} refused = {total} dead-lettered, \
         {letters} dead-letter entries in {dead}\n{}",
        run.status.code(),
        error.trim()
    );
}
