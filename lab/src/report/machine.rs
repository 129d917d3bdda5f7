//! The machine the figures were measured on, read from `/proc` (Linux) with graceful gaps
//! elsewhere, and the report's UTC timestamp.

use std::time::{SystemTime, UNIX_EPOCH};

/// A description of this host, written into `results.json` and the report headers.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Machine {
    /// Host name (`/proc/sys/kernel/hostname`).
    pub hostname: String,
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// Logical cores this process may run on.
    pub logical_cores: usize,
    /// Total memory in bytes (`/proc/meminfo`), if known.
    pub memory_bytes: Option<u64>,
    /// Operating system and architecture, e.g. `linux x86_64`.
    pub os: String,
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// The compiler that built this binary (`rustc -V` at build time), if known.
    pub rustc: Option<String>,
    /// `release` or `debug`: timings from a debug build are not comparable.
    pub profile: String,
    /// Version of the phyllo command.
    pub phyllo_version: String,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl Machine {
    /// Describe this host.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            hostname: read_trimmed("/proc/sys/kernel/hostname")
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| "unknown".into()),
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            logical_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: mem_total(&meminfo),
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            rustc: option_env!("PHYLLO_RUSTC_VERSION").map(str::to_string),
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
            phyllo_version: env!("CARGO_PKG_VERSION").into(),
        }
    }

    /// One line for the report header.
    pub fn one_line(&self) -> String {
        let mem = self
            .memory_bytes
            .map(|b| format!(", {:.1} GiB", b as f64 / (1u64 << 30) as f64))
            .unwrap_or_default();
        let rustc = self
            .rustc
            .as_deref()
            .map(|r| format!(", {r}"))
            .unwrap_or_default();
        format!(
            "{} — {}, {} logical cores{mem}, {} (kernel {}){rustc}, {} build",
            self.hostname, self.cpu_model, self.logical_cores, self.os, self.kernel, self.profile
        )
    }
}

/// The first `model name` (x86) or `Model`/`Hardware` (ARM) line of `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Model", "Hardware", "cpu model"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key).then(|| v.trim().to_string())
            })
        })
        .filter(|s| !s.is_empty())
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Now, as an ISO 8601 UTC timestamp (`2026-05-01T12:34:56Z`).
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Seconds since the Unix epoch as an ISO 8601 UTC timestamp.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn parses_proc_files() {
        let cpu = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon(R) 9000\n";
        assert_eq!(cpu_model(cpu).as_deref(), Some("Xeon(R) 9000"));
        assert_eq!(
            mem_total("MemTotal:       16323456 kB\nMemFree: 1 kB\n"),
            Some(16_323_456 * 1024)
        );
        let m = Machine::detect();
        assert!(m.logical_cores >= 1);
        assert!(!m.one_line().is_empty());
    }
}
