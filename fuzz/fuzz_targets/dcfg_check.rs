//! The DCFG and DCFG-trace reader (`dep dcfg-check`) on any pair of JSON documents: a
//! report or an error naming the problem, never a panic or a hang.
#![no_main]

use dep_dcfg_out::dcfg::check::{read_dcfg, read_trace, Report};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The DCFG, a zero byte, then the trace.
    let mut parts = data.splitn(2, |&b| b == 0);
    let (Some(d), t) = (parts.next(), parts.next()) else { return };
    let mut report = Report::default();
    let Ok(procs) = read_dcfg(d, &mut report) else { return };
    let Some(t) = t else { return };
    let _ = read_trace(t, &procs, 2, &mut report, None);
});
