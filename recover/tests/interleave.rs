//! The interleaver against its contract, on simulated profiles with sync records numbered
//! as the collector numbers them and threads created after one of their creator's: every
//! thread's events arrive whole and in order, sync records in the order of their numbers
//! across threads, and nothing of a thread before the sync record its creator passed
//! before creating it; a consumer that stops ends the merge without an error.

mod common;

use common::program_profile;
use dep_recover::{BlockEvent, ByThread, Marker, MemEvent, RecoverError, Recovery, RepRun, Run, Sink, Source, Turn};

/// What the test follows of a thread's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    Block(u64),
    Sync(u64),
}

/// Collects a thread's items and sends them in batches of `batch`.
struct Send<F: FnMut(Vec<Item>) -> bool> {
    items: Vec<Item>,
    batch: usize,
    send: F,
}

impl<F: FnMut(Vec<Item>) -> bool> Send<F> {
    fn push(&mut self, i: Item) -> bool {
        self.items.push(i);
        self.items.len() < self.batch || (self.send)(std::mem::take(&mut self.items))
    }
}

impl<F: FnMut(Vec<Item>) -> bool> Sink for Send<F> {
    type Error = RecoverError;
    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        Ok(self.push(Item::Block(b.addr)))
    }
    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, RecoverError> {
        Ok(match m {
            Marker::Sync { seq, .. } => self.push(Item::Sync(seq)),
            _ => true,
        })
    }
    fn finish(&mut self) -> Result<(), RecoverError> {
        if !self.items.is_empty() {
            (self.send)(std::mem::take(&mut self.items));
        }
        Ok(())
    }
}

/// One thread's items in order, from the plain run.
#[derive(Default)]
struct Collect(Vec<Item>);

impl Sink for Collect {
    type Error = RecoverError;
    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        self.0.push(Item::Block(b.addr));
        Ok(true)
    }
    fn marker(&mut self, _: u32, m: Marker) -> Result<bool, RecoverError> {
        if let Marker::Sync { seq, .. } = m {
            self.0.push(Item::Sync(seq));
        }
        Ok(true)
    }
}

/// Runs the interleaver with turns opened by their sync records, batches of `batch` items
/// and `shared` batches ahead among the producers, stopping after `stop` items if given:
/// (thread, turn, item) in the order consumed.
fn interleave(rec: &Recovery, batch: usize, shared: usize, stop: Option<usize>) -> Vec<(u32, u64, Item)> {
    interleave_apart(rec, batch, shared, stop, 0)
}

/// [`interleave`], recovering apart from their sinks the threads holding more than one of
/// `cores`' share of the chunks ([`Events::apart`](dep_recover::Events::apart)).
fn interleave_apart(rec: &Recovery, batch: usize, shared: usize, stop: Option<usize>, cores: usize) -> Vec<(u32, u64, Item)> {
    let mut got = Vec::new();
    rec.events(Source::Dep)
        .apart(cores)
        .interleaved(
            shared,
            |_, tx| Send { items: Vec::new(), batch, send: move |b| tx.send((b, 0)) },
            |t, turn, b: &mut (Vec<Item>, usize)| {
                while let Some(&i) = b.0.get(b.1) {
                    if stop == Some(got.len()) {
                        return Ok(Turn::Stop);
                    }
                    if let Item::Sync(seq) = i {
                        if seq != turn {
                            return Ok(Turn::Yield(seq));
                        }
                    }
                    got.push((t, turn, i));
                    b.1 += 1;
                }
                Ok(Turn::Next)
            },
        )
        .unwrap();
    got
}

#[test]
fn turns_follow_the_sync_records() {
    let mut crossings = 0;
    let mut spawned = 0;
    for seed in 0..24u64 {
        let threads = 2 + (seed % 3) as usize;
        let (_dir, p) = program_profile(seed, threads, 300, true);
        let rec = Recovery::new(&p, 2);
        let mut by = ByThread::new(|_| Collect::default());
        rec.events(Source::Dep).run(&mut by).unwrap();
        let want: Vec<Vec<Item>> = by.into_threads().into_iter().map(|c| c.0).collect();
        let syncs: usize = want.iter().map(|w| w.iter().filter(|i| matches!(i, Item::Sync(_))).count()).sum();
        assert!(syncs > 0, "seed {seed}: no sync records to interleave by");

        for (batch, shared, cores) in [(1, 0, 0), (1, 3, 0), (7, 0, 0), (7, 100, 0), (1000, 0, 0), (1, 0, usize::MAX), (7, 100, usize::MAX)]
        {
            let got = interleave_apart(&rec, batch, shared, None, cores);
            // Every thread's items, whole and in order.
            for (t, w) in want.iter().enumerate() {
                let mine: Vec<Item> = got.iter().filter(|g| g.0 == t as u32).map(|g| g.2).collect();
                assert_eq!(&mine, w, "seed {seed} batch {batch}: thread {t}'s stream");
            }
            // Sync records in the order of their numbers, turns in order.
            let seqs: Vec<u64> = got.iter().filter_map(|g| if let Item::Sync(s) = g.2 { Some(s) } else { None }).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seed {seed} batch {batch}: sync records out of order: {seqs:?}");
            assert!(got.windows(2).all(|w| w[0].1 <= w[1].1), "seed {seed} batch {batch}: a turn taken out of order");
            // Nothing of a thread before its creator's sync record.
            for (t, info) in p.threads.iter().enumerate() {
                if let Some(s) = info.spawn {
                    spawned += 1;
                    let at = got.iter().position(|g| g.0 == s.parent && g.2 == Item::Sync(s.seq)).expect("the spawn's sync record");
                    assert!(got[..at].iter().all(|g| g.0 != t as u32), "seed {seed}: thread {t} ran before its creation");
                }
            }
            crossings += got.windows(2).filter(|w| w[0].0 != w[1].0).count();
        }
    }
    // The profiles really interleave, and threads are created.
    assert!(crossings > 100, "only {crossings} switches between threads");
    assert!(spawned > 0);
}

#[test]
fn a_consumer_that_stops_ends_the_merge() {
    let (_dir, p) = program_profile(5, 3, 400, true);
    let rec = Recovery::new(&p, 2);
    let all = interleave(&rec, 3, 0, None);
    assert!(all.len() > 50);
    // Producers waiting for room ahead (none shared, or a little) give up when it stops.
    for shared in [0, 2] {
        let some = interleave(&rec, 3, shared, Some(50));
        assert_eq!(some[..], all[..50]);
        // Recovered apart: a recovery still sending to the stopped sink ends too.
        let some = interleave_apart(&rec, 3, shared, Some(50), usize::MAX);
        assert_eq!(some[..], all[..50]);
    }
}

/// Every call a thread's sink receives, with what it carries.
#[derive(Clone, Debug, PartialEq)]
enum Call {
    Block { addr: u64, version: u32, id: Option<u32>, plan: Option<usize>, executed: u32, interrupted: bool },
    Refs(Vec<MemEvent>),
    Rep(RepRun),
    Marker(u32, Marker),
    Run { thread: u32, blocks: Vec<(u64, u32, u16, u16)>, refs: Vec<MemEvent> },
    Finish,
}

impl Call {
    fn block(b: &BlockEvent) -> Call {
        let plan = b.plan.map(|p| p as *const _ as usize);
        Call::Block { addr: b.addr, version: b.version, id: b.id, plan, executed: b.executed, interrupted: b.interrupted }
    }
}

/// Sends each call as it comes (a batch of one), rep strings as runs.
struct Log<F: FnMut(Call) -> bool>(F);

impl<F: FnMut(Call) -> bool> Sink for Log<F> {
    type Error = RecoverError;
    fn block(&mut self, b: &BlockEvent) -> Result<bool, RecoverError> {
        Ok((self.0)(Call::block(b)))
    }
    fn refs(&mut self, b: &BlockEvent, refs: &[MemEvent]) -> Result<bool, RecoverError> {
        Ok((self.0)(Call::block(b)) && (self.0)(Call::Refs(refs.to_vec())))
    }
    fn rep(&mut self, b: &BlockEvent, run: &RepRun) -> Result<bool, RecoverError> {
        Ok((self.0)(Call::block(b)) && (self.0)(Call::Rep(*run)))
    }
    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, RecoverError> {
        Ok((self.0)(Call::Marker(thread, m)))
    }
    fn run(&mut self, run: &Run) -> Result<bool, RecoverError> {
        let blocks = run.blocks().iter().map(|b| (b.addr, b.id, b.executed, b.refs)).collect();
        Ok((self.0)(Call::Run { thread: run.thread, blocks, refs: run.refs().to_vec() }))
    }
    fn finish(&mut self) -> Result<(), RecoverError> {
        (self.0)(Call::Finish);
        Ok(())
    }
}

/// Each thread's calls, the whole stream of each in its first turn, and how the run ended.
fn calls_then(rec: &Recovery, cores: usize) -> (Vec<Vec<Call>>, Result<(), String>) {
    let mut got = vec![Vec::new(); rec.profile.threads.len()];
    let end = rec.events(Source::Dep).apart(cores).interleaved(
        0,
        |_, tx| Log(move |c| tx.send(c)),
        |t, _, c: &mut Call| {
            got[t as usize].push(c.clone());
            Ok(Turn::Next)
        },
    );
    (got, end.map_err(|e| e.to_string()))
}

fn calls(rec: &Recovery, cores: usize) -> Vec<Vec<Call>> {
    let (got, end) = calls_then(rec, cores);
    end.unwrap();
    got
}

/// A thread recovered apart from its sink (its events recorded on tapes and replayed)
/// gives the sink every call, with every field, that recovering in place gives: blocks,
/// references, rep strings, markers and compiled runs, over threads long enough for many
/// tapes each.
#[test]
fn threads_recovered_apart_give_their_sinks_the_same_calls() {
    let mut reps = 0;
    let mut runs = 0;
    for seed in 0..4u64 {
        let (_dir, p) = program_profile(100 + seed, 2 + (seed % 2) as usize, 30_000, true);
        let rec = Recovery::new(&p, 2);
        let here = calls(&rec, 0);
        let apart = calls(&rec, usize::MAX);
        for (t, (h, a)) in here.iter().zip(&apart).enumerate() {
            assert_eq!(h.len(), a.len(), "seed {seed} thread {t}: calls");
            if let Some(k) = h.iter().zip(a).position(|(x, y)| x != y) {
                panic!("seed {seed} thread {t}: call {k} in place {:?}, apart {:?}", h[k], a[k]);
            }
        }
        let all = here.iter().flatten();
        reps += all.clone().filter(|c| matches!(c, Call::Rep(_))).count();
        runs += all.filter(|c| matches!(c, Call::Run { .. })).count();
    }
    // The streams hold what the tapes must carry.
    assert!(reps > 0 && runs > 0, "{reps} rep strings, {runs} runs");
}

/// A damaged chunk met by a thread recovered apart ends its stream as in place: the same
/// calls before it, then the same error, and no call after it.
#[test]
fn a_damaged_chunk_ends_a_thread_recovered_apart_as_in_place() {
    let (dir, p) = program_profile(7, 2, 30_000, true);
    let chunks = Recovery::new(&p, 2).thread_chunks(1).to_vec();
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    // A byte of the second chunk's payload flipped: its checksum no longer matches.
    let mut bytes = std::fs::read(p.path()).unwrap();
    bytes[chunks[1].offset as usize + 40] ^= 0x5a;
    let bad = dir.path().join("bad.dep");
    std::fs::write(&bad, &bytes).unwrap();
    let p = dep_profile::container::Profile::open(&bad).unwrap();
    let rec = Recovery::new(&p, 2);
    let (here, here_end) = calls_then(&rec, 0);
    let (apart, apart_end) = calls_then(&rec, usize::MAX);
    let e = here_end.expect_err("the damaged chunk is met");
    assert!(e.contains("checksum"), "{e}");
    assert_eq!(apart_end, Err(e));
    assert_eq!(here, apart);
    assert!(!here[1].is_empty() && !here[1].contains(&Call::Finish), "thread 1 ends at the error, unfinished");
}
