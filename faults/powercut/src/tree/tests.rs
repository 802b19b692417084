//! The model's rules, without FUSE.

use super::*;

fn file(s: &mut State, parent: u64, name: &str) -> u64 {
    let n = Node::new(Body::File(Data::default()), 0o644, 0, 0, parent);
    s.make(parent, OsStr::new(name), n).unwrap()
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
    let f = file(&mut s, ROOT, "a");
    s.write(f, 0, b"kept").unwrap();
    s.fsync(f).unwrap();
    s.sync_dir(ROOT).unwrap();
    s.write(f, 4, b" lost").unwrap();
    let cut = s.cut();
    assert_eq!(cut.dropped_bytes, 5);
    assert_eq!(content(&s, ROOT, "a").as_deref(), Some(&b"kept"[..]));
}

#[test]
fn under_strict_rules_a_synced_file_whose_directory_was_not_synced_is_gone() {
    let mut s = State::new(Rules::Strict);
    let f = file(&mut s, ROOT, "a");
    s.write(f, 0, b"x").unwrap();
    s.fsync(f).unwrap();
    s.cut();
    assert_eq!(content(&s, ROOT, "a"), None);

    let mut e = State::new(Rules::Ext4);
    let f = file(&mut e, ROOT, "a");
    e.write(f, 0, b"x").unwrap();
    e.fsync(f).unwrap();
    e.cut();
    assert_eq!(content(&e, ROOT, "a").as_deref(), Some(&b"x"[..]));
}

#[test]
fn a_name_synced_before_its_data_is_an_empty_file() {
    let mut s = State::new(Rules::Strict);
    let f = file(&mut s, ROOT, "a");
    s.write(f, 0, b"x").unwrap();
    s.sync_dir(ROOT).unwrap();
    s.cut();
    assert_eq!(content(&s, ROOT, "a").as_deref(), Some(&b""[..]));
}

#[test]
fn renames_and_unlinks_hold_only_once_their_directory_is_synced() {
    let mut s = State::new(Rules::Strict);
    let f = file(&mut s, ROOT, "a");
    s.write(f, 0, b"x").unwrap();
    s.fsync(f).unwrap();
    s.sync_dir(ROOT).unwrap();
    s.rename(ROOT, OsStr::new("a"), ROOT, OsStr::new("b"), false, false)
        .unwrap();
    s.cut();
    assert!(content(&s, ROOT, "a").is_some() && content(&s, ROOT, "b").is_none());
    s.rename(ROOT, OsStr::new("a"), ROOT, OsStr::new("b"), false, false)
        .unwrap();
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
    let a = file(&mut s, ROOT, "a");
    file(&mut s, ROOT, "b");
    s.write(a, 0, b"new").unwrap();
    s.rename(ROOT, OsStr::new("a"), ROOT, OsStr::new("b"), false, false)
        .unwrap();
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
