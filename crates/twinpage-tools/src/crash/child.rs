//! Real process kills: a child process runs a workload on a real file and
//! reports, on stdout, each commit it starts (`start k`) and each commit
//! acknowledged (`ack k`); the parent SIGKILLs it at a random moment,
//! reopens the file (recovery) and checks the prefix property: the
//! contents equal the model after commit `k` with
//! `acknowledged <= k <= started`. A killed process loses no page cache,
//! so this holds in every journaled mode at any sync level, DELETE
//! included; OFF promises nothing and is only reported.

use super::workload::{Generator, Model, Plan, WorkloadConfig};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use twinpage::Durability;
use twinpage::{Db, Error, JournalMode, Options, Result, Synchronous};

/// The workload of the child for a seed: long enough never to finish
/// before the kill.
pub fn child_workload(seed: u64, page_size: usize, mode: JournalMode) -> WorkloadConfig {
    WorkloadConfig {
        seed,
        txns: 1_000_000,
        page_size,
        max_key: Some(mode.node_format().max_key_len(page_size)),
        ..WorkloadConfig::default()
    }
}

fn child_options(mode: JournalMode, sync: Synchronous, page_size: usize) -> Options {
    Options::default()
        .journal_mode(mode)
        .synchronous(sync)
        .page_size(page_size)
        .cache_size(16 * page_size)
}

/// Body of the child process (`twinpage crashtest --child-workload PATH`):
/// run the workload on `path` until killed.
pub fn run_child(
    path: &Path,
    mode: JournalMode,
    sync: Synchronous,
    seed: u64,
    page_size: usize,
) -> Result<i32> {
    let opts = child_options(mode, sync, page_size);
    let mut gen = Generator::new(child_workload(seed, page_size, mode));
    let mut db = Some(Db::open(path, opts.clone())?);
    let out = std::io::stdout();
    let say = |line: String| -> Result<()> {
        let mut o = out.lock();
        writeln!(o, "{line}")
            .and_then(|_| o.flush())
            .map_err(|e| Error::io("write", "stdout", e))
    };
    say("ready".into())?;
    let mut k = 0u64;
    while let Some(plan) = gen.next_plan() {
        match &plan {
            Plan::Reopen => {
                if let Some(d) = db.take() {
                    d.close()?;
                }
                db = Some(Db::open(path, opts.clone())?);
            }
            Plan::Checkpoint(m) => {
                if let Some(d) = db.as_ref() {
                    d.checkpoint(*m)?;
                }
            }
            Plan::Txn { steps, commit, .. } => {
                let Some(d) = db.as_ref() else { break };
                let mut t = d.begin_write()?;
                super::workload::run_steps(&mut t, steps)
                    .map_err(|e| Error::InvalidArgument(format!("child workload: {e}")))?;
                if *commit {
                    say(format!("start {}", k + 1))?;
                    t.commit()?;
                    k += 1;
                    gen.committed(&plan);
                    say(format!("ack {k}"))?;
                } else {
                    t.rollback()?;
                }
            }
        }
    }
    Ok(0)
}

/// The models after the first `n` commits of a child's workload
/// (`[0]`: empty).
pub fn expected_models(seed: u64, page_size: usize, mode: JournalMode, n: u64) -> Vec<Model> {
    let mut gen = Generator::new(child_workload(seed, page_size, mode));
    let mut out = vec![Model::default()];
    while (out.len() as u64) <= n {
        let Some(plan) = gen.next_plan() else { break };
        if let Plan::Txn {
            commit: true,
            after,
            ..
        } = &plan
        {
            out.push(after.clone());
            gen.committed(&plan);
        }
    }
    out
}

/// Settings of a kill campaign.
#[derive(Debug, Clone)]
pub struct KillConfig {
    /// The `twinpage` binary.
    pub binary: PathBuf,
    /// Directory for the database files.
    pub dir: PathBuf,
    /// Mode.
    pub mode: JournalMode,
    /// Sync level.
    pub sync: Synchronous,
    /// Seed of the first round (round r uses seed + r).
    pub seed: u64,
    /// Rounds (one kill each).
    pub rounds: u64,
    /// Page size.
    pub page_size: usize,
    /// Kill after a random delay up to this long after the child is ready.
    pub max_delay: Duration,
}

/// What a kill campaign found.
#[derive(Debug, Clone, Default)]
pub struct KillReport {
    /// Rounds run.
    pub rounds: u64,
    /// Commits acknowledged over all rounds before the kills.
    pub acked: u64,
    /// Rounds where the kill hit a commit in flight.
    pub in_flight: u64,
    /// Rounds where recovery had work to do (`Recovery::recovered`).
    pub recovered: u64,
    /// Damaged states in modes without a guarantee (not violations).
    pub unprotected: u64,
    /// Violations.
    pub violations: Vec<String>,
    /// Wall time.
    pub elapsed: Duration,
}

/// Run `rounds` child processes, kill each at a random moment, and check
/// the prefix property after recovery.
pub fn kill_campaign(cfg: &KillConfig) -> Result<KillReport> {
    let start = Instant::now();
    let mut rep = KillReport::default();
    let mut rng = SmallRng::seed_from_u64(cfg.seed ^ 0x6b69_6c6c);
    let guarded = cfg.mode.durability(Synchronous::Full) != Durability::None;
    for round in 0..cfg.rounds {
        let seed = cfg.seed.wrapping_add(round);
        // A fresh directory per round: modes may keep any files next to
        // the database.
        let dir = cfg.dir.join(format!("kill-{}-{seed}", cfg.mode.name()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("mkdir", &dir, e))?;
        let path = dir.join("test.db");
        let mut child = Command::new(&cfg.binary)
            .args([
                "crashtest",
                "--mode",
                cfg.mode.name(),
                "--sync",
                &cfg.sync.to_string(),
                "--seed",
                &seed.to_string(),
                "--page-size",
                &cfg.page_size.to_string(),
                "--child-workload",
            ])
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io("spawn", &cfg.binary, e))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::InvalidArgument("child has no stdout".into()))?;
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    // A line cut by the kill has no newline: ignore it.
                    Ok(_) if line.ends_with('\n') => {
                        if tx.send(line.trim_end().to_string()).is_err() {
                            break;
                        }
                    }
                    Ok(_) => break,
                }
            }
        });
        // Wait until the child is ready, then kill it after a random delay.
        let ready = rx.recv_timeout(Duration::from_secs(30));
        let delay =
            Duration::from_micros(rng.random_range(0..cfg.max_delay.as_micros().max(1) as u64));
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child
            .wait()
            .map_err(|e| Error::io("wait", &cfg.binary, e))?;
        let _ = reader.join();
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        if ready.as_deref() != Ok("ready") {
            rep.violations.push(format!(
                "round {round}: the child did not start ({status}): {}",
                stderr.trim()
            ));
            continue;
        }
        let (mut acked, mut started) = (0u64, 0u64);
        for line in rx.try_iter() {
            if let Some(k) = line.strip_prefix("ack ") {
                acked = k.parse().unwrap_or(acked);
            } else if let Some(k) = line.strip_prefix("start ") {
                started = k.parse().unwrap_or(started);
            }
        }
        if status.success() || !stderr.trim().is_empty() {
            rep.violations.push(format!(
                "round {round}: the child ended by itself ({status}) before the kill: {}",
                stderr.trim()
            ));
            continue;
        }
        rep.rounds += 1;
        rep.acked += acked;
        let started = started.max(acked);
        if started > acked {
            rep.in_flight += 1;
        }
        let models = expected_models(seed, cfg.page_size, cfg.mode, started);
        let got = (|| -> Result<(Model, bool)> {
            let db = Db::open(&path, child_options(cfg.mode, cfg.sync, cfg.page_size))?;
            let recovered = db.stats().recovery.recovered;
            db.check()?;
            let m = Model::read(&db)?;
            db.close()?;
            Ok((m, recovered))
        })();
        let verdict = match got {
            Err(e) => Some(format!("recovery after the kill failed: {e}")),
            Ok((m, recovered)) => {
                rep.recovered += recovered as u64;
                let fp = m.fingerprint();
                let ok = (acked..=started).any(|k| {
                    models
                        .get(k as usize)
                        .is_some_and(|x| x.fingerprint() == fp)
                });
                (!ok).then(|| {
                    let want = models.get(acked as usize).cloned().unwrap_or_default();
                    format!(
                        "contents match no commit in {acked}..={started}: {}",
                        m.diff(&want, 5)
                    )
                })
            }
        };
        if let Some(v) = verdict {
            if guarded {
                rep.violations.push(format!(
                    "{} seed {seed}, killed after {delay:?} ({acked} acknowledged, {started} started): {v}",
                    cfg.mode
                ));
            } else {
                rep.unprotected += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    rep.elapsed = start.elapsed();
    Ok(rep)
}
