//! `dep edges`' chunk summaries in bounded memory: summaries that wait to be merged behind
//! a slow chunk before them hold what they counted, not tables sized for the worst case.

use dep_dcfg_out::edges::EdgeCounts;
use dep_recover::{Recovery, Source};

#[path = "../../tests/common/peak_alloc.rs"]
mod peak_alloc;

#[test]
fn chunk_summaries_waiting_to_merge_hold_what_they_counted() {
    let _turn = peak_alloc::turn();
    let (alone, few, both) = peak_alloc::long_and_short_threads(|p| {
        let rec = Recovery::new(p, 2);
        let (counts, peak) = peak_alloc::measure(|| rec.events(Source::Blocks).merged(|_| EdgeCounts::new(&rec.plans)).unwrap());
        assert_eq!(counts.len(), p.threads.len());
        peak
    });
    // Held as they were made, the threads' and the waiting chunks' pair tables took 64 KiB
    // each (3000 threads: 190 MiB).
    assert!(few < 8 << 20, "{} KiB at the peak for 3000 short threads", few >> 10);
    assert!(both < alone + few + (2 << 20), "{} KiB at the peak, {} KiB and {} KiB apart", both >> 10, alone >> 10, few >> 10);
}
