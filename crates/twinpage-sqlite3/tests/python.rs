//! Python's `sqlite3` module, unchanged, on this library (through
//! `LD_LIBRARY_PATH`): it creates, fills and queries a twinpage file, and
//! `PRAGMA integrity_check` runs twinpage's check. (A distribution's
//! `sqlite3` shell refuses to run on another SQLite version than it was
//! built with, and `shell.c` is not in the pinned crate: see docs/SQL.md.)

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory holding `libsqlite3.so.0`: the library cargo built.
fn lib_dir(tmp: &Path) -> PathBuf {
    // The test binary is in target/<profile>/deps, beside the library.
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = [deps.join("libsqlite3.so"), deps.join("../libsqlite3.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("libsqlite3.so built by cargo");
    let dir = tmp.join("lib");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&so, dir.join("libsqlite3.so.0")).unwrap();
    dir
}

const SCRIPT: &str = r#"
import sqlite3, sys
path = sys.argv[1]
print("version", sqlite3.sqlite_version)
con = sqlite3.connect(path)
con.execute("PRAGMA journal_mode='dhl-cc'")
con.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT)")
con.execute("CREATE INDEX notes_body ON notes(body)")
with con:
    con.executemany("INSERT INTO notes(title, body) VALUES (?, ?)",
                    [("t%03d" % i, "body %d" % (i % 7)) for i in range(500)])
try:
    con.execute("INSERT INTO notes(title, body) VALUES ('t001', 'dup')")
    print("no constraint error")
except sqlite3.IntegrityError as e:
    print("constraint", e)
con.commit()
print("count", con.execute("SELECT count(*) FROM notes").fetchone()[0])
print("body3", con.execute("SELECT count(*) FROM notes WHERE body = 'body 3'").fetchone()[0])
print("last", con.execute("SELECT title FROM notes ORDER BY title DESC LIMIT 1").fetchone()[0])
print("mode", con.execute("PRAGMA journal_mode").fetchone()[0])
print("check", con.execute("PRAGMA integrity_check").fetchone()[0])
con.close()
con = sqlite3.connect(path)
print("reopened", con.execute("SELECT count(*) FROM notes").fetchone()[0])
con.close()
"#;

#[test]
fn python_sqlite3_module_on_a_twinpage_file() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = lib_dir(tmp.path());
    let db = tmp.path().join("notes.db");
    let out = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(&db)
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python failed:\n{stdout}\n{stderr}");
    let expect = [
        "version 3.50.2",
        "constraint UNIQUE constraint failed: notes.title",
        "count 500",
        "body3 71",
        "last t499",
        "mode dhl-cc",
        "check ok",
        "reopened 500",
    ];
    for line in expect {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{stdout}"
        );
    }
    // A twinpage file, not an SQLite one.
    let head = std::fs::read(&db).unwrap();
    assert!(head.starts_with(b"twinpage fmt v1"), "not a twinpage file");
}
