//! Builds SQLite's SQL engine over twinpage: the amalgamation of the pinned
//! libsqlite3-sys with its pager.c, wal.c, btmutex.c, btree.c and backup.c
//! sections cut out and csrc/tp_btree.c (our implementation of btree.h over
//! twinpage) in their place.
//!
//! Two archives come out of one compile: `twinpage_sqlite3_std` with
//! SQLite's own symbol names (for the C library, crates/twinpage-sqlite3)
//! and `twinpage_sqlite3_tp`, every global symbol prefixed with `tp_`, which
//! this crate links, so a program can hold both this SQLite and rusqlite's.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const CUT_FROM: &str = "/************** Begin file pager.c ";
const CUT_TO: &str = "/************** End of backup.c ";
const MODENAME: &str = "SQLITE_PRIVATE const char *sqlite3JournalModename(int eMode){";
const SERIALIZE: &str = "SQLITE_API unsigned char *sqlite3_serialize(";
/// BEGIN IMMEDIATE's transaction type in `sqlite3BeginTransaction`, and
/// the opcode's check of it.
const IMMEDIATE: &str = "eTxnType = 1;  /* Write txn */";
const TXN_ASSERT: &str = "assert( pOp->p2>=0 && pOp->p2<=2 );";

fn main() {
    let inc =
        env::var("DEP_SQLITE3_INCLUDE").expect("libsqlite3-sys (bundled) exports its sources");
    let src = Path::new(&inc).join("sqlite3.c");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let csrc = manifest.join("csrc");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed=csrc");

    let text = fs::read_to_string(&src).expect("read sqlite3.c");
    let from = text.find(CUT_FROM).expect("pager.c section");
    let to_marker = text.find(CUT_TO).expect("end of backup.c section");
    let to = to_marker + text[to_marker..].find('\n').expect("line end") + 1;
    assert!(from < to, "sections in the expected order");
    assert_eq!(text.matches(MODENAME).count(), 1, "sqlite3JournalModename");
    let mut amal = String::with_capacity(text.len());
    amal.push_str(&text[..from]);
    amal.push_str("/* twinpage: pager.c, wal.c, btmutex.c, btree.c and backup.c replaced */\n");
    amal.push_str("#include \"tp_btree.c\"\n");
    amal.push_str(&text[to..]);
    // The journal-mode names the pragma reports: ours list twinpage's modes.
    let amal = amal.replace(
        MODENAME,
        "static const char *tpStockJournalModename(int eMode){",
    );
    // sqlite3_serialize copies SQLite pages (zeros where it cannot read
    // one): ours refuses instead (csrc/tp_pager.c).
    // (The last occurrence is the definition; the first, the prototype.)
    let at = amal.rfind(SERIALIZE).expect("sqlite3_serialize");
    let amal = format!(
        "{}static unsigned char *tpStockSerialize({}",
        &amal[..at],
        &amal[at + SERIALIZE.len()..]
    );
    // BEGIN IMMEDIATE opens its write transaction as type 3, which every
    // use of OP_Transaction's P2 treats as a write (it is only tested for
    // zero), so the B-tree layer can tell it from the first write of a
    // plain BEGIN (type 1): under a concurrent protocol the one runs
    // alone and the other beside other writers (docs/SQL.md).
    assert_eq!(amal.matches(IMMEDIATE).count(), 1, "BEGIN IMMEDIATE");
    assert_eq!(
        amal.matches(TXN_ASSERT).count(),
        1,
        "OP_Transaction's check"
    );
    let amal = amal
        .replace(IMMEDIATE, "eTxnType = 3;  /* twinpage: BEGIN IMMEDIATE */")
        .replace(TXN_ASSERT, "assert( pOp->p2>=0 && pOp->p2<=3 );");
    let file = out.join("tp_sqlite3.c");
    fs::write(&file, amal).expect("write the amalgamation");

    let mut b = cc::Build::new();
    b.file(&file)
        .include(&inc)
        .include(&csrc)
        .cargo_metadata(false)
        .opt_level(2)
        .debug(false)
        .warnings(false)
        // As libsqlite3-sys builds rusqlite's SQLite, so both run the same engine.
        .define("SQLITE_DEFAULT_FOREIGN_KEYS", "1")
        .define("SQLITE_ENABLE_API_ARMOR", None)
        .define("SQLITE_ENABLE_COLUMN_METADATA", None)
        .define("SQLITE_ENABLE_FTS3", None)
        .define("SQLITE_ENABLE_FTS3_PARENTHESIS", None)
        .define("SQLITE_ENABLE_FTS5", None)
        .define("SQLITE_ENABLE_JSON1", None)
        .define("SQLITE_ENABLE_LOAD_EXTENSION", "1")
        .define("SQLITE_ENABLE_MEMORY_MANAGEMENT", None)
        .define("SQLITE_ENABLE_RTREE", None)
        .define("SQLITE_ENABLE_STAT4", None)
        .define("SQLITE_SOUNDEX", None)
        // What distributions' shells use beyond rusqlite's options.
        .define("SQLITE_ENABLE_SESSION", None)
        .define("SQLITE_ENABLE_PREUPDATE_HOOK", None)
        .define("SQLITE_THREADSAFE", "1")
        .define("SQLITE_USE_URI", None)
        .define("HAVE_USLEEP", "1")
        .define("HAVE_ISNAN", None)
        .define("HAVE_LOCALTIME_R", None)
        .define("HAVE_FDATASYNC", "1")
        // Shared cache and auto-vacuum are left out: connections of one
        // process share a twinpage database anyway, and twinpage never
        // moves a root page.
        .define("SQLITE_OMIT_SHARED_CACHE", None)
        .define("SQLITE_OMIT_AUTOVACUUM", None)
        .define("NDEBUG", None);
    b.compile("twinpage_sqlite3_std");

    // The prefixed copy: every global symbol the archive defines, renamed.
    let std_lib = out.join("libtwinpage_sqlite3_std.a");
    let nm = Command::new("nm")
        .args(["--defined-only", "--extern-only", "--format=posix"])
        .arg(&std_lib)
        .output()
        .expect("run nm (binutils)");
    assert!(nm.status.success(), "nm failed");
    let mut map = String::new();
    for line in String::from_utf8_lossy(&nm.stdout).lines() {
        let mut f = line.split_whitespace();
        if let (Some(sym), Some(kind)) = (f.next(), f.next()) {
            if sym.ends_with(':') || kind.len() != 1 {
                continue;
            }
            map.push_str(&format!("{sym} tp_{sym}\n"));
        }
    }
    let map_file = out.join("prefix.map");
    fs::write(&map_file, map).unwrap();
    let tp_lib = out.join("libtwinpage_sqlite3_tp.a");
    let st = Command::new("objcopy")
        .arg(format!("--redefine-syms={}", map_file.display()))
        .arg(&std_lib)
        .arg(&tp_lib)
        .status()
        .expect("run objcopy (binutils)");
    assert!(st.success(), "objcopy failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=twinpage_sqlite3_tp");
    println!("cargo:std_dir={}", out.display());
}
