//! SQL over twinpage against stock SQLite (rusqlite), statement by statement.

use twinpage_sql::{Connection, Value};

fn stock_rows(c: &rusqlite::Connection, sql: &str) -> Vec<Vec<Value>> {
    let mut s = c.prepare(sql).unwrap();
    let n = s.column_count();
    let mut rows = s.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(r) = rows.next().unwrap() {
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
    out
}

#[test]
fn tables_indexes_and_queries_match_stock_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let tp = Connection::open(dir.path().join("tp.db")).unwrap();
    let st = rusqlite::Connection::open(dir.path().join("st.db")).unwrap();
    let script = [
        "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL)",
        "CREATE INDEX tb ON t(b)",
        "CREATE TABLE w(k TEXT PRIMARY KEY, v) WITHOUT ROWID",
        "INSERT INTO t(b, c) VALUES ('x', 1.5), ('y', 2.5), ('x', 3.5)",
        "INSERT INTO w VALUES ('b', 2), ('a', 1), ('c', 3)",
        "UPDATE t SET c = c * 2 WHERE b = 'x'",
        "DELETE FROM w WHERE k = 'b'",
        "CREATE UNIQUE INDEX wv ON w(v)",
    ];
    for s in script {
        tp.execute_batch(s).unwrap();
        st.execute_batch(s).unwrap();
    }
    for q in [
        "SELECT * FROM t ORDER BY a",
        "SELECT * FROM t WHERE b = 'x' ORDER BY c DESC",
        "SELECT b, count(*), sum(c) FROM t GROUP BY b ORDER BY b",
        "SELECT * FROM w",
        "SELECT * FROM w WHERE v > 1",
        "SELECT name, type FROM sqlite_schema ORDER BY name",
        "SELECT DISTINCT b FROM t ORDER BY 1",
        "SELECT a FROM t WHERE b IN ('x', 'z') ORDER BY a",
    ] {
        let got = tp.query(q, &[]).unwrap_or_else(|e| panic!("{q}: {e}"));
        assert_eq!(got, stock_rows(&st, q), "{q}");
    }
    let e = tp
        .execute("INSERT INTO w VALUES ('z', 3)", &[])
        .unwrap_err();
    assert_eq!(e.primary(), 19, "{e}");
    assert_eq!(
        tp.query("PRAGMA integrity_check", &[]).unwrap(),
        vec![vec![Value::Text("ok".into())]]
    );
}
