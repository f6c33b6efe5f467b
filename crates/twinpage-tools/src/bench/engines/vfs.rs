//! A pass-through SQLite VFS over the default `unix` VFS that counts the
//! calls SQLite makes, so SQLite's I/O is counted at the same level as
//! twinpage's [`::twinpage::storage::CountingVfs`]: one count per `pwrite`,
//! `pread`, `fdatasync`/`fsync`, `ftruncate`, `unlink` and directory sync.
//!
//! How each call maps to system calls in SQLite 3.50's `unix` VFS on Linux
//! (`os_unix.c`):
//!
//! * `xWrite` / `xRead`: one `pwrite64` / `pread64` each.
//! * `xSync`: `full_fsync()`, which ignores `SQLITE_SYNC_DATAONLY` and
//!   `SQLITE_SYNC_FULL` on Linux (F_FULLFSYNC exists only on macOS) and calls
//!   `fdatasync()` — or `fsync()` when SQLite was compiled without
//!   `HAVE_FDATASYNC`, because `os_unix.c` then `#define`s `fdatasync fsync`.
//!   rusqlite's bundled build does not define it; this crate's
//!   `.cargo/config.toml` passes `-DHAVE_FDATASYNC=1` (as distribution
//!   builds do) and [`SYNC_IS_FDATASYNC`] records which one was compiled.
//! * Directory syncs: `unixOpen` marks every file opened with
//!   `SQLITE_OPEN_CREATE` as a main or super journal or WAL
//!   (`UNIXFILE_DIRSYNC`); the first successful `xSync` on it then also
//!   opens the directory and `fdatasync`s (or `fsync`s) it. `xDelete` with
//!   `dirSync` set does the same after the unlink. The VFS cannot see
//!   those calls, so it mirrors the rule and counts them in `dir_syncs`.
//! * `xTruncate`: one `ftruncate`. `xDelete`: one `unlink`.
//! * Not counted (they are not data I/O): `fstat`, `fcntl` locks, `fchown`
//!   of new journals, and the one-byte `pwrite`s `unixShmMap` uses to grow
//!   the WAL index (`-shm`), which happen when the index grows by 32 KiB,
//!   not per transaction.
//!
//! The same VFS can SIGKILL the process at a chosen point of a commit (see
//! [`arm_kill`]); `twinpage bench recovery` uses that to leave a hot
//! journal behind.

use ::twinpage::storage::IoSnapshot;
use rusqlite::ffi;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use twinpage::base::timers::{self, Timer};

/// Name under which the counting VFS is registered.
pub const VFS_NAME: &str = "twinpage_count";
const VFS_NAME_C: &CStr = c"twinpage_count";

/// True when the bundled SQLite was compiled with `HAVE_FDATASYNC`, so the
/// unix VFS syncs with `fdatasync()`; false means it uses `fsync()`.
pub const SYNC_IS_FDATASYNC: bool = match option_env!("LIBSQLITE3_FLAGS") {
    Some(f) => contains(f.as_bytes(), b"HAVE_FDATASYNC"),
    None => false,
};

const fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let mut j = 0;
        while j < needle.len() && hay[i + j] == needle[j] {
            j += 1;
        }
        if j == needle.len() {
            return true;
        }
        i += 1;
    }
    false
}

struct Counters {
    write_calls: AtomicU64,
    bytes_written: AtomicU64,
    read_calls: AtomicU64,
    bytes_read: AtomicU64,
    syncs: AtomicU64,
    truncates: AtomicU64,
    removes: AtomicU64,
    dir_syncs: AtomicU64,
    sync_full: AtomicU64,
    sync_dataonly: AtomicU64,
    write_ns: AtomicU64,
    sync_ns: AtomicU64,
}

static COUNTERS: Counters = Counters {
    write_calls: AtomicU64::new(0),
    bytes_written: AtomicU64::new(0),
    read_calls: AtomicU64::new(0),
    bytes_read: AtomicU64::new(0),
    syncs: AtomicU64::new(0),
    truncates: AtomicU64::new(0),
    removes: AtomicU64::new(0),
    dir_syncs: AtomicU64::new(0),
    sync_full: AtomicU64::new(0),
    sync_dataonly: AtomicU64::new(0),
    write_ns: AtomicU64::new(0),
    sync_ns: AtomicU64::new(0),
};

/// Nanoseconds since `start`, added to `ns` and to the calling thread's
/// clock `t` (the clocks twinpage keeps, so the benchmark splits both
/// engines' latency the same way).
fn add_elapsed(ns: &AtomicU64, t: Timer, start: std::time::Instant) {
    let spent = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    ns.fetch_add(spent, Relaxed);
    timers::add(t, spent);
}

/// Cumulative counts of every connection opened through the VFS (the
/// benchmark runs one engine at a time and subtracts snapshots).
pub fn snapshot() -> IoSnapshot {
    let syncs = COUNTERS.syncs.load(Relaxed);
    let (fdatasync, fsync) = if SYNC_IS_FDATASYNC {
        (syncs, 0)
    } else {
        (0, syncs)
    };
    IoSnapshot {
        write_calls: COUNTERS.write_calls.load(Relaxed),
        bytes_written: COUNTERS.bytes_written.load(Relaxed),
        read_calls: COUNTERS.read_calls.load(Relaxed),
        bytes_read: COUNTERS.bytes_read.load(Relaxed),
        fdatasync,
        fsync,
        renames: 0,
        removes: COUNTERS.removes.load(Relaxed),
        truncates: COUNTERS.truncates.load(Relaxed),
        dir_syncs: COUNTERS.dir_syncs.load(Relaxed),
        write_ns: COUNTERS.write_ns.load(Relaxed),
        sync_ns: COUNTERS.sync_ns.load(Relaxed),
    }
}

/// How many `xSync` calls carried `SQLITE_SYNC_FULL` and
/// `SQLITE_SYNC_DATAONLY` (cumulative; informational, since Linux maps all
/// of them to the same system call).
pub fn sync_flag_counts() -> (u64, u64) {
    (
        COUNTERS.sync_full.load(Relaxed),
        COUNTERS.sync_dataonly.load(Relaxed),
    )
}

static KILL_ARMED: AtomicBool = AtomicBool::new(false);
static SYNCED_SINCE_ARM: AtomicBool = AtomicBool::new(false);

/// From now on, SIGKILL the process right after the first write to a main
/// database file that follows a sync — i.e. once a commit has made its
/// journal durable and started to overwrite the database in place. Used
/// only by the recovery benchmark's child process.
pub fn arm_kill() {
    SYNCED_SINCE_ARM.store(false, Relaxed);
    KILL_ARMED.store(true, Relaxed);
}

/// Write `marker` to stdout and SIGKILL the current process.
pub fn kill_self(marker: &[u8]) -> ! {
    // SAFETY: write(2) on fd 1 with a valid buffer; raise(2) never returns
    // for SIGKILL.
    unsafe {
        libc::write(1, marker.as_ptr().cast(), marker.len());
        libc::raise(libc::SIGKILL);
    }
    // SIGKILL cannot be caught; this is unreachable in practice.
    std::process::abort()
}

#[repr(C)]
struct CountFile {
    base: ffi::sqlite3_file,
    /// SQLITE_OPEN_* type bits (MAIN_DB, MAIN_JOURNAL, WAL, ...).
    kind: c_int,
    /// The unix VFS will sync the directory at this file's first xSync.
    dir_sync_pending: bool,
    // The inner file follows at INNER_OFFSET (a multiple of 8, since the
    // struct holds a pointer).
}

const INNER_OFFSET: usize = std::mem::size_of::<CountFile>();

/// # Safety
/// `f` must point to a `CountFile` allocated with the VFS's szOsFile.
unsafe fn inner(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: the caller guarantees the allocation extends past the header.
    unsafe { (f as *mut u8).add(INNER_OFFSET).cast() }
}

/// # Safety
/// As [`inner`]; the inner file must be open.
unsafe fn inner_methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: an open unix file points at a static method table.
    unsafe { &*(*inner(f)).pMethods }
}

fn root_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: pAppData was set to the wrapped VFS at registration.
    unsafe { (*vfs).pAppData.cast() }
}

macro_rules! forward {
    ($f:expr, $method:ident $(, $arg:expr)*) => {{
        // SAFETY: SQLite only calls methods on files our xOpen opened, and
        // the unix VFS fills in every method it declares.
        unsafe {
            let m = inner_methods($f);
            match m.$method {
                Some(func) => func(inner($f) $(, $arg)*),
                None => ffi::SQLITE_IOERR,
            }
        }
    }};
}

unsafe extern "C" fn x_close(f: *mut ffi::sqlite3_file) -> c_int {
    forward!(f, xClose)
}

unsafe extern "C" fn x_read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    COUNTERS.read_calls.fetch_add(1, Relaxed);
    let rc = forward!(f, xRead, buf, amt, off);
    if rc == ffi::SQLITE_OK {
        COUNTERS.bytes_read.fetch_add(amt as u64, Relaxed);
    }
    rc
}

unsafe extern "C" fn x_write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    off: ffi::sqlite3_int64,
) -> c_int {
    COUNTERS.write_calls.fetch_add(1, Relaxed);
    COUNTERS.bytes_written.fetch_add(amt as u64, Relaxed);
    let start = std::time::Instant::now();
    let rc = forward!(f, xWrite, buf, amt, off);
    add_elapsed(&COUNTERS.write_ns, Timer::Write, start);
    if KILL_ARMED.load(Relaxed) && SYNCED_SINCE_ARM.load(Relaxed) {
        // SAFETY: f is one of our files.
        let kind = unsafe { (*(f as *mut CountFile)).kind };
        if kind & ffi::SQLITE_OPEN_MAIN_DB != 0 {
            kill_self(b"M");
        }
    }
    rc
}

unsafe extern "C" fn x_truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    COUNTERS.truncates.fetch_add(1, Relaxed);
    forward!(f, xTruncate, size)
}

unsafe extern "C" fn x_sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    COUNTERS.syncs.fetch_add(1, Relaxed);
    if flags & 0x0F == ffi::SQLITE_SYNC_FULL {
        COUNTERS.sync_full.fetch_add(1, Relaxed);
    }
    if flags & ffi::SQLITE_SYNC_DATAONLY != 0 {
        COUNTERS.sync_dataonly.fetch_add(1, Relaxed);
    }
    let start = std::time::Instant::now();
    let rc = forward!(f, xSync, flags);
    add_elapsed(&COUNTERS.sync_ns, Timer::Sync, start);
    // SAFETY: f is one of our files.
    let cf = unsafe { &mut *(f as *mut CountFile) };
    if rc == ffi::SQLITE_OK && cf.dir_sync_pending {
        // unixSync syncs the directory once, after the file sync succeeded.
        COUNTERS.dir_syncs.fetch_add(1, Relaxed);
        cf.dir_sync_pending = false;
    }
    if KILL_ARMED.load(Relaxed) {
        SYNCED_SINCE_ARM.store(true, Relaxed);
    }
    rc
}

unsafe extern "C" fn x_file_size(
    f: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    forward!(f, xFileSize, size)
}

unsafe extern "C" fn x_lock(f: *mut ffi::sqlite3_file, l: c_int) -> c_int {
    forward!(f, xLock, l)
}

unsafe extern "C" fn x_unlock(f: *mut ffi::sqlite3_file, l: c_int) -> c_int {
    forward!(f, xUnlock, l)
}

unsafe extern "C" fn x_check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    forward!(f, xCheckReservedLock, out)
}

unsafe extern "C" fn x_file_control(
    f: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    forward!(f, xFileControl, op, arg)
}

unsafe extern "C" fn x_sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as in forward!.
    unsafe {
        match inner_methods(f).xSectorSize {
            Some(func) => func(inner(f)),
            None => 4096,
        }
    }
}

unsafe extern "C" fn x_device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as in forward!.
    unsafe {
        match inner_methods(f).xDeviceCharacteristics {
            Some(func) => func(inner(f)),
            None => 0,
        }
    }
}

unsafe extern "C" fn x_shm_map(
    f: *mut ffi::sqlite3_file,
    pg: c_int,
    pgsz: c_int,
    extend: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    forward!(f, xShmMap, pg, pgsz, extend, pp)
}

unsafe extern "C" fn x_shm_lock(
    f: *mut ffi::sqlite3_file,
    off: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    forward!(f, xShmLock, off, n, flags)
}

unsafe extern "C" fn x_shm_barrier(f: *mut ffi::sqlite3_file) {
    // SAFETY: as in forward!.
    unsafe {
        if let Some(func) = inner_methods(f).xShmBarrier {
            func(inner(f))
        }
    }
}

unsafe extern "C" fn x_shm_unmap(f: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    forward!(f, xShmUnmap, delete)
}

unsafe extern "C" fn x_fetch(
    f: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    amt: c_int,
    pp: *mut *mut c_void,
) -> c_int {
    // SAFETY: as in forward!; a NULL page tells SQLite to use xRead.
    unsafe {
        let m = inner_methods(f);
        match m.xFetch {
            Some(func) if m.iVersion >= 3 => func(inner(f), off, amt, pp),
            _ => {
                *pp = std::ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn x_unfetch(
    f: *mut ffi::sqlite3_file,
    off: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    // SAFETY: as in forward!.
    unsafe {
        let m = inner_methods(f);
        match m.xUnfetch {
            Some(func) if m.iVersion >= 3 => func(inner(f), off, p),
            _ => ffi::SQLITE_OK,
        }
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

unsafe extern "C" fn v_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    f: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let root = root_vfs(vfs);
    // SAFETY: SQLite allocated szOsFile bytes at f; the root VFS's xOpen
    // initialises the inner part.
    unsafe {
        let cf = f as *mut CountFile;
        (*cf).base.pMethods = std::ptr::null();
        let Some(open) = (*root).xOpen else {
            return ffi::SQLITE_CANTOPEN;
        };
        let rc = open(root, name, inner(f), flags, out_flags);
        if rc != ffi::SQLITE_OK || (*inner(f)).pMethods.is_null() {
            // Leave pMethods NULL so SQLite does not call xClose.
            return rc;
        }
        let kind = flags & 0x0FFF00;
        (*cf).kind = kind;
        (*cf).dir_sync_pending = flags & ffi::SQLITE_OPEN_CREATE != 0
            && (kind == ffi::SQLITE_OPEN_MAIN_JOURNAL
                || kind == ffi::SQLITE_OPEN_SUPER_JOURNAL
                || kind == ffi::SQLITE_OPEN_WAL);
        (*cf).base.pMethods = &METHODS;
        rc
    }
}

unsafe extern "C" fn v_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    dir_sync: c_int,
) -> c_int {
    let root = root_vfs(vfs);
    COUNTERS.removes.fetch_add(1, Relaxed);
    // SAFETY: forwarding to the root VFS with SQLite's own arguments.
    let rc = unsafe {
        match (*root).xDelete {
            Some(func) => func(root, name, dir_sync),
            None => ffi::SQLITE_IOERR_DELETE,
        }
    };
    if rc == ffi::SQLITE_OK && dir_sync & 1 != 0 {
        COUNTERS.dir_syncs.fetch_add(1, Relaxed);
    }
    rc
}

macro_rules! vfs_forward {
    ($name:ident, $method:ident, ($($arg:ident : $ty:ty),*) -> $ret:ty, $default:expr) => {
        unsafe extern "C" fn $name(vfs: *mut ffi::sqlite3_vfs $(, $arg: $ty)*) -> $ret {
            let root = root_vfs(vfs);
            // SAFETY: forwarding to the root VFS with SQLite's own arguments.
            unsafe {
                match (*root).$method {
                    Some(func) => func(root $(, $arg)*),
                    None => $default,
                }
            }
        }
    };
}

vfs_forward!(v_access, xAccess, (name: *const c_char, flags: c_int, out: *mut c_int) -> c_int, ffi::SQLITE_IOERR_ACCESS);
vfs_forward!(v_full_pathname, xFullPathname, (name: *const c_char, n: c_int, out: *mut c_char) -> c_int, ffi::SQLITE_CANTOPEN);
vfs_forward!(v_dl_open, xDlOpen, (name: *const c_char) -> *mut c_void, std::ptr::null_mut());
vfs_forward!(v_randomness, xRandomness, (n: c_int, out: *mut c_char) -> c_int, 0);
vfs_forward!(v_current_time, xCurrentTime, (out: *mut f64) -> c_int, ffi::SQLITE_ERROR);
vfs_forward!(v_get_last_error, xGetLastError, (n: c_int, out: *mut c_char) -> c_int, 0);
vfs_forward!(v_current_time_int64, xCurrentTimeInt64, (out: *mut ffi::sqlite3_int64) -> c_int, ffi::SQLITE_ERROR);

/// `xSleep`: SQLite sleeps here when a lock is busy (its busy handler,
/// the WAL read-lock retries), so the time is the thread's lock wait.
unsafe extern "C" fn v_sleep(vfs: *mut ffi::sqlite3_vfs, us: c_int) -> c_int {
    let root = root_vfs(vfs);
    let start = std::time::Instant::now();
    // SAFETY: forwarding to the root VFS with SQLite's own arguments.
    let rc = unsafe {
        match (*root).xSleep {
            Some(func) => func(root, us),
            None => 0,
        }
    };
    timers::add_since(Timer::LockWait, start);
    rc
}

unsafe extern "C" fn v_dl_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) {
    let root = root_vfs(vfs);
    // SAFETY: as in vfs_forward!.
    unsafe {
        if let Some(func) = (*root).xDlError {
            func(root, n, out)
        }
    }
}

type DlSym = unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char);

unsafe extern "C" fn v_dl_sym(
    vfs: *mut ffi::sqlite3_vfs,
    h: *mut c_void,
    sym: *const c_char,
) -> Option<DlSym> {
    let root = root_vfs(vfs);
    // SAFETY: as in vfs_forward!.
    unsafe { (*root).xDlSym.and_then(|func| func(root, h, sym)) }
}

unsafe extern "C" fn v_dl_close(vfs: *mut ffi::sqlite3_vfs, h: *mut c_void) {
    let root = root_vfs(vfs);
    // SAFETY: as in vfs_forward!.
    unsafe {
        if let Some(func) = (*root).xDlClose {
            func(root, h)
        }
    }
}

/// Register the counting VFS (once per process). Connections select it by
/// [`VFS_NAME`].
pub fn register() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find initialises SQLite and returns a static
        // VFS; the new VFS is leaked, so it outlives every connection.
        unsafe {
            let root = ffi::sqlite3_vfs_find(c"unix".as_ptr());
            if root.is_null() {
                return Err("SQLite has no \"unix\" VFS".into());
            }
            let vfs = Box::new(ffi::sqlite3_vfs {
                iVersion: 2,
                szOsFile: INNER_OFFSET as c_int + (*root).szOsFile,
                mxPathname: (*root).mxPathname,
                pNext: std::ptr::null_mut(),
                zName: VFS_NAME_C.as_ptr(),
                pAppData: root.cast(),
                xOpen: Some(v_open),
                xDelete: Some(v_delete),
                xAccess: Some(v_access),
                xFullPathname: Some(v_full_pathname),
                xDlOpen: Some(v_dl_open),
                xDlError: Some(v_dl_error),
                xDlSym: Some(v_dl_sym),
                xDlClose: Some(v_dl_close),
                xRandomness: Some(v_randomness),
                xSleep: Some(v_sleep),
                xCurrentTime: Some(v_current_time),
                xGetLastError: Some(v_get_last_error),
                xCurrentTimeInt64: Some(v_current_time_int64),
                xSetSystemCall: None,
                xGetSystemCall: None,
                xNextSystemCall: None,
            });
            let rc = ffi::sqlite3_vfs_register(Box::into_raw(vfs), 0);
            if rc != ffi::SQLITE_OK {
                return Err(format!("sqlite3_vfs_register failed with code {rc}"));
            }
        }
        Ok(())
    })
    .clone()
}
