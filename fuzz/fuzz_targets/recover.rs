//! Whole-profile recovery, differential: the interpreted walk, compiled code and compiled
//! code without popcnt give the same events or the same error, on one worker and in
//! parallel, for simulated profiles with structure-aware damage; a window of a profile
//! that recovers whole recovers too.
#![no_main]

use dep_recover::{Counts, Engine, Format, Recovery, Renderer, Source};
use libfuzzer_sys::fuzz_target;

/// References past which the engines are compared by their checksums rather than their
/// text: a profile of a few KiB can describe hundreds of MB of references (a loop, a rep
/// string), and four renderings of them held in memory took over a minute per input
/// under the fuzzer's instrumentation (a 21-byte input: 403 MB of text each).
const TEXT_REFS: u64 = 1 << 18;

/// The counts and checksum of a sequential run, and its error, if any.
fn count(rec: &Recovery) -> (Counts, Option<String>) {
    let mut c = Counts::default();
    let err = rec.events(Source::Dep).run(&mut c).err().map(|e| e.to_string());
    (c, err)
}

/// The text rendering of a sequential run and its error, if any.
fn run(rec: &Recovery) -> (Vec<u8>, Option<String>) {
    let mut out = Vec::new();
    let mut r = Renderer::new(Format::Text, &mut out);
    let res = rec.events(Source::Dep).run(&mut r);
    let flushed = r.into_inner().map(|_| ());
    let err = res.err().map(|e| e.to_string()).or_else(|| flushed.err().map(|e| e.to_string()));
    (out, err)
}

fuzz_target!(|input: dep_fuzz::Input| {
    let Some(p) = dep_fuzz::open(&input.build()) else { return };
    let counted = count(&Recovery::with_engine(&p, 1, Engine::Walk));
    if counted.0.reads + counted.0.writes > TEXT_REFS {
        // The same comparisons through the checksum, which sees every field of every
        // reference in order (the text is a function of the same events).
        for engine in [Engine::Compiled, Engine::CompiledWithoutPopcnt] {
            let other = count(&Recovery::with_engine(&p, 1, engine));
            assert_eq!(counted.1, other.1, "{engine:?}: a different error from the walk's");
            if counted.1.is_none() {
                assert_eq!(counted.0, other.0, "{engine:?}: different events from the walk's");
            }
        }
        let rec = Recovery::with_engine(&p, 2, Engine::Compiled);
        let res = rec.events(Source::Dep).merged(|_| Counts::default());
        assert_eq!(res.is_ok(), counted.1.is_none(), "parallel: {:?}, sequential: {:?}", res.as_ref().err(), counted.1);
        if let Ok(threads) = res {
            let mut all = Counts::default();
            threads.iter().for_each(|t| all.add(t));
            assert_eq!(all, counted.0, "parallel: different events from sequential");
        }
        return;
    }
    let walk = run(&Recovery::with_engine(&p, 1, Engine::Walk));
    for engine in [Engine::Compiled, Engine::CompiledWithoutPopcnt] {
        let other = run(&Recovery::with_engine(&p, 1, engine));
        assert_eq!(walk.1, other.1, "{engine:?}: a different error from the walk's");
        if walk.1.is_none() {
            assert!(walk.0 == other.0, "{engine:?}: different events from the walk's");
        }
    }
    // In parallel: the same result in the same order.
    let rec = Recovery::with_engine(&p, 2, Engine::Compiled);
    let mut out = Vec::new();
    let res = rec.events(Source::Dep).rendered(Format::Text, &mut out);
    assert_eq!(res.is_ok(), walk.1.is_none(), "parallel: {res:?}, sequential: {:?}", walk.1);
    if res.is_ok() {
        assert!(out == walk.0, "parallel: different events from sequential");
    }
    // The truth stream's replay never fails badly either.
    let _ = rec.events(Source::Truth).run(&mut Counts::default());
    // A window of the middle third, by an index counted from the profile: where the whole
    // run recovered, so does the window.
    if let (None, Ok(index)) = (&walk.1, dep_recover::seek::count(&rec, &|_| {})) {
        let total = (0..p.threads.len() as u32).map(|t| index.instructions(t)).max().unwrap_or(0);
        let window = dep_recover::Window { from: total / 3, to: total / 3 * 2 + 1, thread: None };
        let mut rec = Recovery::with_engine(&p, 2, Engine::Compiled);
        if rec.seek(window, Some(&index)).unwrap() {
            let mut out = Vec::new();
            let res = rec.events(Source::Dep).rendered(Format::Text, &mut out);
            assert!(res.is_ok(), "window {window:?}: {res:?}");
        }
    }
});
