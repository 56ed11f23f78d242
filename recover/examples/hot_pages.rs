//! A complete analysis on the event API, to copy: the 4 KiB pages each thread touched most,
//! with its reads and writes there.
//!
//! ```text
//! cargo run --release -p dep-recover --example hot_pages -- PROFILE [N]
//! ```
//!
//! A sink gets `begin`, then blocks and their references in each thread's execution order,
//! then `finish`; each method answers whether it wants more (`Ok(false)` stops it without an
//! error). Its error type is its own; recovery's errors convert into it. Here each thread
//! gets a sink of its own, run on all cores (`Events::per_thread`).

use dep_profile::container::Profile;
use dep_profile::semantics::Access;
use dep_recover::{BlockEvent, MemEvent, RecoverError, Recovery, Sink, Source};
use std::collections::HashMap;

/// Reads and writes per page of one thread.
#[derive(Default)]
pub struct HotPages {
    pub pages: HashMap<u64, [u64; 2]>,
}

/// What can go wrong: here only recovery itself (a damaged profile, say).
#[derive(Debug, thiserror::Error)]
pub enum HotPagesError {
    #[error(transparent)]
    Recover(#[from] RecoverError),
}

impl Sink for HotPages {
    type Error = HotPagesError;

    fn block(&mut self, _b: &BlockEvent) -> Result<bool, HotPagesError> {
        Ok(true)
    }

    fn refs(&mut self, _b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, HotPagesError> {
        for r in refs {
            // An access that crosses a page boundary counts for the page it starts in.
            self.pages.entry(r.addr >> 12).or_default()[(r.access == Access::Write) as usize] += 1;
        }
        Ok(true)
    }
}

/// Each thread's pages, busiest first (then by address), at most `n` of them.
pub fn hottest(rec: &Recovery, n: usize) -> Result<Vec<Vec<(u64, [u64; 2])>>, HotPagesError> {
    let threads = rec.events(Source::Dep).per_thread(|_| HotPages::default())?;
    Ok(threads
        .into_iter()
        .map(|t| {
            let mut v: Vec<(u64, [u64; 2])> = t.pages.into_iter().map(|(p, c)| (p << 12, c)).collect();
            v.sort_by_key(|&(p, c)| (std::cmp::Reverse(c[0] + c[1]), p));
            v.truncate(n);
            v
        })
        .collect())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: hot_pages PROFILE [N]")?;
    let n = args.next().map_or(Ok(10), |s| s.parse())?;
    let profile = Profile::open(path)?;
    let rec = Recovery::new(&profile, 0);
    for (t, pages) in hottest(&rec, n)?.iter().enumerate() {
        println!("thread {t}");
        for (page, [reads, writes]) in pages {
            println!("  {page:#014x} {reads:>10} reads {writes:>10} writes");
        }
    }
    Ok(())
}
