use std::sync::Arc;
use twinpage::storage::sim::SimVfs;
use twinpage::tools::crash::workload::*;
use twinpage::*;

#[test]
fn scratch() {
    let sim = SimVfs::new();
    let opts = Options { journal_mode: JournalMode::Persist, page_size: 1024, cache_size: 16*1024, vfs: Some(Arc::new(sim.clone())), ..Options::default() };
    let cfg = WorkloadConfig { seed: 3, ..WorkloadConfig::default() };
    let mut gen = Generator::new(cfg);
    let path = std::path::Path::new("/crash/test.db");
    let mut db = Db::open(path, opts.clone()).unwrap();
    let mut n = 0;
    while let Some(plan) = gen.next_plan() {
        n += 1;
        match &plan {
            Plan::Reopen => { eprintln!("{n}: reopen"); db.close().unwrap(); db = Db::open(path, opts.clone()).unwrap(); }
            Plan::Txn { steps, commit, .. } => {
                let summary: Vec<String> = steps.iter().map(|s| match s { Step::Put{table,key,value} => format!("put {table} {} {}", show(key), value.len()), Step::Delete{table,key} => format!("del {table} {}", show(key)), Step::Get{..} => "get".into(), Step::Scan{..} => "scan".into(), Step::CreateTable(t) => format!("create {t}"), Step::DropTable(t) => format!("drop {t}")}).collect();
                eprintln!("{n}: commit={commit} {} steps: {:?}", steps.len(), summary);
                let mut t = db.begin_write().unwrap();
                let ops0 = sim.op_count();
                if let Err(e) = run_steps(&mut t, steps) { panic!("{n}: {e}"); }
                eprintln!("   ops during steps {}", sim.op_count() - ops0);
                if *commit { t.commit().unwrap(); gen.committed(&plan); } else { t.rollback().unwrap(); }
                db.check().unwrap();
            }
        }
    }
}
