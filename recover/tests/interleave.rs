//! The interleaver against its contract, on simulated profiles with sync records numbered
//! as the collector numbers them and threads created after one of their creator's: every
//! thread's events arrive whole and in order, sync records in the order of their numbers
//! across threads, and nothing of a thread before the sync record its creator passed
//! before creating it; a consumer that stops ends the merge without an error.

mod common;

use common::program_profile;
use dep_recover::{BlockEvent, ByThread, Marker, RecoverError, Recovery, Sink, Source, Turn};

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
    let mut got = Vec::new();
    rec.events(Source::Dep)
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

        for (batch, shared) in [(1, 0), (1, 3), (7, 0), (7, 100), (1000, 0)] {
            let got = interleave(&rec, batch, shared, None);
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
    }
}
