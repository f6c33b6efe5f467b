use twinpage_sql::Connection;
fn main() {
    let dir = tempfile::tempdir().unwrap();
    let tp = Connection::open(dir.path().join("tp.db")).unwrap();
    for s in std::env::args().skip(1) {
        match tp.query(&s, &[]) {
            Ok(r) => println!("{s} => {r:?}"),
            Err(e) => println!("{s} => ERR {e}"),
        }
    }
}
