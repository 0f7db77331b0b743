//! The workspace keeps every access inside its directory.

use std::os::unix::fs::symlink;

use cem_store::{Workspace, WorkspaceError};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn setup(limit: u64) -> Result<(tempfile::TempDir, Workspace), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let ws = Workspace::open(&tmp.path().join("ws"), limit)?;
    Ok((tmp, ws))
}

#[test]
fn write_read_list_round_trip() -> TestResult {
    let (_tmp, ws) = setup(1024)?;
    let w = ws.write("reports/q1/summary.json", b"{\"a\": 1}")?;
    assert!(w.created);
    assert_eq!(w.size, 8);
    assert_eq!(ws.read_text("reports/q1/summary.json")?, "{\"a\": 1}");
    let again = ws.write("./reports/q1/summary.json", b"{}")?;
    assert!(!again.created, "overwriting is not creating");
    assert_eq!(ws.read_text("reports/q1/summary.json")?, "{}");

    let listing = ws.list("")?;
    let paths: Vec<_> = listing
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.kind))
        .collect();
    assert_eq!(
        paths,
        vec![
            ("reports", "directory"),
            ("reports/q1", "directory"),
            ("reports/q1/summary.json", "file")
        ]
    );
    assert_eq!(ws.list("reports/q1")?.entries.len(), 1);
    assert_eq!(ws.usage()?.files, 1);
    assert_eq!(ws.usage()?.bytes, 2);
    Ok(())
}

#[test]
fn traversal_absolute_and_nul_are_refused() -> TestResult {
    let (_tmp, ws) = setup(1024)?;
    for bad in [
        "../escape.txt",
        "a/../../escape.txt",
        "/etc/passwd",
        "a\0b",
        "",
        "dir/",
    ] {
        let err = ws.write(bad, b"x").err();
        assert!(
            matches!(err, Some(WorkspaceError::BadPath { .. })),
            "{bad:?}: {err:?}"
        );
        assert!(
            matches!(ws.read(bad), Err(WorkspaceError::BadPath { .. })),
            "{bad:?}"
        );
    }
    assert!(matches!(
        ws.list("../"),
        Err(WorkspaceError::BadPath { .. })
    ));
    Ok(())
}

#[test]
fn symlinks_out_of_the_workspace_are_not_followed() -> TestResult {
    let (tmp, ws) = setup(1024)?;
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside)?;
    std::fs::write(outside.join("secret.txt"), "host secret")?;
    symlink(outside.join("secret.txt"), ws.root().join("link.txt"))?;
    symlink(&outside, ws.root().join("linkdir"))?;
    symlink("/etc/passwd", ws.root().join("passwd"))?;

    for path in ["link.txt", "linkdir/secret.txt", "passwd"] {
        let err = ws.read(path).err();
        assert!(
            matches!(err, Some(WorkspaceError::Escapes { .. })),
            "{path}: {err:?}"
        );
    }
    // Writing through a symlinked directory is refused and nothing lands outside.
    let err = ws.write("linkdir/new.txt", b"x").err();
    assert!(
        matches!(err, Some(WorkspaceError::Escapes { .. })),
        "{err:?}"
    );
    assert!(!outside.join("new.txt").exists());
    // Writing to a symlinked file replaces the link, never the target.
    ws.write("link.txt", b"replaced")?;
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt"))?,
        "host secret"
    );
    assert_eq!(ws.read_text("link.txt")?, "replaced");
    // A listing shows links as links and does not descend into them.
    let listing = ws.list("")?;
    assert!(
        listing
            .entries
            .iter()
            .any(|e| e.path == "linkdir" && e.kind == "symlink")
    );
    assert!(
        !listing
            .entries
            .iter()
            .any(|e| e.path.starts_with("linkdir/"))
    );
    Ok(())
}

#[test]
fn symlinks_inside_the_workspace_still_work() -> TestResult {
    let (_tmp, ws) = setup(1024)?;
    ws.write("data/real.txt", b"inside")?;
    symlink("data/real.txt", ws.root().join("alias.txt"))?;
    assert_eq!(ws.read_text("alias.txt")?, "inside");
    Ok(())
}

#[test]
fn size_limits_apply_to_writes_and_reads() -> TestResult {
    let (_tmp, ws) = setup(10)?;
    assert!(matches!(
        ws.write("big.txt", &[b'x'; 11]),
        Err(WorkspaceError::TooLarge {
            size: 11,
            limit: 10
        })
    ));
    assert!(
        !ws.root().join("big.txt").exists(),
        "a refused write leaves nothing"
    );
    std::fs::write(ws.root().join("grown.txt"), [b'y'; 50])?;
    assert!(matches!(
        ws.read("grown.txt"),
        Err(WorkspaceError::TooLargeToRead { .. })
    ));
    Ok(())
}

#[test]
fn special_files_and_directories_are_refused_without_hanging() -> TestResult {
    let (_tmp, ws) = setup(1024)?;
    let fifo = ws.root().join("pipe");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status()?;
    assert!(status.success());
    assert!(matches!(
        ws.read("pipe"),
        Err(WorkspaceError::NotRegular { .. })
    ));
    std::fs::create_dir(ws.root().join("dir"))?;
    assert!(matches!(
        ws.read("dir"),
        Err(WorkspaceError::IsDirectory { .. })
    ));
    assert!(matches!(
        ws.write("dir", b"x"),
        Err(WorkspaceError::IsDirectory { .. })
    ));
    assert!(matches!(
        ws.read("missing.txt"),
        Err(WorkspaceError::NotFound { .. })
    ));
    std::fs::write(ws.root().join("bin"), [0xff, 0xfe, 0x00])?;
    assert!(matches!(
        ws.read_text("bin"),
        Err(WorkspaceError::NotText { .. })
    ));
    Ok(())
}

#[test]
fn concurrent_writes_to_one_file_never_tear() -> TestResult {
    let (_tmp, ws) = setup(1 << 20)?;
    let ws = std::sync::Arc::new(ws);
    let payloads: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 64 * 1024]).collect();
    std::thread::scope(|s| {
        for p in &payloads {
            let ws = ws.clone();
            s.spawn(move || {
                for _ in 0..20 {
                    ws.write("shared.bin", p)
                        .map(|_| ())
                        .map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            });
        }
    });
    let content = ws.read("shared.bin")?;
    assert_eq!(content.len(), 64 * 1024);
    assert!(
        content.iter().all(|b| *b == content[0]),
        "file mixes two writes"
    );
    assert_eq!(ws.list("")?.entries.len(), 1, "no temp files left behind");
    Ok(())
}

#[test]
fn deep_trees_neither_crash_nor_exhaust_fds() -> TestResult {
    let (_tmp, ws) = setup(1024)?;
    let deep = "d/".repeat(1500) + "f.txt";
    ws.write(&deep, b"x")?;
    let listing = ws.list("")?;
    assert_eq!(
        listing.entries.len(),
        cem_store::MAX_DEPTH,
        "descends at most MAX_DEPTH levels"
    );
    ws.usage()?;
    assert_eq!(ws.read_text(&deep)?, "x");
    Ok(())
}

#[test]
fn a_symlinked_workspace_root_is_refused() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let elsewhere = tmp.path().join("home");
    std::fs::create_dir(&elsewhere)?;
    symlink(&elsewhere, tmp.path().join("ws"))?;
    let err = Workspace::open(&tmp.path().join("ws"), 1024).err();
    assert!(
        matches!(err, Some(WorkspaceError::UnsafeRoot { .. })),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn a_replaced_workspace_root_is_noticed() -> TestResult {
    let (tmp, ws) = setup(1024)?;
    ws.write("a.txt", b"1")?;
    std::fs::rename(ws.root(), tmp.path().join("moved"))?;
    std::fs::create_dir(ws.root())?;
    let err = ws.write("b.txt", b"2").err();
    assert!(
        matches!(err, Some(WorkspaceError::Replaced { .. })),
        "{err:?}"
    );
    assert!(!tmp.path().join("moved/b.txt").exists());
    Ok(())
}

#[test]
fn hard_links_and_reserved_names_are_refused() -> TestResult {
    let (tmp, ws) = setup(1024)?;
    let outside = tmp.path().join("secret.txt");
    std::fs::write(&outside, "host secret")?;
    std::fs::hard_link(&outside, ws.root().join("linked.txt"))?;
    let err = ws.read("linked.txt").err();
    assert!(
        matches!(err, Some(WorkspaceError::HardLinked { links: 2, .. })),
        "{err:?}"
    );
    let err = ws.write(".cem-tmp.sneaky", b"x").err();
    assert!(
        matches!(err, Some(WorkspaceError::BadPath { .. })),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn new_files_are_private_and_replaced_files_keep_their_mode() -> TestResult {
    use std::os::unix::fs::PermissionsExt;
    let (_tmp, ws) = setup(1024)?;
    ws.write("new.txt", b"x")?;
    let mode = |p: &str| -> std::io::Result<u32> {
        Ok(std::fs::metadata(ws.root().join(p))?.permissions().mode() & 0o777)
    };
    assert_eq!(mode("new.txt")?, 0o600);
    std::fs::set_permissions(
        ws.root().join("new.txt"),
        std::fs::Permissions::from_mode(0o640),
    )?;
    ws.write("new.txt", b"y")?;
    assert_eq!(mode("new.txt")?, 0o640);
    assert_eq!(
        std::fs::metadata(ws.root())?.permissions().mode() & 0o777,
        0o700
    );
    Ok(())
}

#[test]
fn permission_errors_are_not_called_escapes() {
    let denied = std::io::Error::from_raw_os_error(libc_eacces());
    let err = cem_store::WorkspaceError::from_io("x", denied);
    assert!(
        matches!(err, WorkspaceError::PermissionDenied { .. }),
        "{err:?}"
    );
    let escape = std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "a path led outside of the filesystem",
    );
    let err = cem_store::WorkspaceError::from_io("x", escape);
    assert!(matches!(err, WorkspaceError::Escapes { .. }), "{err:?}");
}

fn libc_eacces() -> i32 {
    13
}

#[test]
fn a_small_workspace_is_walked_in_place_and_a_large_one_is_not() -> TestResult {
    let (_tmp, ws) = setup(1024)?;
    // Before any walk its size is unknown: not "small".
    assert!(ws.files_if_small(8)?.is_none());
    ws.write("a.txt", b"1")?;
    ws.write("d/b.txt", b"22")?;
    assert_eq!(ws.files()?.len(), 2);
    let small = ws.files_if_small(8)?.ok_or("3 entries is small")?;
    let mut paths: Vec<_> = small.iter().map(|f| (f.path.as_str(), f.size)).collect();
    paths.sort();
    assert_eq!(paths, [("a.txt", 1), ("d/b.txt", 2)]);
    // Grown past the bound: this walk stops and says so, and the next one
    // is not even tried until a full walk finds it small again. The names
    // sit in one directory, which the walk reads no further than the bound.
    for i in 0..10 {
        ws.write(&format!("many/{i}.txt"), b"x")?;
    }
    assert!(ws.files_if_small(8)?.is_none());
    for i in 0..10 {
        assert!(ws.remove(&format!("many/{i}.txt"))?);
    }
    // Small again, but the last walk was not: no walk in place yet.
    assert!(ws.files_if_small(8)?.is_none());
    assert_eq!(ws.files()?.len(), 2);
    assert_eq!(ws.files_if_small(8)?.map(|f| f.len()), Some(2));
    Ok(())
}

#[test]
fn a_walk_in_place_stops_in_a_large_directory() -> TestResult {
    let (_tmp, ws) = setup(1024)?;
    ws.write("a.txt", b"1")?;
    assert_eq!(ws.files()?.len(), 1);
    // 300 names in the root: more than the walk may read.
    for i in 0..300 {
        ws.write(&format!("f{i:03}.txt"), b"x")?;
    }
    assert!(ws.files_if_small(64)?.is_none());
    assert_eq!(ws.files()?.len(), 301, "a full walk still sees everything");
    Ok(())
}
