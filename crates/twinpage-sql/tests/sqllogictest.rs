//! SQLite's sqllogictest corpus (the subset in `../shared/sqllogictest`)
//! through the `sqllogictest` crate, on stock SQLite (rusqlite) and on
//! twinpage-SQL: every record must come out the same on both, file by
//! file. The per-file pass counts are printed (and recorded in
//! docs/SQL.md).
//!
//! Values are printed as SQLite's own sqllogictest runner prints them, by
//! the column types the query declares (`I` as an integer, `R` with three
//! decimals, text with `(empty)` for an empty string, NULL as `NULL`), and
//! results compare value-wise (`control resultmode valuewise`), hashed
//! above 8 values as SQLite's runner does.
//!
//! The corpus directory is `TWINPAGE_SLT_DIR`, else `shared/sqllogictest`
//! beside the repository (or beside a directory above it). `TWINPAGE_SLT_FILTER` runs only the files whose
//! path contains it.

use sqllogictest::{Control, DBOutput, DefaultColumnType, QueryExpect, Record, ResultMode, Runner};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use twinpage_sql::Value;

#[derive(Debug)]
struct EngineError(String);

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EngineError {}

enum Conn {
    Stock(rusqlite::Connection),
    Twin(twinpage_sql::Connection),
}

struct Engine {
    conn: Conn,
    /// The column types the current query declares.
    types: Arc<Mutex<Vec<char>>>,
}

fn stock_value(v: rusqlite::types::ValueRef<'_>) -> Value {
    use rusqlite::types::ValueRef as V;
    match v {
        V::Null => Value::Null,
        V::Integer(i) => Value::Integer(i),
        V::Real(r) => Value::Real(r),
        V::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        V::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// The leading number of a text, as SQLite converts text to a number.
fn text_number(s: &str) -> f64 {
    let t = s.trim_start();
    let mut end = 0;
    for (i, c) in t.char_indices() {
        let ok = c.is_ascii_digit()
            || (i == 0 && (c == '-' || c == '+'))
            || c == '.'
            || ((c == 'e' || c == 'E') && i > 0);
        if !ok {
            break;
        }
        end = i + c.len_utf8();
    }
    let mut n = &t[..end];
    while !n.is_empty() && n.parse::<f64>().is_err() {
        n = &n[..n.len() - 1];
    }
    n.parse().unwrap_or(0.0)
}

/// `%.3f` as SQLite's printf does it: at most 16 significant digits.
fn fixed3(r: f64) -> String {
    if !r.is_finite() || r.abs() < 1e15 {
        return format!("{r:.3}");
    }
    let e = format!("{r:.15e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: usize = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let mut digits: String = mant.trim_start_matches('-').replace('.', "");
    while digits.len() < exp + 1 {
        digits.push('0');
    }
    format!("{}{digits}.000", if neg { "-" } else { "" })
}

fn format(v: &Value, ty: char) -> String {
    let printable = |s: &str| -> String {
        if s.is_empty() {
            return "(empty)".into();
        }
        s.chars()
            .map(|c| if (' '..='~').contains(&c) { c } else { '@' })
            .collect()
    };
    match (v, ty) {
        (Value::Null, _) => "NULL".into(),
        (Value::Integer(i), 'I') => i.to_string(),
        (Value::Real(r), 'I') => (*r as i64).to_string(),
        (Value::Text(s), 'I') => (text_number(s) as i64).to_string(),
        (Value::Blob(_), 'I') => "0".into(),
        (Value::Integer(i), 'R') => fixed3(*i as f64),
        (Value::Real(r), 'R') => fixed3(*r),
        (Value::Text(s), 'R') => fixed3(text_number(s)),
        (Value::Blob(_), 'R') => "0.000".into(),
        (Value::Integer(i), _) => i.to_string(),
        (Value::Real(r), _) => printable(&format!("{r}")),
        (Value::Text(s), _) => printable(s),
        (Value::Blob(b), _) => printable(&String::from_utf8_lossy(b)),
    }
}

impl Engine {
    fn rows(&mut self, sql: &str) -> Result<Option<Vec<Vec<Value>>>, String> {
        // A record holding several statements runs them all, on both.
        if let Err(e) = self.single(sql) {
            if e.contains("Multiple statements") {
                return match &self.conn {
                    Conn::Stock(c) => c.execute_batch(sql).map_err(|e| e.to_string()),
                    Conn::Twin(c) => c.execute_batch(sql).map_err(|e| e.to_string()),
                }
                .map(|()| None);
            }
        }
        self.run_one(sql)
    }

    /// Whether `sql` compiles as a single statement.
    fn single(&self, sql: &str) -> Result<(), String> {
        match &self.conn {
            Conn::Stock(c) => c.prepare(sql).map(drop).map_err(|e| e.to_string()),
            Conn::Twin(c) => c.prepare(sql).map(drop).map_err(|e| e.to_string()),
        }
    }

    fn run_one(&mut self, sql: &str) -> Result<Option<Vec<Vec<Value>>>, String> {
        match &self.conn {
            Conn::Stock(c) => {
                let mut s = c.prepare(sql).map_err(|e| e.to_string())?;
                let n = s.column_count();
                if n == 0 {
                    s.execute([]).map_err(|e| e.to_string())?;
                    return Ok(None);
                }
                let mut rows = s.query([]).map_err(|e| e.to_string())?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().map_err(|e| e.to_string())? {
                    out.push((0..n).map(|i| stock_value(r.get_ref(i).unwrap())).collect());
                }
                Ok(Some(out))
            }
            Conn::Twin(c) => {
                let mut s = c.prepare(sql).map_err(|e| e.to_string())?;
                if s.column_count() == 0 {
                    s.execute(&[]).map_err(|e| e.to_string())?;
                    return Ok(None);
                }
                let mut rows = s.query(&[]).map_err(|e| e.to_string())?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().map_err(|e| e.to_string())? {
                    out.push(r.values());
                }
                Ok(Some(out))
            }
        }
    }
}

impl sqllogictest::DB for Engine {
    type Error = EngineError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, EngineError> {
        let types = self.types.lock().unwrap().clone();
        if std::env::var("TWINPAGE_SLT_TRACE").is_ok() {
            eprintln!("SQL {sql}");
        }
        match self.rows(sql).map_err(EngineError)? {
            None => Ok(DBOutput::StatementComplete(0)),
            Some(rows) => {
                let width = rows.first().map_or(types.len(), Vec::len);
                Ok(DBOutput::Rows {
                    types: vec![DefaultColumnType::Any; width],
                    rows: rows
                        .iter()
                        .map(|r| {
                            r.iter()
                                .enumerate()
                                .map(|(i, v)| format(v, types.get(i).copied().unwrap_or('T')))
                                .collect()
                        })
                        .collect(),
                })
            }
        }
    }

    fn engine_name(&self) -> &str {
        "sqlite"
    }
}

fn corpus() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("TWINPAGE_SLT_DIR") {
        return Some(PathBuf::from(d));
    }
    // `shared/` beside the repository (or beside a directory above it).
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .skip(2)
        .map(|a| a.join("shared/sqllogictest"))
        .find(|d| d.exists())
}

fn test_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            test_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "test") {
            out.push(p);
        }
    }
}

/// Run every record of `file` on a fresh database; the outcome (passed or
/// not) of each statement and query, in order.
fn run_file(file: &Path, twin: bool, dir: &Path) -> Vec<bool> {
    // SQLite's files put comments after conditions (`onlyif sqlite # why`),
    // which the crate's parser does not take: they are cut off. A condition
    // on `halt` (`onlyif mssql` / `halt`) the parser would give to the next
    // record instead: it is decided here, for the engine `sqlite`.
    let raw = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = raw
        .lines()
        .map(|l| {
            if l.starts_with("onlyif") || l.starts_with("skipif") {
                l.split('#').next().unwrap_or(l).trim_end()
            } else {
                l
            }
        })
        .collect();
    let mut kept = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let cond = l.split_whitespace().collect::<Vec<_>>();
        if cond.len() == 2
            && (cond[0] == "onlyif" || cond[0] == "skipif")
            && lines.get(i + 1).is_some_and(|n| n.trim() == "halt")
        {
            let sqlite = cond[1] == "sqlite";
            if (cond[0] == "onlyif") == sqlite {
                kept.push("halt");
            }
            i += 2;
            continue;
        }
        kept.push(l);
        i += 1;
    }
    let text = kept.join("\n");
    let records =
        sqllogictest::parse_with_name::<DefaultColumnType>(&text, file.display().to_string())
            .unwrap();
    let types = Arc::new(Mutex::new(Vec::new()));
    let path = dir.join(if twin { "twin.db" } else { "stock.db" });
    let _ = std::fs::remove_file(&path);
    let conn = if twin {
        let c = twinpage_sql::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA synchronous=OFF").unwrap();
        Conn::Twin(c)
    } else {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA synchronous=OFF").unwrap();
        Conn::Stock(c)
    };
    let engine = Arc::new(Mutex::new(Some(Engine {
        conn,
        types: types.clone(),
    })));
    let mut runner = Runner::new(move || {
        let e = engine.lock().unwrap().take();
        async move { e.ok_or(EngineError("one connection per file".into())) }
    });
    // SQLite's runner hashes results of more than 8 values.
    runner.with_hash_threshold(8);
    runner
        .run(Record::Control(Control::ResultMode(ResultMode::ValueWise)))
        .unwrap();
    let mut out = Vec::new();
    for r in records {
        let counted = match &r {
            Record::Statement { .. } => true,
            Record::Query { expected, .. } => {
                if let QueryExpect::Results { types: t, .. } = expected {
                    *types.lock().unwrap() = t
                        .iter()
                        .map(|t| match t {
                            DefaultColumnType::Integer => 'I',
                            DefaultColumnType::FloatingPoint => 'R',
                            _ => 'T',
                        })
                        .collect();
                }
                true
            }
            _ => false,
        };
        let res = runner.run(r);
        if let (Err(e), Ok(_)) = (&res, std::env::var("TWINPAGE_SLT_VERBOSE")) {
            eprintln!(
                "{}: {}",
                if twin { "twin" } else { "stock" },
                e.display(false)
            );
        }
        let ok = res.is_ok();
        if counted {
            out.push(ok);
        }
    }
    out
}

#[test]
fn sqllogictest_corpus_matches_stock_sqlite() {
    let Some(dir) = corpus() else {
        panic!(
            "the sqllogictest corpus is missing: set TWINPAGE_SLT_DIR or put it at \
             ../shared/sqllogictest beside the repository"
        );
    };
    let filter = std::env::var("TWINPAGE_SLT_FILTER").unwrap_or_default();
    let mut files = Vec::new();
    test_files(&dir, &mut files);
    files.retain(|f| f.to_string_lossy().contains(&filter));
    assert!(!files.is_empty(), "no .test files under {}", dir.display());
    let tmp = tempfile::tempdir().unwrap();
    let mut differ = Vec::new();
    println!("| file | records | stock SQLite passed | twinpage-SQL passed |");
    println!("|---|--:|--:|--:|");
    for f in &files {
        let stock = run_file(f, false, tmp.path());
        let twin = run_file(f, true, tmp.path());
        let name = f.strip_prefix(&dir).unwrap_or(f).display().to_string();
        let count = |v: &[bool]| v.iter().filter(|&&b| b).count();
        println!(
            "| {name} | {} | {} | {} |",
            stock.len(),
            count(&stock),
            count(&twin)
        );
        if stock != twin {
            let first = stock.iter().zip(&twin).position(|(a, b)| a != b);
            differ.push(format!("{name}: first differing record #{first:?}"));
        }
    }
    assert!(
        differ.is_empty(),
        "results differ from stock SQLite: {differ:#?}"
    );
}
