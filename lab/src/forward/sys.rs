//! Thread placement, priority and CPU time for the forwarder's threads: the system calls, each
//! in a small safe function.

use std::io;
use std::mem;
use std::time::Duration;

/// Pin the calling thread to `cpu`.
pub(super) fn pin_to(cpu: usize) -> io::Result<()> {
    pin_to_set(&[cpu])
}

/// Pin the calling thread to `cpus` (all CPUs the set can name when empty).
pub(super) fn pin_to_set(cpus: &[usize]) -> io::Result<()> {
    let bits = 8 * mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain old data; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { mem::zeroed() };
    let all: Vec<usize> = (0..bits).collect();
    for &cpu in if cpus.is_empty() { &all[..] } else { cpus } {
        if cpu >= bits {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no such CPU"));
        }
        // SAFETY: `cpu` is within the set's bits (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed; 0 is the calling thread.
    let r = unsafe { libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Run the calling thread at real-time priority `prio` (`SCHED_FIFO`).
pub(super) fn realtime(prio: libc::c_int) -> io::Result<()> {
    set_scheduler(libc::SCHED_FIFO, prio)
}

/// Back to ordinary scheduling.
pub(super) fn ordinary() -> io::Result<()> {
    set_scheduler(libc::SCHED_OTHER, 0)
}

fn set_scheduler(policy: libc::c_int, prio: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: `param` is a live sched_param the kernel only reads; 0 is the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// CPU time the calling thread has used (user + system).
pub(super) fn thread_cpu_time() -> io::Result<Duration> {
    cpu_time(libc::RUSAGE_THREAD)
}

/// CPU time this process has used (user + system, all threads).
pub(super) fn process_cpu_time() -> io::Result<Duration> {
    cpu_time(libc::RUSAGE_SELF)
}

/// CPU time of this process's children that have ended and been waited for (user + system).
pub(super) fn children_cpu_time() -> io::Result<Duration> {
    cpu_time(libc::RUSAGE_CHILDREN)
}

/// `getrusage(who)`: user plus system time.
fn cpu_time(who: libc::c_int) -> io::Result<Duration> {
    // SAFETY: rusage is plain old data; all zeros is a valid value for the kernel to overwrite.
    let mut ru: libc::rusage = unsafe { mem::zeroed() };
    // SAFETY: `ru` is a live rusage the kernel writes; `who` is RUSAGE_SELF, RUSAGE_THREAD or
    // RUSAGE_CHILDREN.
    let r = unsafe { libc::getrusage(who, &mut ru) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// Resident memory of this process, bytes (0 where `/proc` cannot tell).
pub(super) fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_size())
}

/// The system's page size (4 KiB where it cannot be read).
fn page_size() -> u64 {
    // SAFETY: sysconf takes no pointers.
    let r = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if r > 0 {
        r as u64
    } else {
        4096
    }
}
