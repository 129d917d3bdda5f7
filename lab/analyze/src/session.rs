//! A whole analysis of one workload: probe, decode, trace under lackey, one pass. (Seed 003 is Xie,
//! Zhao and Bhuyan, "Architectural Analysis and Instruction-Set Optimization for Design of Network
//! Protocol Processors".)
//!
//! The glue of the analyzer (seed 003's methodology on this host): [`prepare`] loads the workload's
//! image (and the shared libraries it maps), measures the run-time marker addresses with a probe
//! run, and decodes all code; [`analyze`] streams a lackey trace of the workload through an
//! [`Analyzer`] and times the pass.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::analysis::{AnalyzeError, Analyzer, Report, Setup};
use crate::capture::{self, CaptureError, Markers, Workload};
use crate::codemap::CodeMap;
use crate::image::{Image, ImageError};
use crate::roi::{RoiFilter, BEGIN_SYMBOL};

/// Why an analysis session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// valgrind could not run the workload.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// The workload's executable could not be read.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The analysis failed.
    #[error(transparent)]
    Analyze(#[from] AnalyzeError),
}

/// A workload ready to be traced.
pub struct Prepared {
    /// The workload.
    pub workload: Workload,
    /// Run-time marker addresses.
    pub markers: Markers,
    /// Load bias of the executable (run-time − link-time).
    pub bias: u64,
    /// Decoded code of the executable and its shared libraries.
    pub map: CodeMap,
    /// Shared libraries decoded besides the executable.
    pub libraries: Vec<String>,
}

/// Probes the workload and decodes its code.
pub fn prepare(workload: Workload) -> Result<Prepared, SessionError> {
    let image = Image::load(&workload.program)?;
    let markers = capture::probe(&workload)?;
    let bias = markers.begin.wrapping_sub(image.symbol(BEGIN_SYMBOL)?);
    let exe = std::fs::canonicalize(&workload.program).unwrap_or_else(|_| workload.program.clone());
    let mut libs: Vec<(Image, u64, String)> = Vec::new();
    for (start, off, path) in &markers.maps {
        if Path::new(path) == exe || libs.iter().any(|l| &l.2 == path) {
            continue;
        }
        // Shared libraries: their executable segment's link-time address equals its file
        // offset (true of every ld-built library), so bias = start − offset.
        if let Ok(img) = Image::load(Path::new(path)) {
            libs.push((img, start.wrapping_sub(*off), path.clone()));
        }
    }
    let mut images: Vec<(&Image, u64)> = vec![(&image, bias)];
    images.extend(libs.iter().map(|l| (&l.0, l.1)));
    let map = CodeMap::new(&images);
    Ok(Prepared {
        workload,
        markers,
        bias,
        map,
        libraries: libs.into_iter().map(|l| l.2).collect(),
    })
}

/// What [`analyze`] measured besides the report.
#[derive(Clone, Debug)]
pub struct Timed {
    /// The analysis.
    pub report: Report,
    /// Wall time of the traced run (valgrind and analysis together).
    pub elapsed: Duration,
}

/// Traces the prepared workload under lackey and analyzes it. `whole_program` counts every
/// record instead of the region between the markers.
pub fn analyze(p: &mut Prepared, setup: Setup, whole_program: bool) -> Result<Timed, SessionError> {
    let roi = if whole_program {
        RoiFilter::whole_program()
    } else {
        RoiFilter::new(p.markers.begin, p.markers.end)
    };
    let begin = if whole_program {
        u64::MAX
    } else {
        p.markers.begin
    };
    let analyzer = Analyzer::new(&mut p.map, roi, begin, setup)?;
    let t0 = Instant::now();
    let mut cap = capture::lackey(&p.workload)?;
    let result = analyzer.run(&mut cap.trace);
    // Only a parse error leaves the pipe unread (valgrind must be killed); after any other
    // outcome the trace reached its end and valgrind is exiting on its own.
    let stopped_reading = matches!(result, Err(AnalyzeError::Trace(_)));
    let finish = cap.finish(stopped_reading);
    // A failing workload explains a broken trace better than the trace error does.
    finish?;
    let report = result?;
    Ok(Timed {
        report,
        elapsed: t0.elapsed(),
    })
}

/// Analyzer throughput without valgrind's cost: captures the first `max_bytes` of the
/// workload's lackey trace into memory (this sample only: the analysis proper never stores a
/// trace), then times one [`Analyzer`] pass over it in whole-program mode. Returns (records,
/// seconds).
pub fn replay_throughput(
    p: &mut Prepared,
    setup: Setup,
    max_bytes: usize,
) -> Result<(u64, f64), SessionError> {
    use std::io::Read as _;
    let mut buf = Vec::with_capacity(max_bytes);
    {
        let mut cap = capture::lackey(&p.workload)?;
        (&mut cap.trace)
            .take(max_bytes as u64)
            .read_to_end(&mut buf)
            .map_err(CaptureError::Io)?;
        // Dropping the capture kills valgrind.
    }
    let cut = buf
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    buf.truncate(cut);
    let analyzer = Analyzer::new(&mut p.map, RoiFilter::whole_program(), u64::MAX, setup)?;
    let t0 = Instant::now();
    let r = analyzer.run(&buf[..])?;
    Ok((r.records, t0.elapsed().as_secs_f64()))
}
