//! The model's rules, without FUSE.

use super::*;

fn file(s: &mut State, parent: u64, name: &str) -> u64 {
    let n = Node::new(Body::File(Data::default()), 0o644, 0, 0, parent);
    s.make(parent, OsStr::new(name), n).unwrap()
}

/// A file `name` in the root holding `bytes`, nothing synced.
fn written(s: &mut State, name: &str, bytes: &[u8]) -> u64 {
    let f = file(s, ROOT, name);
    s.write(f, 0, bytes).unwrap();
    f
}

/// A file `name` in the root holding `bytes`, synced, and the root synced after it.
fn durable(s: &mut State, name: &str, bytes: &[u8]) -> u64 {
    let f = written(s, name, bytes);
    s.fsync(f).unwrap();
    s.sync_dir(ROOT).unwrap();
    f
}

/// Renames `from` to `to`, both in the root.
fn rename(s: &mut State, from: &str, to: &str) {
    s.rename(ROOT, OsStr::new(from), ROOT, OsStr::new(to), false, false)
        .unwrap();
}

fn content(s: &State, parent: u64, name: &str) -> Option<Vec<u8>> {
    let ino = s.lookup(parent, OsStr::new(name)).ok()?;
    match &s.node(ino).ok()?.body {
        Body::File(d) => Some(d.read(0, d.size as usize)),
        _ => None,
    }
}

#[test]
fn data_reads_back_what_was_written_across_chunks_and_truncates_to_zeros() {
    let mut d = Data::default();
    let bytes: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    d.write(5, &bytes);
    assert_eq!(d.size, 40_005);
    assert_eq!(d.read(5, 40_000), bytes);
    assert_eq!(d.read(0, 5), vec![0; 5]);
    d.truncate(20_000);
    d.truncate(30_000);
    assert_eq!(d.read(19_990, 10), bytes[19_985..19_995].to_vec());
    assert_eq!(d.read(20_000, 10_000), vec![0; 10_000]);
}

#[test]
fn a_synced_file_in_a_synced_directory_survives_and_later_writes_do_not() {
    let mut s = State::new(Rules::Strict);
    let f = durable(&mut s, "a", b"kept");
    s.write(f, 4, b" lost").unwrap();
    let cut = s.cut();
    assert_eq!(cut.dropped_bytes, 5);
    assert_eq!(content(&s, ROOT, "a").as_deref(), Some(&b"kept"[..]));
}

#[test]
fn under_strict_rules_a_synced_file_whose_directory_was_not_synced_is_gone() {
    for (rules, after) in [(Rules::Strict, None), (Rules::Ext4, Some(&b"x"[..]))] {
        let mut s = State::new(rules);
        let f = written(&mut s, "a", b"x");
        s.fsync(f).unwrap();
        s.cut();
        assert_eq!(content(&s, ROOT, "a").as_deref(), after, "{rules:?}");
    }
}

#[test]
fn a_name_synced_before_its_data_is_an_empty_file() {
    let mut s = State::new(Rules::Strict);
    written(&mut s, "a", b"x");
    s.sync_dir(ROOT).unwrap();
    s.cut();
    assert_eq!(content(&s, ROOT, "a").as_deref(), Some(&b""[..]));
}

#[test]
fn renames_and_unlinks_hold_only_once_their_directory_is_synced() {
    let mut s = State::new(Rules::Strict);
    durable(&mut s, "a", b"x");
    rename(&mut s, "a", "b");
    s.cut();
    assert!(content(&s, ROOT, "a").is_some() && content(&s, ROOT, "b").is_none());
    rename(&mut s, "a", "b");
    s.sync_dir(ROOT).unwrap();
    s.cut();
    assert!(content(&s, ROOT, "a").is_none() && content(&s, ROOT, "b").is_some());
    s.remove(ROOT, OsStr::new("b"), false).unwrap();
    s.cut();
    assert!(
        content(&s, ROOT, "b").is_some(),
        "an unsynced unlink is undone"
    );
}

#[test]
fn a_rename_replaces_its_target_and_a_directory_keeps_its_link_counts() {
    let mut s = State::new(Rules::Strict);
    written(&mut s, "a", b"new");
    file(&mut s, ROOT, "b");
    rename(&mut s, "a", "b");
    assert_eq!(content(&s, ROOT, "b").as_deref(), Some(&b"new"[..]));
    let d = Node::new(Body::Dir(BTreeMap::new()), 0o755, 0, 0, ROOT);
    let d = s.make(ROOT, OsStr::new("d"), d).unwrap();
    assert_eq!(s.node(ROOT).unwrap().nlink, 3);
    assert_eq!(
        s.remove(ROOT, OsStr::new("d"), false),
        Err(EISDIR),
        "unlink of a directory"
    );
    file(&mut s, d, "inner");
    assert_eq!(s.remove(ROOT, OsStr::new("d"), true), Err(ENOTEMPTY));
    s.sync_all();
    s.cut();
    assert_eq!(s.node(ROOT).unwrap().nlink, 3);
    assert!(content(&s, d, "inner").is_some());
}
