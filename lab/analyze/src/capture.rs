//! Running valgrind: lackey traces streamed through a pipe, cachegrind and callgrind counts.
//!
//! Seed 003 simulates its workload in SimpleScalar; without hardware counters, valgrind is
//! this host's instrument. [`lackey`] runs a workload under `valgrind --tool=lackey
//! --trace-mem=yes` with the trace sent to a pipe (`--log-fd=3`, fd 3 redirected to our pipe by
//! `/bin/sh`, the workload's own stdout and stderr going to a separate captured pipe), and hands
//! the stream to a consumer that parses it as it arrives: the trace is never stored.
//! [`probe`] measures where the workload's markers are at run time (PIE load bias);
//! [`cachegrind`] and [`callgrind`] run the reference tools for the cross-checks.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

use crate::cache::{CacheConfig, HierarchyConfig};

/// Why valgrind could not be run.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// valgrind is not installed.
    #[error("valgrind not found: apt-get install valgrind")]
    ValgrindMissing,
    /// Spawning or piping failed.
    #[error("running valgrind: {0}")]
    Io(#[from] std::io::Error),
    /// The workload (or valgrind) exited with failure.
    #[error("the workload failed under valgrind ({status}); its output ends with:\n{tail}")]
    WorkloadFailed {
        /// Exit status.
        status: String,
        /// The last lines of its output and of valgrind's messages.
        tail: String,
    },
    /// A probe or tool output could not be understood.
    #[error("unexpected valgrind output: {0}")]
    Output(String),
}

/// A workload: a program and its arguments.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Environment of every traced workload: no backtrace capture (symbolizing a backtrace of a
/// failing Rust program under lackey takes billions of instructions).
const QUIET_ENV: [(&str, &str); 2] = [("RUST_BACKTRACE", "0"), ("RUST_LIB_BACKTRACE", "0")];

/// The valgrind executable: `$PHYLLO_VALGRIND`, or `valgrind` on `$PATH`.
pub fn valgrind() -> Result<PathBuf, CaptureError> {
    if let Some(p) = std::env::var_os("PHYLLO_VALGRIND") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(CaptureError::ValgrindMissing)
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("valgrind"))
        .find(|p| p.is_file())
        .ok_or(CaptureError::ValgrindMissing)
}

/// Whether valgrind is available.
pub fn have_valgrind() -> bool {
    valgrind().is_ok()
}

/// Keeps the last `cap` bytes read from a stream, in a thread.
fn drain_tail(mut r: impl Read + Send + 'static, cap: usize) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * cap {
                tail.drain(..tail.len() - cap);
            }
        }
        if tail.len() > cap {
            tail.drain(..tail.len() - cap);
        }
        String::from_utf8_lossy(&tail).to_string()
    })
}

/// Run-time addresses of the markers (see [`crate::roi`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Markers {
    /// `phyllo_roi_begin`.
    pub begin: u64,
    /// `phyllo_roi_end`.
    pub end: u64,
    /// `phyllo_roi_region`.
    pub region: u64,
    /// Executable file mappings at run time: (start, file offset, path).
    pub maps: Vec<(u64, u64, String)>,
}

/// Runs the workload under `valgrind --tool=none` with [`crate::roi::PROBE_ENV`] set and reads
/// the marker addresses it prints: the same load bias as under lackey.
pub fn probe(w: &Workload) -> Result<Markers, CaptureError> {
    let out = Command::new(valgrind()?)
        .arg("--tool=none")
        .arg("-q")
        .arg(&w.program)
        .args(&w.args)
        .env(crate::roi::PROBE_ENV, "1")
        .envs(QUIET_ENV)
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    match crate::roi::parse_marker_line(&text) {
        Some((begin, end, region)) if out.status.success() => Ok(Markers {
            begin,
            end,
            region,
            maps: crate::roi::parse_map_lines(&text),
        }),
        _ => Err(CaptureError::WorkloadFailed {
            status: format!("{} (marker probe)", out.status),
            tail: format!(
                "{}{}",
                tail_lines(&text, 10),
                tail_lines(&String::from_utf8_lossy(&out.stderr), 10)
            ),
        }),
    }
}

fn tail_lines(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    let mut t = v[v.len().saturating_sub(n)..].join("\n");
    if !t.is_empty() {
        t.push('\n');
    }
    t
}

/// A running lackey capture: read the trace from [`Capture::trace`], then call
/// [`Capture::finish`].
pub struct Capture {
    child: Child,
    /// The trace stream.
    pub trace: std::process::ChildStdout,
    output: Option<JoinHandle<String>>,
    done: bool,
}

impl Drop for Capture {
    /// A capture dropped before [`Capture::finish`] kills valgrind: nothing is left running.
    fn drop(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `valgrind --tool=lackey --trace-mem=yes` on `w`, the trace on a pipe.
pub fn lackey(w: &Workload) -> Result<Capture, CaptureError> {
    let vg = valgrind()?;
    // fd 3 (valgrind's log, hence the trace) → our stdout pipe; the workload's stdout → stderr.
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg("exec \"$0\" \"$@\" 3>&1 1>&2")
        .arg(&vg)
        .arg("--tool=lackey")
        .arg("--trace-mem=yes")
        .arg("--log-fd=3")
        .arg(&w.program)
        .args(&w.args)
        .envs(QUIET_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let trace = child
        .stdout
        .take()
        .ok_or_else(|| CaptureError::Output("no stdout pipe".into()))?;
    let output = child.stderr.take().map(|e| drain_tail(e, 16 << 10));
    Ok(Capture {
        child,
        trace,
        output,
        done: false,
    })
}

impl Capture {
    /// Waits for valgrind; an error if the workload failed. `consumer_failed` kills it first
    /// (the consumer stopped reading, so it must not block on a full pipe).
    pub fn finish(mut self, consumer_failed: bool) -> Result<String, CaptureError> {
        if consumer_failed {
            let _ = self.child.kill();
        }
        // Drain what is left so valgrind can exit.
        let mut sink = [0u8; 1 << 16];
        if !consumer_failed {
            while let Ok(n) = self.trace.read(&mut sink) {
                if n == 0 {
                    break;
                }
            }
        }
        let status = self.child.wait()?;
        self.done = true;
        let out = self
            .output
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if !status.success() && !consumer_failed {
            return Err(CaptureError::WorkloadFailed {
                status: status.to_string(),
                tail: tail_lines(&out, 20),
            });
        }
        Ok(out)
    }
}

/// Counts from a cachegrind or callgrind output file: event name → count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCounts(pub Vec<(String, u64)>);

impl ToolCounts {
    /// The count of event `name` (e.g. `Ir`, `I1mr`), 0 if absent.
    pub fn get(&self, name: &str) -> u64 {
        self.0
            .iter()
            .find(|e| e.0 == name)
            .map(|e| e.1)
            .unwrap_or(0)
    }

    /// Parses the `events:` and `summary:` lines of a cachegrind/callgrind output file.
    pub fn parse(text: &str) -> Result<ToolCounts, CaptureError> {
        let events = text.lines().find_map(|l| l.strip_prefix("events:"));
        let summary = text.lines().find_map(|l| l.strip_prefix("summary:"));
        let (Some(e), Some(s)) = (events, summary) else {
            return Err(CaptureError::Output("no events:/summary: lines".into()));
        };
        let vals: Vec<u64> = s
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        Ok(ToolCounts(
            e.split_whitespace()
                .map(str::to_string)
                .zip(vals.into_iter().chain(std::iter::repeat(0)))
                .collect(),
        ))
    }
}

fn cache_arg(flag: &str, c: &CacheConfig) -> String {
    format!("--{flag}={},{},{}", c.size, c.assoc, c.line)
}

fn run_tool(w: &Workload, tool_args: &[String], out: &Path) -> Result<ToolCounts, CaptureError> {
    let o = Command::new(valgrind()?)
        .args(tool_args)
        .arg(&w.program)
        .args(&w.args)
        .envs(QUIET_ENV)
        .stdin(Stdio::null())
        .output()?;
    if !o.status.success() {
        return Err(CaptureError::WorkloadFailed {
            status: o.status.to_string(),
            tail: tail_lines(&String::from_utf8_lossy(&o.stderr), 20),
        });
    }
    let text = std::fs::read_to_string(out)?;
    let _ = std::fs::remove_file(out);
    ToolCounts::parse(&text)
}

fn tmp_out(tool: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("phyllo-{tool}-{}-{n}.out", std::process::id()))
}

/// Runs the whole workload under cachegrind with the hierarchy's L1I, L1D and L2 (as LL;
/// every one passed explicitly: cachegrind's own detection is wrong on virtual machines).
pub fn cachegrind(w: &Workload, h: &HierarchyConfig) -> Result<ToolCounts, CaptureError> {
    let out = tmp_out("cachegrind");
    let ll = h.l2.unwrap_or(CacheConfig {
        size: 1 << 20,
        assoc: 16,
        line: h.l1d.line,
        ..h.l1d
    });
    let args = vec![
        "--tool=cachegrind".to_string(),
        "--cache-sim=yes".into(),
        cache_arg("I1", &h.l1i),
        cache_arg("D1", &h.l1d),
        cache_arg("LL", &ll),
        format!("--cachegrind-out-file={}", out.display()),
    ];
    run_tool(w, &args, &out)
}

/// Runs the workload under callgrind counting only inside function `func` (inclusive),
/// optionally with its cache simulation.
pub fn callgrind(
    w: &Workload,
    func: &str,
    cache: Option<&HierarchyConfig>,
) -> Result<ToolCounts, CaptureError> {
    let out = tmp_out("callgrind");
    let mut args = vec![
        "--tool=callgrind".to_string(),
        format!("--toggle-collect={func}"),
        format!("--callgrind-out-file={}", out.display()),
    ];
    if let Some(h) = cache {
        let ll = h.l2.unwrap_or(CacheConfig {
            size: 1 << 20,
            assoc: 16,
            line: h.l1d.line,
            ..h.l1d
        });
        args.push("--cache-sim=yes".into());
        args.push(cache_arg("I1", &h.l1i));
        args.push(cache_arg("D1", &h.l1d));
        args.push(cache_arg("LL", &ll));
    }
    run_tool(w, &args, &out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tool_output() {
        let t = "desc: x\nevents: Ir I1mr ILmr\nsummary: 10 2 1\n";
        let c = ToolCounts::parse(t).unwrap();
        assert_eq!((c.get("Ir"), c.get("I1mr"), c.get("nope")), (10, 2, 0));
        assert!(ToolCounts::parse("nothing").is_err());
    }
}
