//! Block-level accounting: the device under the benchmark directory, read
//! from `/proc/diskstats` (so it includes the file system's own journal),
//! and a scratch ext4 image on a loop device.

use super::BenchError;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One line of `/proc/diskstats` (the fields the benchmark uses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStat {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Reads completed.
    pub reads: u64,
    /// 512-byte sectors read.
    pub sectors_read: u64,
    /// Writes completed (requests, after merging).
    pub writes: u64,
    /// 512-byte sectors written.
    pub sectors_written: u64,
    /// Flush requests completed (kernels since 5.5; 0 when absent).
    pub flushes: u64,
}

impl DiskStat {
    /// Counter differences `self - earlier`.
    pub fn delta(&self, earlier: &DiskStat) -> DiskStat {
        DiskStat {
            major: self.major,
            minor: self.minor,
            reads: self.reads.saturating_sub(earlier.reads),
            sectors_read: self.sectors_read.saturating_sub(earlier.sectors_read),
            writes: self.writes.saturating_sub(earlier.writes),
            sectors_written: self.sectors_written.saturating_sub(earlier.sectors_written),
            flushes: self.flushes.saturating_sub(earlier.flushes),
        }
    }
}

/// Parse `/proc/diskstats`: `major minor name` followed by the counters
/// documented in the kernel's `Documentation/admin-guide/iostats.rst`.
/// Malformed lines are skipped.
pub fn parse_diskstats(text: &str) -> Vec<(String, DiskStat)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 {
            continue;
        }
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        let (Some(major), Some(minor)) = (num(0), num(1)) else {
            continue;
        };
        let (Some(reads), Some(sectors_read), Some(writes), Some(sectors_written)) =
            (num(3), num(5), num(7), num(9))
        else {
            continue;
        };
        out.push((
            f[2].to_string(),
            DiskStat {
                major: major as u32,
                minor: minor as u32,
                reads,
                sectors_read,
                writes,
                sectors_written,
                flushes: num(18).unwrap_or(0),
            },
        ));
    }
    out
}

/// The block device holding a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDev {
    /// Kernel name (`loop0`, `vda`, `nvme0n1p2`).
    pub name: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl BlockDev {
    /// The device of `dir`'s file system, if `/proc/diskstats` lists it
    /// (not for tmpfs, overlay or btrfs, whose st_dev is anonymous).
    pub fn for_dir(dir: &Path) -> Option<BlockDev> {
        let dev = std::fs::metadata(dir).ok()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let text = std::fs::read_to_string("/proc/diskstats").ok()?;
        parse_diskstats(&text)
            .into_iter()
            .find(|(_, s)| s.major == major && s.minor == minor)
            .map(|(name, _)| BlockDev { name, major, minor })
    }

    /// Current counters.
    pub fn snapshot(&self) -> Option<DiskStat> {
        let text = std::fs::read_to_string("/proc/diskstats").ok()?;
        parse_diskstats(&text)
            .into_iter()
            .find(|(_, s)| s.major == self.major && s.minor == self.minor)
            .map(|(_, s)| s)
    }
}

/// Flush every file system and drop the page cache, so one engine's
/// writeback does not land in the next engine's measurement. Returns false
/// when dropping caches is not permitted (the flush still happened).
pub fn isolate() -> bool {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Flush the file system holding `dir` (syncfs).
pub fn syncfs(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        use std::os::unix::io::AsRawFd;
        // SAFETY: syncfs on a valid descriptor.
        unsafe { libc::syncfs(f.as_raw_fd()) };
    }
}

fn run(cmd: &mut Command) -> Result<String, BenchError> {
    let out = cmd
        .output()
        .map_err(|e| BenchError::Io(format!("run {cmd:?}"), e))?;
    if !out.status.success() {
        return Err(BenchError::Msg(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Parse a size like `256M`, `1G`, `4096` (bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n >= 16 << 20)
        .ok_or_else(|| format!("bad image size {s:?} (e.g. 256M, at least 16M)"))
}

/// A fresh ext4 file system in an image file, attached to a loop device
/// and mounted; unmounted, detached and deleted on drop.
pub struct Ext4Image {
    /// Where it is mounted.
    pub mount: PathBuf,
    /// The loop device (`/dev/loopN`).
    pub device: String,
    image: PathBuf,
    _tmp: tempfile::TempDir,
    mounted: bool,
    attached: bool,
}

impl Ext4Image {
    /// Create a `size`-byte image under `parent` (a directory on a real
    /// disk), format it and mount it. Needs root.
    pub fn create(size: u64, parent: &Path) -> Result<Ext4Image, BenchError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(BenchError::Msg(
                "--ext4-image needs root (losetup and mount)".into(),
            ));
        }
        let tmp = tempfile::Builder::new()
            .prefix("twinpage-bench-img")
            .tempdir_in(parent)
            .map_err(|e| BenchError::Io(format!("mkdtemp in {}", parent.display()), e))?;
        let image = tmp.path().join("ext4.img");
        let mount = tmp.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| BenchError::Io("mkdir mnt".into(), e))?;
        let f = std::fs::File::create(&image)
            .map_err(|e| BenchError::Io(format!("create {}", image.display()), e))?;
        f.set_len(size)
            .map_err(|e| BenchError::Io("size image".into(), e))?;
        drop(f);
        // Initialise inode tables and the journal now, so the kernel's lazy
        // init thread does not write during the measurements.
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&image))?;
        let mut img = Ext4Image {
            mount,
            device: String::new(),
            image,
            _tmp: tmp,
            mounted: false,
            attached: false,
        };
        img.device = run(Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&img.image))?;
        img.attached = true;
        run(Command::new("mount").arg(&img.device).arg(&img.mount))?;
        img.mounted = true;
        Ok(img)
    }

    /// The image file.
    pub fn image(&self) -> &Path {
        &self.image
    }
}

impl Drop for Ext4Image {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = run(Command::new("umount").arg(&self.mount)) {
                eprintln!("twinpage bench: {e}");
                return; // keep the image; the loop device is still busy
            }
        }
        if self.attached {
            if let Err(e) = run(Command::new("losetup").arg("-d").arg(&self.device)) {
                eprintln!("twinpage bench: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "   7       0 loop0 113 0 3144 21 1517 43 24756 2180 0 2400 2440 0 0 0 0 759 238
 254       0 vda 9387 4544 2453946 10886 3454 19198 1520304 4443 0 3908 15701 3634 44 88888 340 626 31
 254       1 vda1 10 0 80 1 0 0 0 0
   8      16 sdb 1 2 3 4 5 6 7 8 9 10 11
garbage line
";

    #[test]
    fn parses_diskstats() {
        let v = parse_diskstats(SAMPLE);
        // The 8-field partition line (pre-2.6.25 format) and garbage are
        // skipped.
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(v[2].0, "sdb");
        assert_eq!(v[0].0, "loop0");
        assert_eq!(
            v[0].1,
            DiskStat {
                major: 7,
                minor: 0,
                reads: 113,
                sectors_read: 3144,
                writes: 1517,
                sectors_written: 24756,
                flushes: 759,
            }
        );
        assert_eq!(v[1].0, "vda");
        assert_eq!(v[1].1.writes, 3454);
        assert_eq!(v[1].1.sectors_written, 1_520_304);
        assert_eq!(v[1].1.flushes, 626);
        let d = v[1].1.delta(&v[0].1);
        assert_eq!(d.writes, 3454 - 1517);
    }

    #[test]
    fn old_kernel_lines_have_no_flushes() {
        let v = parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n");
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].1.flushes, 0);
        assert_eq!(v[0].1.sectors_written, 7);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("1K").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn finds_some_device_or_none() {
        // Must not panic whatever the test machine's file system is.
        let _ = BlockDev::for_dir(Path::new("."));
    }
}
