//! The order between threads (format version 3): every synchronisation point the collector
//! stamps carries a number from one process-wide counter. Checked on corpus programs: the
//! numbers are each used once, from 0 without a gap; each thread's rise; every atomic
//! instruction executed has its stamp just before it (and after it); system calls have
//! theirs before and after. Needs the DynamoRIO build and gcc.

use dep_recover::events::{BlockEvent, Marker};
use dep_recover::Sink;
use dep_recover::{Recovery, Source};
use std::process::{Command, Stdio};

mod common;
use common::{corpus, dep};

#[derive(Default)]
struct Stamps {
    /// Per thread: the numbers in stream order.
    seqs: Vec<Vec<u64>>,
    /// The current block's atomic instructions (by index) and whether it ends in a syscall.
    atomics: Vec<u16>,
    syscall: Option<u16>,
    /// Atomic instructions executed, and those with a stamp before them and after them.
    atomic_runs: u64,
    atomic_stamped: u64,
    atomic_after: u64,
    before_syscall: u64,
    after_syscall: u64,
    /// Stamps that name an instruction that is neither atomic nor a system call.
    misplaced: Vec<String>,
    executed: u32,
    /// The last stamp, until the next record says whether it was a watched call's (a call
    /// record follows it): how it counted, to be taken back then.
    last: Option<Counted>,
    /// Watched calls, and those with their stamp.
    calls: u64,
    calls_stamped: u64,
}

#[derive(Clone, Copy)]
enum Counted {
    AtomicBefore,
    AtomicAfter,
    Misplaced,
    Other,
}

impl Sink for Stamps {
    type Error = dep_recover::RecoverError;

    fn block(&mut self, b: &BlockEvent) -> Result<bool, Self::Error> {
        self.last = None;
        let plan = b.plan.expect("decodable blocks");
        self.atomics = plan.insns.iter().enumerate().filter(|(k, i)| i.atomic && (*k as u32) < b.executed).map(|(k, _)| k as u16).collect();
        self.atomic_runs += self.atomics.len() as u64;
        self.syscall = plan.insns.iter().position(|i| i.flow == dep_profile::semantics::Flow::Syscall).map(|k| k as u16);
        self.executed = b.executed;
        Ok(true)
    }
    fn marker(&mut self, thread: u32, m: Marker) -> Result<bool, Self::Error> {
        if let Marker::Call { .. } = m {
            self.calls += 1;
            // The stamp before it was the call's, not what it was counted as.
            let prev = self.last.take();
            match prev {
                Some(Counted::AtomicBefore) => self.atomic_stamped -= 1,
                Some(Counted::AtomicAfter) => self.atomic_after -= 1,
                Some(Counted::Misplaced) => drop(self.misplaced.pop()),
                Some(Counted::Other) | None => {}
            }
            self.calls_stamped += prev.is_some() as u64;
            return Ok(true);
        }
        self.last = None;
        if let Marker::Sync { seq, insn, after } = m {
            let t = thread as usize;
            if self.seqs.len() <= t {
                self.seqs.resize(t + 1, Vec::new());
            }
            self.seqs[t].push(seq);
            self.last = Some(match insn {
                Some(k) if self.atomics.contains(&k) && !after => {
                    self.atomic_stamped += 1;
                    Counted::AtomicBefore
                }
                Some(k) if self.atomics.contains(&k) => {
                    self.atomic_after += 1;
                    Counted::AtomicAfter
                }
                Some(k) if Some(k) == self.syscall => {
                    if after {
                        self.after_syscall += 1
                    } else {
                        self.before_syscall += 1
                    }
                    Counted::Other
                }
                Some(k) => {
                    self.misplaced.push(format!("thread {thread} seq {seq} at instruction {k} after={after}"));
                    Counted::Misplaced
                }
                None => Counted::Other,
            });
        }
        Ok(true)
    }
}

#[test]
fn sync_stamps_order_threads() {
    for prog in ["threads", "syscalls", "signal_loop"] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.dep");
        let o =
            Command::new(dep()).arg("record").arg("-o").arg(&p).arg("--").arg(corpus().join(prog)).stdin(Stdio::null()).output().unwrap();
        assert!(o.status.success(), "{prog}: {}", String::from_utf8_lossy(&o.stderr));
        let profile = dep_profile::container::Profile::open(&p).unwrap();
        assert_eq!(profile.meta.format_version, dep_profile::container::VERSION);
        let rec = Recovery::new(&profile, 0);
        let mut s = Stamps::default();
        rec.events(Source::Dep).run(&mut s).unwrap();
        let mut all: Vec<u64> = s.seqs.iter().flatten().copied().collect();
        for (t, seqs) in s.seqs.iter().enumerate() {
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{prog}: thread {t}'s numbers do not rise");
        }
        all.sort_unstable();
        let n = all.len() as u64;
        assert!(all.iter().copied().eq(0..n), "{prog}: the numbers are not 0..{n} each once");
        assert!(s.misplaced.is_empty(), "{prog}: {:?}", &s.misplaced[..s.misplaced.len().min(5)]);
        assert_eq!(s.atomic_stamped, s.atomic_runs, "{prog}: every atomic instruction executed has its stamp");
        // And one after it, unless it ends its block (DynamoRIO's length limit) or faulted.
        assert!(
            s.atomic_after <= s.atomic_runs && s.atomic_after * 10 >= s.atomic_runs * 9,
            "{prog}: {} of {} atomics stamped after",
            s.atomic_after,
            s.atomic_runs
        );
        assert!(s.before_syscall > 0 && s.after_syscall > 0, "{prog}: no system call stamped");
        assert!(s.after_syscall <= s.before_syscall);
        assert_eq!(s.calls_stamped, s.calls);
        if prog == "threads" {
            // Its workers lock a mutex: watched calls, each stamped at its entry.
            assert!(s.calls > 100, "threads: only {} watched calls", s.calls);
            assert!(s.atomic_runs > 1000, "threads: only {} atomics", s.atomic_runs);
            assert!(s.seqs.len() >= 9);
        }
    }
}
