//! The SQL features the issue lists, each statement run on twinpage-SQL
//! (in several twinpage modes) and on stock SQLite: every statement must
//! succeed or fail alike, every query return the same rows, and the
//! database pass `PRAGMA integrity_check` (twinpage's check) at the end.

use twinpage_sql::{Connection, Value};

fn stock_rows(c: &rusqlite::Connection, sql: &str) -> Result<Vec<Vec<Value>>, String> {
    let mut s = c.prepare(sql).map_err(|e| e.to_string())?;
    let n = s.column_count();
    let mut rows = s.query([]).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(|e| e.to_string())? {
        out.push(
            (0..n)
                .map(|i| match r.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Null => Value::Null,
                    rusqlite::types::ValueRef::Integer(x) => Value::Integer(x),
                    rusqlite::types::ValueRef::Real(x) => Value::Real(x),
                    rusqlite::types::ValueRef::Text(t) => {
                        Value::Text(String::from_utf8_lossy(t).into_owned())
                    }
                    rusqlite::types::ValueRef::Blob(b) => Value::Blob(b.to_vec()),
                })
                .collect(),
        );
    }
    Ok(out)
}

const SCRIPT: &[&str] = &[
    // rowid and WITHOUT ROWID tables, PRIMARY KEY, UNIQUE, AUTOINCREMENT
    "CREATE TABLE users(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, age INT)",
    "CREATE TABLE tags(k TEXT, n INT, PRIMARY KEY(k, n)) WITHOUT ROWID",
    "INSERT INTO users(name, age) VALUES ('ann', 31), ('bob', 25), ('cy', NULL)",
    "INSERT INTO users(name) VALUES ('ann')",
    "INSERT OR IGNORE INTO users(name, age) VALUES ('ann', 99)",
    "INSERT OR REPLACE INTO users(id, name, age) VALUES (2, 'bob', 26)",
    "REPLACE INTO users(name, age) VALUES ('cy', 40)",
    "DELETE FROM users WHERE name = 'ann'",
    "INSERT INTO users(name, age) VALUES ('dee', 50)",
    "SELECT * FROM users ORDER BY id",
    "SELECT name, seq FROM sqlite_sequence",
    "INSERT INTO tags VALUES ('x', 2), ('x', 1), ('a', 9)",
    "INSERT INTO tags VALUES ('x', 1)",
    "INSERT INTO tags VALUES ('x', 1) ON CONFLICT(k, n) DO NOTHING",
    "SELECT * FROM tags",
    // indexes (also with DESC and a collation), views, triggers
    "CREATE INDEX users_age ON users(age DESC)",
    "CREATE INDEX users_nc ON users(name COLLATE NOCASE)",
    "INSERT INTO users(name, age) VALUES ('BOB', 7)",
    "SELECT name FROM users WHERE name = 'bob' COLLATE NOCASE ORDER BY name",
    "SELECT name, age FROM users WHERE age > 20 ORDER BY age DESC",
    "CREATE VIEW adults AS SELECT name FROM users WHERE age >= 18",
    "SELECT * FROM adults ORDER BY name",
    "CREATE TABLE log(msg TEXT)",
    "CREATE TRIGGER users_ins AFTER INSERT ON users BEGIN INSERT INTO log VALUES ('new ' || NEW.name); END",
    "CREATE TRIGGER users_upd BEFORE UPDATE OF age ON users WHEN NEW.age < 0 BEGIN SELECT RAISE(ABORT, 'negative age'); END",
    "INSERT INTO users(name, age) VALUES ('eve', 22)",
    "UPDATE users SET age = -1 WHERE name = 'eve'",
    "SELECT * FROM log",
    // explicit and nested transactions, savepoints, statement rollback
    "BEGIN",
    "INSERT INTO users(name, age) VALUES ('fay', 33)",
    "SAVEPOINT a",
    "INSERT INTO users(name, age) VALUES ('gus', 44)",
    "SAVEPOINT b",
    "DELETE FROM users",
    "ROLLBACK TO b",
    "RELEASE b",
    "INSERT INTO users(name, age) VALUES ('fay', 1)",
    "ROLLBACK TO a",
    "COMMIT",
    "SELECT name FROM users ORDER BY name",
    "BEGIN IMMEDIATE",
    "UPDATE users SET age = age + 1",
    "ROLLBACK",
    "BEGIN EXCLUSIVE",
    "UPDATE users SET age = age + 100 WHERE age IS NOT NULL",
    "COMMIT",
    "SELECT name, age FROM users ORDER BY id",
    // a multi-row statement that fails half-way rolls back alone
    "CREATE TABLE u(x UNIQUE)",
    "INSERT INTO u VALUES (1), (2)",
    "BEGIN",
    "INSERT INTO u VALUES (3)",
    "INSERT INTO u SELECT x + 10 FROM u UNION ALL SELECT 1",
    "COMMIT",
    "SELECT * FROM u ORDER BY x",
    // foreign keys
    "PRAGMA foreign_keys = ON",
    "CREATE TABLE parent(id INTEGER PRIMARY KEY)",
    "CREATE TABLE child(id INTEGER PRIMARY KEY, pid INT REFERENCES parent(id) ON DELETE CASCADE)",
    "INSERT INTO parent VALUES (1), (2)",
    "INSERT INTO child VALUES (10, 1), (11, 2)",
    "INSERT INTO child VALUES (12, 3)",
    "DELETE FROM parent WHERE id = 1",
    "SELECT * FROM child",
    // ALTER TABLE
    "ALTER TABLE users ADD COLUMN email TEXT DEFAULT 'none'",
    "ALTER TABLE users RENAME COLUMN age TO years",
    "ALTER TABLE log RENAME TO events",
    "SELECT * FROM users ORDER BY id",
    "SELECT count(*) FROM events",
    "ALTER TABLE users DROP COLUMN email",
    "SELECT sql FROM sqlite_schema WHERE name = 'users'",
    // large values and long index keys (overflow pages)
    "CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)",
    "CREATE INDEX docs_body ON docs(substr(body, 1, 500))",
    "INSERT INTO docs(body) SELECT printf('%.*c', 20000 + value, 'a') || value FROM generate_series(1, 20)",
    "SELECT id, length(body), substr(body, -3) FROM docs WHERE substr(body, 1, 500) = printf('%.*c', 500, 'a') ORDER BY id",
    "UPDATE docs SET body = 'short' WHERE id % 2 = 0",
    "SELECT id, length(body) FROM docs ORDER BY id",
    "DELETE FROM docs WHERE id > 15",
    "SELECT count(*), sum(length(body)) FROM docs",
    // drop and clear
    "DROP INDEX users_age",
    "DROP VIEW adults",
    "DROP TRIGGER users_ins",
    "DROP TABLE tags",
    "DELETE FROM u",
    "SELECT type, name FROM sqlite_schema ORDER BY type, name",
    "PRAGMA user_version = 7",
    "PRAGMA user_version",
    "PRAGMA schema_version > 0",
];

/// Index records and WITHOUT ROWID primary keys far longer than a cell
/// (5,000 bytes and more: twinpage keeps their tails in overflow chains),
/// sharing long prefixes so that the separators between them overflow too.
const LONG_KEYS: &[&str] = &[
    "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)",
    "CREATE INDEX notes_body ON notes(body)",
    "INSERT INTO notes(body) SELECT printf('%.*c', 5000, 'n') || value FROM generate_series(1, 80)",
    "INSERT INTO notes(body) SELECT printf('%.*c', 4990 + value, 'n') FROM generate_series(1, 20)",
    "SELECT id, length(body), substr(body, -3) FROM notes WHERE body > printf('%.*c', 5000, 'n') || '5' ORDER BY body",
    "SELECT id FROM notes ORDER BY body DESC LIMIT 7",
    "CREATE TABLE longk(k TEXT PRIMARY KEY, v INT) WITHOUT ROWID",
    "INSERT INTO longk SELECT printf('%.*c', 4000 + value * 50, 'k') || printf('%05d', value), value FROM generate_series(1, 60)",
    "INSERT INTO longk VALUES (printf('%.*c', 4050, 'k') || '00001', 0)",
    "INSERT OR REPLACE INTO longk VALUES (printf('%.*c', 4050, 'k') || '00001', -1)",
    "SELECT length(k), v FROM longk WHERE k >= printf('%.*c', 5000, 'k') ORDER BY k",
    "SELECT v FROM longk WHERE k = printf('%.*c', 4100, 'k') || '00002'",
    "CREATE TABLE pairs(a BLOB, b TEXT, c INT, PRIMARY KEY(a, b)) WITHOUT ROWID",
    "INSERT INTO pairs SELECT zeroblob(3000 + value % 7), printf('%.*c', 2500 + value, 'b'), value FROM generate_series(1, 50)",
    "SELECT length(a), length(b), c FROM pairs ORDER BY a, b DESC",
    "BEGIN",
    "UPDATE longk SET v = v * 2 WHERE v % 3 = 0",
    "DELETE FROM notes WHERE id % 4 = 0",
    "SAVEPOINT s",
    "DELETE FROM longk WHERE v % 5 = 0",
    "DELETE FROM pairs WHERE c % 2 = 0",
    "ROLLBACK TO s",
    "DELETE FROM longk WHERE v % 7 = 0",
    "COMMIT",
    "SELECT count(*), sum(length(body)) FROM notes",
    "SELECT count(*), sum(v) FROM longk",
    "SELECT count(*), sum(c) FROM pairs",
    "INSERT INTO notes(body) VALUES (printf('%.*c', 5000, 'n') || '1')",
    "CREATE UNIQUE INDEX notes_u ON notes(body)",
    "DROP INDEX notes_body",
    "SELECT count(*) FROM notes WHERE body LIKE 'nnn%'",
    "DELETE FROM longk",
    "DROP TABLE pairs",
    "SELECT count(*) FROM longk",
];

fn run_script(mode: &str) {
    run(mode, SCRIPT);
}

fn run(mode: &str, script: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!(
        "file:{}?journal_mode={mode}",
        dir.path().join("tp.db").display()
    );
    let tp = Connection::open(uri).unwrap();
    let st = rusqlite::Connection::open(dir.path().join("st.db")).unwrap();
    for sql in script {
        let a = tp.query(sql, &[]).map_err(|e| e.message);
        let b = stock_rows(&st, sql);
        match (&a, &b) {
            (Ok(x), Ok(y)) => assert_eq!(x, y, "{mode}: {sql}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{mode}: {sql}: twinpage {a:?}, stock {b:?}"),
        }
    }
    assert_eq!(
        tp.query("PRAGMA integrity_check", &[]).unwrap(),
        vec![vec![Value::Text("ok".into())]],
        "{mode}"
    );
    assert_eq!(
        tp.query("PRAGMA journal_mode", &[]).unwrap(),
        vec![vec![Value::Text(mode.into())]]
    );
}

#[test]
fn listed_sql_features_match_stock_sqlite() {
    for mode in ["persist", "wal", "dhl-cc", "off", "shadow"] {
        run_script(mode);
    }
}

#[test]
fn long_index_keys_and_primary_keys_match_stock_sqlite() {
    for mode in twinpage::JournalMode::ALL {
        run(mode.name(), LONG_KEYS);
    }
}

#[test]
fn journal_mode_pragma_selects_and_reports_twinpage_modes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let c = Connection::open(&path).unwrap();
    let mode = |c: &Connection, q: &str| c.query(q, &[]).unwrap()[0][0].clone();
    assert_eq!(
        mode(&c, "PRAGMA journal_mode"),
        Value::Text("persist".into())
    );
    // Before the first write any mode; the file starts in its format.
    assert_eq!(
        mode(&c, "PRAGMA journal_mode='dhl-cc'"),
        Value::Text("dhl-cc".into())
    );
    c.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1)")
        .unwrap();
    // After it, modes of the same page format.
    assert_eq!(
        mode(&c, "PRAGMA journal_mode='dhl-tc'"),
        Value::Text("dhl-tc".into())
    );
    c.execute_batch("INSERT INTO t VALUES (2)").unwrap();
    // Another format is refused: the pragma reports the mode in effect.
    assert_eq!(
        mode(&c, "PRAGMA journal_mode=wal"),
        Value::Text("dhl-tc".into())
    );
    drop(c);
    assert_eq!(
        twinpage::Db::detect_mode(&path).unwrap(),
        Some(twinpage::JournalMode::DhlTc)
    );
    let c = Connection::open(&path).unwrap();
    assert_eq!(
        mode(&c, "PRAGMA journal_mode"),
        Value::Text("dhl-tc".into())
    );
    assert_eq!(mode(&c, "SELECT count(*) FROM t"), Value::Integer(2));
    // An unknown name is a query, as in SQLite.
    assert_eq!(
        mode(&c, "PRAGMA journal_mode=nonsense"),
        Value::Text("dhl-tc".into())
    );
    drop(c);
    // The slotted modes switch among themselves at any time.
    let c = Connection::open(dir.path().join("s.db")).unwrap();
    c.execute_batch("CREATE TABLE t(a); INSERT INTO t VALUES (1)")
        .unwrap();
    for m in ["wal", "delete", "truncate", "off", "persist"] {
        assert_eq!(
            mode(&c, &format!("PRAGMA journal_mode={m}")),
            Value::Text(m.into())
        );
        c.execute_batch("INSERT INTO t VALUES (2)").unwrap();
    }
    assert_eq!(mode(&c, "SELECT count(*) FROM t"), Value::Integer(6));
    assert_eq!(mode(&c, "PRAGMA integrity_check"), Value::Text("ok".into()));
    // A concurrency protocol the mode does not offer is refused at open.
    let e = Connection::open(format!(
        "file:{}?concurrency=2vto",
        dir.path().join("x.db").display()
    ))
    .err()
    .unwrap();
    assert!(e.message.contains("concurrency") || e.primary() != 0, "{e}");
}

#[test]
fn two_connections_share_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let a = Connection::open(&path).unwrap();
    let b = Connection::open(&path).unwrap();
    a.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
        .unwrap();
    assert_eq!(
        b.query("SELECT x FROM t", &[]).unwrap(),
        vec![vec![Value::Integer(1)]]
    );
    // A reader that became a writer after another connection committed
    // gets SQLITE_BUSY (its snapshot is stale), as in SQLite's WAL mode.
    b.execute_batch("BEGIN; SELECT * FROM t").unwrap();
    a.execute_batch("INSERT INTO t VALUES (2)").unwrap_or(());
    let e = b.execute_batch("INSERT INTO t VALUES (3)");
    let _ = b.execute_batch("ROLLBACK");
    if let Err(e) = e {
        assert!(e.is_busy(), "{e}");
    }
    b.execute_batch("INSERT INTO t VALUES (4)").unwrap();
    let count = |c: &Connection| c.query("SELECT count(*) FROM t", &[]).unwrap()[0][0].clone();
    assert_eq!(count(&a), count(&b));
}

#[test]
fn a_concurrency_protocol_by_uri() {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!(
        "file:{}?journal_mode=wal&concurrency=begin-concurrent",
        dir.path().join("c.db").display()
    );
    let a = Connection::open(&uri).unwrap();
    let b = Connection::open(&uri).unwrap();
    a.execute_batch("CREATE TABLE t(x INTEGER PRIMARY KEY, y)")
        .unwrap();
    a.execute_batch("INSERT INTO t VALUES (1, 'a')").unwrap();
    b.execute_batch("INSERT INTO t VALUES (2, 'b')").unwrap();
    assert_eq!(
        a.query("SELECT count(*) FROM t", &[]).unwrap(),
        vec![vec![Value::Integer(2)]]
    );
    assert_eq!(
        b.query("PRAGMA integrity_check", &[]).unwrap(),
        vec![vec![Value::Text("ok".into())]]
    );
}
